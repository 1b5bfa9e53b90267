"""Asking the agent turn by turn in one conversation, for a canary with ``[[canary.turn]]`` tables.

Every turn is one request to the agent, in order. From the second turn on the
request carries the conversation id the previous reply named. The proxy is armed
when the injection turn begins, so the model calls of earlier turns pass
through. The first turn that fails ends the conversation, and the run's error
names that turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from canary.runs.agent import AgentDriver

__all__ = ["Conversation", "converse", "first_turn_with"]


@dataclass(frozen=True)
class Conversation:
    """What the agent answered, turn by turn, and why it stopped early (if it did)."""

    answers: list[str] = field(default_factory=list)
    error: str | None = None
    answered: float | None = None  # time.time() of the last answer, when every turn was answered

    @property
    def ok(self) -> bool:
        """Whether every turn was answered."""
        return self.error is None

    @property
    def last(self) -> str | None:
        """The latest answer the agent gave."""
        return self.answers[-1] if self.answers else None


def converse(
    driver: AgentDriver,
    prompts: Sequence[str],
    *,
    nonce: str,
    inject_turn: int,
    inject: str,
    timeout: float,
    arm: Callable[[], None],
    named: Callable[[str], None] | None = None,
) -> Conversation:
    """Ask every turn's prompt in order, all within ``timeout`` seconds; ``inject`` travels in the
    request of ``inject_turn`` only. ``named`` hears the conversation id the agent's reply names."""
    deadline = time.time() + timeout
    answers: list[str] = []
    conversation: str | None = None
    several = len(prompts) > 1
    for index, prompt in enumerate(prompts):
        where = f"turn {index + 1}: " if several else ""
        if index == inject_turn:
            arm()
        left = timeout if index == 0 else deadline - time.time()
        if left <= 0:
            return Conversation(answers, f"{where}the run's timeout was over before this turn was asked")
        reply = driver.ask(prompt, nonce=nonce, inject=inject if index == inject_turn else "",
                           timeout=left, conversation=conversation)
        if not reply.ok:
            return Conversation(answers, where + (reply.error or "the agent gave no answer"))
        assert reply.answer is not None
        answers.append(reply.answer)
        if index + 1 < len(prompts):
            if reply.conversation is None:
                why = reply.conversation_error or "the agent's reply names no conversation id"
                return Conversation(answers, f"{where}{why}, so turn {index + 2} cannot continue "
                                    "the conversation (check [agent] conversation)")
            conversation = reply.conversation
            if named is not None:
                named(conversation)
    return Conversation(answers, None, time.time())


def first_turn_with(text: str | None, answers: Sequence[str], since: int) -> int | None:
    """The first turn (counted from 1) from ``since`` (from 0) whose answer holds ``text``."""
    if not text:
        return None
    return next((i + 1 for i, answer in enumerate(answers) if i >= since and text in answer), None)
