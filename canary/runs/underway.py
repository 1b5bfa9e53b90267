"""The runs a runner has under way, and the cut that ends them early when the daemon stops.

A stopping daemon lets the runs under way finish within its drain (``settle``); those still
going when it ends are cut (``cut``): a run waiting for its agent or for its guard's signal stops
waiting, and ends ``error`` with the cut's reason unless a firing already tied it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from canary.runs.conversation import Conversation

__all__ = ["Underway"]

#: How often a run waiting for its agent looks for a cut.
POLL = 0.1


class Underway:
    """A count of runs (and batches of runs) under way, and the reason they were cut, if they were."""

    def __init__(self) -> None:
        self._count = 0
        self._settled = threading.Condition()
        self._cut = threading.Event()
        self._reason = ""

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Count a run, or a batch of runs, as under way for as long as the block lasts."""
        with self._settled:
            self._count += 1
        try:
            yield
        finally:
            with self._settled:
                self._count -= 1
                self._settled.notify_all()

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every run to finish; whether they did."""
        with self._settled:
            return self._settled.wait_for(lambda: self._count == 0, max(0.0, timeout))

    def cut(self, reason: str) -> None:
        """End every wait of the runs under way, and of any begun later, with ``reason``."""
        self._reason = reason
        self._cut.set()

    @property
    def reason(self) -> str | None:
        """Why the runs were cut; None while they were not."""
        return self._reason if self._cut.is_set() else None

    def ask(self, call: Callable[[], Conversation]) -> Conversation:
        """The agent's replies from ``call``, or, once the runs are cut, the cut's reason as the error.

        A cut leaves the agent's request to end in a thread of its own.
        """
        replies: Future[Conversation] = Future()

        def work() -> None:
            try:
                replies.set_result(call())
            except BaseException as exc:
                replies.set_exception(exc)

        threading.Thread(target=work, name="canary-agent", daemon=True).start()
        while True:
            try:
                return replies.result(timeout=POLL)
            except TimeoutError:
                if self._cut.is_set():
                    return Conversation([], self._reason)
