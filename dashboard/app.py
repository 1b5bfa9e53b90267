"""``canary dashboard``: the Textual app over the store, with or without a running daemon.

Every store read and every call to the daemon runs in a thread worker that
posts a message back; worker errors all reach ``on_worker_state_changed``,
which turns them into a visible notice. The clock is injected, so every age
on screen is measured against it.

Every ``refresh_every`` seconds the app asks the store whether anything was
written (``canary.store.changes``: SQLite's write counter, which the daemon's
heartbeat moves every tick); the overview is read again only then (at most once
every ``BUSY_LOOKS`` looks while it is written all the time), or once
``IDLE_REFRESH`` seconds have passed, so that ages on screen keep up. A key that
changes what is shown (a window, a run, a mute) reads it at once.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.message_pump import MessagePump
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from canary.config.commandline import command_line
from canary.config.settings import Config
from canary.errors import CanaryError, UnavailableError
from canary.status.mutes import no_site
from canary.store.changes import StoreChanges
from canary.store.engine import Store
from canary.store.sites import Site
from canary.terminal import safe
from canary.vocabulary import EXIT_UNAVAILABLE
from dashboard.jobs import InFlight
from dashboard.messages import GuardMuted, OverviewLoaded, RunsQueued
from dashboard.model import WINDOWS, Overview, WindowSpec, load_overview, window_named
from dashboard.screens.alerts import AlertsScreen
from dashboard.screens.mute import MuteChoice, MuteScreen
from dashboard.screens.overview import OverviewScreen
from dashboard.stores import open_store, project_rows, reopened

__all__ = ["DashboardApp", "run_dashboard"]

#: What each kind of worker was doing, for the notice shown when it fails.
_DOING = {
    "refresh": "Reading the store failed",
    "detail": "Reading the guard's history failed",
    "alerts": "Reading the alert history failed",
    "run": "Running canaries failed",
    "mute": "Muting failed",
}


def read_only_action(start: str) -> str:
    """The notice for an action that needs the daemon; ``start`` is the command that starts it."""
    return ("Read-only: the daemon is not running, so canaries cannot be run and guards cannot be muted "
            f"from here. Start it with `{start}`.")


def no_site_to_mute(site: Site, start: str) -> str:
    """The notice for a mute asked of a shared store that holds no rows of the project yet."""
    return f"Cannot mute: {safe(no_site(site))}. Start one with `{start}`."

#: Seconds after which the overview is read again though the store did not change (ages move on).
IDLE_REFRESH = 30.0
#: A store written to all the time is read again every this many looks (6 s by default).
BUSY_LOOKS = 3
#: Seconds quitting waits for the jobs in flight (a store read) to end before the store closes.
QUIT_WAIT = 2.0


def utc_now() -> datetime:
    """The real clock, in UTC."""
    return datetime.now(UTC)


class DashboardApp(App[int]):
    """The terminal dashboard: which guards are awake, and the proof."""

    CSS_PATH = Path(__file__).with_name("dashboard.tcss")
    TITLE = "guard-canary"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("R", "run_all", "Run all"),
        Binding("w", "cycle_window", "Window"),
        Binding("a", "alerts", "Alerts"),
        Binding("t", "team", "Team"),
    ]

    overview: reactive[Overview | None] = reactive(None)
    window: reactive[WindowSpec] = reactive(WINDOWS[1])
    pending: reactive[frozenset[str]] = reactive(frozenset())

    def __init__(
        self,
        config: Config,
        *,
        store: Store | None = None,
        clock: Callable[[], datetime] = utc_now,
        window: str = "24h",
        refresh_every: float = 2.0,
        token_file: Path | None = None,
        readable: bool | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        #: The command that starts this config's daemon, ``--config`` in it when it is not the default.
        self.start_daemon = command_line("canary daemon", config.path)
        #: The store opened; a shared store whose site is absent until the project's daemon makes it.
        self.store = store if store is not None else open_store(config)
        self.clock = clock
        self.refresh_every = refresh_every
        self.token_file = token_file
        self.readable = readable
        self.set_reactive(DashboardApp.window, window_named(window))
        self._busy: set[str] = set()
        self._jobs = InFlight()
        self._queued: dict[str, tuple[Callable[[], Message | None], MessagePump | None]] = {}
        self._baseline: dict[str, datetime | None] = {}
        self._last_error: str | None = None
        self._changes = StoreChanges(self.store.path)
        self._read_at: float | None = None  # monotonic: when the overview was last read
        self._unread = False  # the store was written since the overview was last read

    # -- workers ---------------------------------------------------------------

    def read(self, group: str, job: Callable[[], Message | None], target: MessagePump | None = None,
             *, again: bool = False) -> None:
        """Run ``job`` in a thread worker and post its message to ``target`` (the app by default).

        One worker per group at a time: a read asked for while one is in flight is dropped,
        or, with ``again``, run once the one in flight is done.
        """
        if group in self._busy:
            if again:
                self._queued[group] = (job, target)
            return
        self._busy.add(group)
        self.act(group, job, target)

    def act(self, group: str, job: Callable[[], Message | None], target: MessagePump | None = None) -> None:
        """Run ``job`` in a thread worker, however many of its group are in flight; a job that
        returns None has nothing to say."""
        receiver = target if target is not None else self

        def work() -> None:
            with self._jobs.running():
                message = job()
            if message is not None:
                receiver.post_message(message)

        self.run_worker(work, name=group, group=group, thread=True, exit_on_error=False)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place a failed worker becomes a visible notice."""
        worker = event.worker
        if event.state not in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            return
        self._busy.discard(worker.group)
        queued = self._queued.pop(worker.group, None)
        if queued is not None:
            self.read(worker.group, *queued)
        if event.state == WorkerState.ERROR:
            text = f"{_DOING.get(worker.group, 'A background task failed')}: {safe(str(worker.error))}"
            if text != self._last_error:
                self.notify(text, severity="error", timeout=10, markup=False)
            self._last_error = text
        elif event.state == WorkerState.SUCCESS and worker.group == "refresh":
            self._last_error = None

    # -- the overview ------------------------------------------------------------

    def get_default_screen(self) -> Screen[None]:
        return OverviewScreen()

    def on_mount(self) -> None:
        self.refresh_overview()
        self.set_interval(self.refresh_every, self.look)

    def _due(self, at: float) -> bool:
        """Whether a look at ``at`` (monotonic) reads the overview: after a write, once ``BUSY_LOOKS``
        looks have passed since the last read (a store written every second is read every few
        seconds); without one, once ``IDLE_REFRESH`` seconds have passed."""
        if self._read_at is None:
            return True
        since = at - self._read_at
        if self._unread:
            return since >= self.refresh_every * (BUSY_LOOKS - 0.5)  # half a look for the timer's jitter
        return since >= IDLE_REFRESH

    def look(self) -> None:
        """Read the overview again if the store changed (or ``IDLE_REFRESH`` has passed)."""
        self.refresh_overview(changed_only=True)

    def refresh_overview(self, *, again: bool = False, changed_only: bool = False) -> None:
        """Read every guard's status and window figures from the store, in a thread."""
        config, window, readable = self.config, self.window, self.readable
        now = self.clock()

        def job() -> Message | None:
            # The counter is read before the overview, so a write during the read is seen next time.
            self._unread = self._changes.changed() or self._unread
            if self._changes.take_replaced():
                self.store.close()  # the daemon set the file aside: read the new one, not the old
            started = time.monotonic()
            if changed_only and not self._due(started):
                return None
            self._read_at, self._unread = started, False
            self.store = store = reopened(self.store)  # a shared store's site, once its daemon made it
            with project_rows(store) as rows:
                overview = load_overview(rows, config, now=now, window=window, readable=readable)
            return OverviewLoaded(replace(overview, missing_site=store.site) if store.absent else overview)

        self.read("refresh", job, again=again)

    def on_overview_loaded(self, message: OverviewLoaded) -> None:
        overview = message.overview
        if overview.window != self.window:
            return  # read before the window changed; the read for the new one is queued
        landed = {
            guard for guard, before in self._baseline.items()
            if (row := overview.row(guard)) is None or row.status.last_run != before
        }
        for guard in landed:
            del self._baseline[guard]
        self.pending = frozenset(self._baseline)
        self.overview = overview

    def watch_window(self) -> None:
        if self.is_running:
            self.refresh_overview(again=True)

    def action_cycle_window(self) -> None:
        """Show the next window: 1h, 24h, 7d, 30d."""
        index = WINDOWS.index(self.window)
        self.window = WINDOWS[(index + 1) % len(WINDOWS)]
        self.notify(f"window: {self.window.label}", timeout=2)

    # -- actions on guards -----------------------------------------------------------

    def request_run(self, selection: list[str]) -> None:
        """Ask the daemon to run canaries now (every canary when the selection is empty)."""
        overview = self.overview
        if overview is None:
            self.notify("Still reading the store; try again in a moment.", severity="warning")
            return
        if overview.read_only:
            self.notify(read_only_action(self.start_daemon), severity="warning", timeout=8, markup=False)
            return
        # The daemon that beats in this store says where it listens; the config is the fallback.
        beat_address = (overview.daemon.control or "").removeprefix("http://")
        address = beat_address or self.config.daemon.control

        def job() -> Message:
            from canary.daemon.control import connect, token_path

            client = connect(address, self.token_file or token_path(self.config.path, self.config.project))
            if client is None:
                raise UnavailableError(
                    f"no daemon answers on {address} with the control token; "
                    "canaries run only through the daemon"
                )
            with client:
                doc = client.run(selection, wait=False)
            return RunsQueued(selection, [str(q) for q in doc.get("queued", [])])

        self.act("run", job)

    def on_runs_queued(self, message: RunsQueued) -> None:
        overview = self.overview
        guards = {q.partition("/")[0] for q in message.queued}
        for guard in guards:
            row = overview.row(guard) if overview is not None else None
            self._baseline[guard] = row.status.last_run if row is not None else None
        self.pending = frozenset(self._baseline)
        what = ", ".join(message.queued) if len(message.queued) <= 3 else f"{len(message.queued)} canaries"
        self.notify(f"Queued {what}; the row updates when the verdict lands.", timeout=4, markup=False)
        self.refresh_overview(again=True)

    def action_run_all(self) -> None:
        """Run every canary now, through the daemon."""
        self.request_run([])

    def request_mute(self, guard: str) -> None:
        """Ask for a mute duration and reason, then mute (or unmute) the guard."""
        overview = self.overview
        if overview is None:
            return
        if overview.missing_site is not None:
            self.notify(no_site_to_mute(overview.missing_site, self.start_daemon), severity="warning",
                        timeout=8, markup=False)
            return
        if overview.read_only:
            self.notify(read_only_action(self.start_daemon), severity="warning", timeout=8, markup=False)
            return
        row = overview.row(guard)

        def chosen(choice: MuteChoice | None) -> None:
            if choice is not None:
                self._mute(guard, choice)

        self.push_screen(MuteScreen(guard, row.muted_until if row else None, now=self.clock()), chosen)

    def _mute(self, guard: str, choice: MuteChoice) -> None:
        store, now = self.store, self.clock()

        def job() -> Message:
            from canary.status.mutes import mute, unmute

            if choice.duration is None:
                unmute(store, guard)
                return GuardMuted(guard, None)
            return GuardMuted(guard, mute(store, guard, choice.duration, now=now, reason=choice.reason))

        self.act("mute", job)

    def on_guard_muted(self, message: GuardMuted) -> None:
        if message.until is None:
            self.notify(f"{message.guard}: unmuted", timeout=4, markup=False)
        else:
            local = message.until.astimezone().strftime("%Y-%m-%d %H:%M")
            self.notify(f"{message.guard}: alerts muted until {local}", timeout=4, markup=False)
        self.refresh_overview(again=True)

    def action_alerts(self) -> None:
        """Show the alert history."""
        if not isinstance(self.screen, AlertsScreen):
            self.push_screen(AlertsScreen())

    def action_team(self) -> None:
        """Show every project and machine of the store."""
        from dashboard.screens.team import TeamScreen

        if not isinstance(self.screen, TeamScreen):
            self.push_screen(TeamScreen())

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        guard = getattr(screen, "selected_guard", lambda: None)()
        if guard is not None:
            yield SystemCommand(f"Run {guard}'s canaries", "Through the daemon, now (r)",
                                lambda: self.request_run([guard]))
            yield SystemCommand(f"Mute {guard}", "Pause its alerts for a while (m)",
                                lambda: self.request_mute(guard))
        yield SystemCommand("Run every canary", "Through the daemon, now (R)", self.action_run_all)
        yield SystemCommand("Cycle the window", "1h, 24h, 7d, 30d (w)", self.action_cycle_window)
        if isinstance(screen, OverviewScreen):
            yield SystemCommand("Filter guards", "By name, status or reason (/)", screen.action_filter)
        yield SystemCommand("Alert history", "Every status change and what was sent (a)", self.action_alerts)
        yield SystemCommand("Team", "Every project and machine of a shared store (t)", self.action_team)

    def on_unmount(self) -> None:
        self._changes.close()
        self._jobs.wait(QUIT_WAIT)  # a read in flight gives its connections back before they are closed
        self.store.close()


def run_dashboard(config: Config, *, store_url: str | None = None) -> int:
    """Open the dashboard on the config's store (or ``store_url``); return the exit code."""
    try:
        store = Store(store_url) if store_url else open_store(config)
    except CanaryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    app = DashboardApp(config, store=store)
    app.run()
    return app.return_code or 0

