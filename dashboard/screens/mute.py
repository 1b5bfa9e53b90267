"""The mute dialog: how long, and why."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet

from dashboard.render import clock

#: The mute lengths offered, shortest first.
DURATIONS: tuple[tuple[str, timedelta], ...] = (
    ("1h", timedelta(hours=1)),
    ("6h", timedelta(hours=6)),
    ("24h", timedelta(hours=24)),
    ("7d", timedelta(days=7)),
)


@dataclass(frozen=True)
class MuteChoice:
    """What the dialog decided: a mute of ``duration`` (None = lift the mute) and its reason."""

    duration: timedelta | None
    reason: str | None = None


class MuteScreen(ModalScreen[MuteChoice | None]):
    """Pick a mute length and an optional reason."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, guard: str, muted_until: datetime | None, *, now: datetime) -> None:
        super().__init__()
        self.guard = guard
        self.muted_until = muted_until
        self.now = now

    def compose(self) -> ComposeResult:
        with Vertical(id="mute-dialog"):
            yield Label(f"Mute the alerts of [b]{self.guard}[/b] for", id="mute-title")
            if self.muted_until is not None:
                yield Label(f"(muted now until {clock(self.muted_until, self.now)})", id="mute-now")
            with RadioSet(id="mute-length"):
                for i, (label, _span) in enumerate(DURATIONS):
                    yield RadioButton(label, value=i == 0, id=f"mute-{label}")
            yield Input(placeholder="reason (optional)", id="mute-reason")
            with Horizontal(id="mute-buttons"):
                yield Button("Mute", variant="primary", id="mute-ok")
                if self.muted_until is not None:
                    yield Button("Unmute", id="mute-lift")
                yield Button("Cancel", id="mute-cancel")

    def on_mount(self) -> None:
        self.query_one(RadioSet).focus()

    def _choice(self) -> MuteChoice:
        index = self.query_one(RadioSet).pressed_index
        duration = DURATIONS[max(index, 0)][1]
        reason = self.query_one("#mute-reason", Input).value.strip() or None
        return MuteChoice(duration, reason)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "mute-ok":
            self.dismiss(self._choice())
        elif event.button.id == "mute-lift":
            self.dismiss(MuteChoice(None))
        else:
            self.dismiss(None)

    def on_input_submitted(self) -> None:
        self.dismiss(self._choice())

    def action_cancel(self) -> None:
        """Close without muting."""
        self.dismiss(None)
