"""``canary daemon``: collectors, scheduler, proxy, fixtures, alerts, metrics and control API.

One process per store (a lock file says so). Every ``tick`` seconds it beats
its heartbeat, decides every guard's status, stores each change as a
transition, plans and sends the alerts those rows call for, and prunes old
firing rows. Each step is a small function of its own, callable from a test.

SIGTERM or SIGINT: scheduling stops, the control API refuses new runs, the runs
under way (scheduled or asked for) finish within ``STOP_WAIT`` and what still waits then
is cut short, ending ``error`` with a reason saying so (``canary.runs.underway``),
the collectors read every file to its end once more, the proxy
and fixture server drain (``canary.proxy.drain``: requests and streams in
flight finish), and the process exits cleanly. Under a service manager that
holds the listening sockets (systemd socket units, launchd ``Sockets``), the
daemon serves on those instead of binding, before it loads anything else
(``canary.daemon.first``), so connections made while it restarts wait in the
queue. SIGHUP reloads the definitions (and reschedules the canaries); SIGUSR2
restarts the daemon in place, handing its sockets to a successor
(``canary.daemon.handover``).
After a crash the next start marks runs left in flight as interrupted and
resumes from the stored read positions.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from canary.config.settings import Config
from canary.daemon.answers import Answers
from canary.daemon.reload import fingerprint
from canary.daemon.storehooks import StoreHooks
from canary.runs.attribution import Attribution

if TYPE_CHECKING:
    from canary.daemon.first import FirstServers
    from canary.daemon.signals import SignalPipe
    from canary.daemon.storewatch import StoreWatch
    from canary.runs.schedule import CanaryScheduler, Slot
    from canary.runs.session import Session
    from canary.store.engine import Store

# Only what the first accept needs is imported at the top: the store, collectors, scheduler and
# status load once the proxy serves (see ``canary.daemon.first``).
log = logging.getLogger("canary.daemon.loop")

INTERRUPTED = "interrupted: the daemon stopped before the verdict"
#: Why a run still under way when the daemon has waited ``STOP_WAIT`` ends ``error``.
STOPPED = "the daemon stopped during the run, before its verdict; run it again to conclude it"
RESTARTED = "the daemon restarted during the run, before its verdict; run it again to conclude it"
#: How long a stopping daemon waits for the runs under way.
STOP_WAIT = 30.0
#: How long runs cut short take to end: they stop waiting at once.
CUT_WAIT = 10.0


# -- the daemon ----------------------------------------------------------------


class Daemon:
    """The background service in the foreground."""

    def __init__(
        self,
        config: Config,
        *,
        tick: float = 10.0,
        grace: float | None = None,
        spread: timedelta | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        detached_proxy: bool = False,
    ) -> None:
        self.config = config
        #: Serve the proxy from a process of its own when no service manager holds its socket
        #: (``canary.runs.proxylink``).
        self.detached_proxy = detached_proxy
        self.spread = spread  # None: the scheduler's STARTUP_SPREAD
        self.tick = tick
        self.grace = grace  # None: the runner's DEFAULT_GRACE
        self.clock = clock
        #: Ties firings to the runs the proxy sees in flight; the store is built with it.
        self.attribution = Attribution.of(config)
        self._store: Store | None = None
        self.stop_event = threading.Event()
        self.started = clock()
        self.session: Session | None = None
        self.scheduler: CanaryScheduler | None = None
        self.control: Any = None
        self._last_prune: datetime | None = None
        self._alerts_due = threading.Event()
        self._alerts: threading.Thread | None = None
        self._requests_seen: list[tuple[float, int]] = []  # (monotonic, agent requests) over the last minute
        self.watch: StoreWatch | None = None
        self.reload_due = threading.Event()
        self.steps = threading.Lock()  # a tick, or a reload asked for by a run, one at a time
        self.successor: Any = None  # the daemon a SIGUSR2 handed the sockets to
        self._predecessor: int | None = None
        self.managed = False  # sockets from a service manager (not from a daemon handing over)
        self.reload_error: str | None = None
        self._defs_seen = fingerprint(config)
        from canary.status.warnings import Warnings

        self.warnings = Warnings(clock)
        self.hooks = StoreHooks(self)

    @property
    def store(self) -> Store:
        """The store, opened on first use (after the first servers serve, when ``run`` opens it)."""
        if self._store is None:
            from canary.store.engine import Store

            self._store = Store.of(self.config, attribution=self.attribution)
        return self._store

    # lifecycle ----------------------------------------------------------------

    def _addresses(self) -> dict[str, str | None]:
        session = self.session
        return {
            "proxy": session.proxy.url if session and session.proxy else None,
            "fixtures": session.fixtures.url if session and session.fixtures else None,
            "control": self.control.url if self.control else None,
        }

    def _run_slot(self, slot: Slot) -> None:
        if self.stop_event.is_set():
            return
        session = self.session
        if session is None or session.runner is None:
            return
        result = session.runner.run(slot.guard, slot.canary)
        log.info("%s: %s", slot.key, result.verdict)

    def step(self) -> None:
        """One tick: the store checked, heartbeat, statuses and transitions, alerts, retention."""
        from canary.daemon.storewatch import store_failure

        now = self.clock()
        watch = self.watch
        if watch is not None:
            watch.check(now)
        try:
            self._tick(now)
        except Exception as exc:
            reason = store_failure(exc)
            if watch is None or reason is None:
                raise
            watch.failed(reason, now)
            return
        refused = self.hooks.refusals()
        if watch is not None and refused:
            # beside a heartbeat that works; a corrupt store is set aside by the tick's own failure
            watch.failed(f"the collectors' commits fail: {refused[0]}", now, aside=False)
        elif watch is not None:
            watch.worked(now)

    # definitions reload ---------------------------------------------------------

    def reload_step(self, now: datetime) -> bool:
        """Reload the definitions if SIGHUP asked or a file changed; True if new ones run."""
        from canary.daemon.reload import backfill, changed_guards, load_checked

        seen = fingerprint(self.config)
        if not self.reload_due.is_set() and seen == self._defs_seen:
            return False
        self.reload_due.clear()
        self._defs_seen = seen
        new = load_checked(self.config)
        if isinstance(new, str):
            self.reload_error = new
            log.error("the definitions were not reloaded; the old ones keep running:\n%s", new)
            return False
        self.reload_error = None
        changed = changed_guards(self.config, new)
        session = self.session
        if session is not None and session.collection is not None:
            session.replace_collection(new, before=lambda: backfill(self.store, new, changed, now=now))
        else:
            backfill(self.store, new, changed, now=now)
        self.config = new
        self._reschedule()
        log.info("definitions reloaded: %d guard(s); counted again: %s", len(new.guards),
                 ", ".join(changed) or "none")
        return True

    def _collector_warning(self, path: str, message: str) -> None:
        log.warning("%s", message)
        self.warnings.add(path, message)

    def _collector_resolved(self, path: str, message: str) -> None:
        log.info("no longer holds: %s", message)
        self.warnings.drop(path, message)

    def _reschedule(self) -> None:
        from canary.daemon.reload import reschedule

        reschedule(self)

    def _tick(self, now: datetime) -> None:
        from canary.daemon.health import traces_step, upstream_step
        from canary.daemon.steps import beat, decide_statuses, prune

        files = len(self.session.collection.files()) if self.session and self.session.collection else 0
        beat(self.store, pid=os.getpid(), started=self.started, now=now, files=files,
             addresses=self._addresses(), tick=self.tick)
        self.warnings.flush(self.store)
        decide_statuses(self.store, self.config, now=now, readable=None)
        if self.session is not None:
            upstream_step(self.store, self.config, self.session.counts, now=now,
                          per_minute=self._per_minute(self.session.counts.snapshot().agent_requests))
            traces_step(self.store, self.session.traces)
        self._alerts_due.set()
        if self._last_prune is None or now - self._last_prune >= timedelta(hours=1):
            removed = prune(self.store, older_than=self.config.store.retention, now=now)
            if removed:
                log.info("pruned %d firing rows older than %s", removed, self.config.store.retention)
            self._last_prune = now

    def _per_minute(self, total: int) -> float:
        """Agent requests per minute through the proxy, over up to the last minute of ticks."""
        now = time.monotonic()
        seen = [(t, n) for t, n in self._requests_seen if now - t <= 60.0]
        seen.append((now, total))
        self._requests_seen = seen
        first_t, first_n = seen[0]
        span = now - first_t
        return round((total - first_n) * 60.0 / span, 1) if span > 0 else 0.0

    def _alert_loop(self) -> None:
        """Alerts in their own thread: a slow webhook never delays the heartbeat."""
        from canary.daemon.steps import alert_step
        from canary.daemon.storewatch import store_failure

        while not self.stop_event.is_set():
            self._alerts_due.wait(self.tick)
            self._alerts_due.clear()
            try:
                alert_step(self.store, self.config, now=self.clock())
            except Exception as exc:
                if store_failure(exc) is None:
                    log.exception("alert delivery failed; it will be retried")
                else:
                    log.warning("alert delivery failed (the store: %s); it will be retried",
                                store_failure(exc))

    def run(self, *, install_signals: bool = True) -> int:
        """Run until SIGTERM/SIGINT (or ``stop_event``); return the exit code."""
        signals = self._signals().install() if install_signals else None
        try:
            return self._serve()
        finally:
            if signals is not None:
                signals.close()

    def _signals(self) -> SignalPipe:
        """What each signal does, acted on outside its handler (``canary.daemon.signals``)."""
        from canary.daemon.signals import SignalPipe

        return SignalPipe({
            signal.SIGTERM: self.stop_event.set,
            signal.SIGINT: self.stop_event.set,
            # A SIGHUP reloads the definitions; it never takes the proxy down.
            signal.SIGHUP: self.reload_due.set,
            # A SIGUSR2 restarts the daemon in place: a new one takes the listening sockets over.
            signal.SIGUSR2: lambda: threading.Thread(target=self.hand_over, daemon=True).start(),
        })

    def _serve(self) -> int:
        from canary.daemon.first import HANDED, MANAGER, serve_first
        from canary.daemon.handover import predecessor
        from canary.daemon.sockets import LISTENERS, activated_sockets
        from canary.proxy.serving import DRAIN

        self._predecessor = predecessor()
        listeners = activated_sockets(LISTENERS)
        self.managed = bool(listeners) and self._predecessor is None
        # The sockets the service manager holds are served before anything else loads: the
        # agent's connections wait in their queue for as long as the daemon takes to start.
        first = serve_first(self.config, listeners, self.attribution.runs, drain=DRAIN,
                            held=MANAGER if self.managed else HANDED)
        try:
            return self._run(listeners, first)
        finally:
            first.stop()  # what the session did not adopt

    def _run(self, listeners: dict[str, Any], first: FirstServers) -> int:
        from canary.daemon.control import create_control_app, ensure_token, token_path
        from canary.daemon.first import check_listeners
        from canary.daemon.session import DaemonSession
        from canary.daemon.steps import store_lock
        from canary.proxy.serving import DRAIN, BackgroundServer, split_listen
        from canary.runs.holders import naming_the_key
        from canary.runs.runlog import RunLog
        from canary.runs.runner import DEFAULT_GRACE

        # A daemon taking over waits while the one that started it drains and lets the lock go.
        with store_lock(self.store, successor_of=self._predecessor, wait=DRAIN + STOP_WAIT + 30.0,
                        home=self.config.state_folder):
            interrupted = RunLog(self.store).interrupt_in_flight(INTERRUPTED)
            if interrupted:
                log.warning("marked %d run(s) left in flight as interrupted", interrupted)
            check_listeners(self.config, listeners, managed=self.managed)
            self.session = DaemonSession(
                self.config, self.store, first,
                grace=DEFAULT_GRACE if self.grace is None else self.grace, start_at_end=False,
                on_error=self._collector_warning, on_resolved=self._collector_resolved,
                listeners=listeners, drain=DRAIN, detached_proxy=self.detached_proxy,
            ).start()
            first.started.clear()  # the session stops them now
            self.watch = self.hooks.watch()
            try:
                token = ensure_token(token_path(self.config.path, self.config.project))
                host, port = split_listen(self.config.daemon.control)
                with naming_the_key("[daemon] control", port, self.store.path):
                    answers = Answers(self)
                    self.control = BackgroundServer(
                        create_control_app(token, answers, metrics=answers.metrics), host, port,
                        name="control API",
                    ).start()
                slots = self.schedule()
                log.info(
                    "daemon up: proxy %s, fixtures %s, control %s, %d guard(s), %d canary slot(s)",
                    *self._addresses().values(), len(self.config.guards), len(slots),
                )
                self._alerts = threading.Thread(target=self._alert_loop, name="canary-alerts", daemon=True)
                self._alerts.start()
                while not self.stop_event.is_set():
                    try:
                        with self.steps:
                            self.reload_step(self.clock())
                            self.step()
                    except Exception:
                        log.exception("a daemon step failed; the next tick retries")
                    self.stop_event.wait(self.tick)
            finally:
                self._alerts_due.set()
                self._shutdown()
        return 0

    def hand_over(self) -> bool:
        """Start a new daemon on this one's listening sockets, then stop (``canary.daemon.handover``)."""
        from canary.daemon.handover import hand_over

        return hand_over(self)

    def schedule(self) -> list[Slot]:
        """Schedule the config's canaries (none without an agent); the slots."""
        from canary.runs.schedule import STARTUP_SPREAD, CanaryScheduler, slots_of

        slots = slots_of(self.config)
        if self.config.agent is not None and slots:
            spread = STARTUP_SPREAD if self.spread is None else self.spread
            self.scheduler = CanaryScheduler(self.store, slots, self._run_slot, spread=spread)
            self.scheduler.start()
        return slots

    def _settle_runs(self, deadline: float) -> None:
        """Let the runs under way finish by ``deadline`` while the session serves; cut the rest short."""
        runner = self.session.runner if self.session is not None else None
        if runner is None:
            return
        if not runner.underway.settle(deadline - time.monotonic()):
            log.warning("runs still under way after %.0f s are cut short", STOP_WAIT)
        # Cut even when none runs: a run asked for just before the stop is cut, never left unwatched.
        runner.underway.cut(RESTARTED if self.successor is not None else STOPPED)
        runner.underway.settle(CUT_WAIT)

    def _shutdown(self) -> None:
        from canary.daemon.steps import beat
        from canary.runs.runlog import RunLog

        log.info("stopping")
        deadline = time.monotonic() + STOP_WAIT
        if self.scheduler is not None:
            waiter = threading.Thread(target=self.scheduler.stop, kwargs={"wait": True}, daemon=True)
            waiter.start()
            waiter.join(STOP_WAIT)
        if self.session is not None:
            self._settle_runs(deadline)
            self.session.stop()
        RunLog(self.store).interrupt_in_flight(INTERRUPTED)
        if self.control is not None:
            self.control.stop()
        if self._alerts is not None:
            self._alerts.join(15.0)
        now = self.clock()
        beat(self.store, pid=os.getpid(), started=self.started, now=now, files=0,
             addresses=self._addresses(), stopped=now)
        self.store.close()
        log.info("stopped")
