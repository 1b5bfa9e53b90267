"""The CLI's one error boundary, its shared ``--config`` option and its help epilogs.

Every command runs inside ``CanaryGroup.invoke``: a ``CanaryError`` raised anywhere
below becomes its message on stderr (control characters shown, never obeyed) and
its exit code; an ``OSError`` (a file that cannot be read or written) becomes one
line and exit 3. No command catches ``CanaryError`` itself.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from canary.cli import quick
from canary.errors import CanaryError
from canary.terminal import safe_lines
from canary.vocabulary import EXIT_OK, EXIT_UNAVAILABLE, EXIT_UNHEALTHY, EXIT_USAGE

if TYPE_CHECKING:
    from canary.config.settings import Config

F = TypeVar("F", bound=Callable[..., Any])

CONFIG_KEY = "canary.config"


def report(exc: CanaryError) -> None:
    """Print what went wrong: every problem of a ConfigError, else one ``error:`` line."""
    from canary.cli.quick import report_lines

    for line in report_lines(exc):
        click.echo(line, err=True)


class CanaryGroup(click.Group):
    """A click group whose commands' ``CanaryError`` becomes a message and an exit code.

    ``lazy`` names commands by ``"module:attribute"``: a module is imported only when its
    command is run or asked for (``--help`` lists every command, so it imports them all),
    so a quick command pays for no other command's imports.
    """

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, the lazy ones included, sorted."""
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command of that name, its module imported now if it is a lazy one."""
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module_name, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Add a command, giving it the global ``--config`` option if it has none of its own."""
        if not any(param.name == "config" for param in cmd.params):
            cmd.params.append(_config_param(global_only=not isinstance(cmd, click.Group)
                                            and cmd.name in READS_NO_CONFIG))
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; turn a ``CanaryError`` into its message and exit code."""
        try:
            return super().invoke(ctx)
        except CanaryError as exc:
            report(exc)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            # The reader went away (``canary status | head``): nothing is wrong with the command.
            # Point stdout at /dev/null so the interpreter's own flush at exit cannot fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(EXIT_OK)
        except OSError as exc:
            # A file or folder the command needed could not be used (permissions, a full disk, a
            # file where a folder should be): the system's own words, on one line, exit 3.
            where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
            what = exc.strerror or str(exc)
            click.echo(f"error: {safe_lines(f'{where}: {what}' if where else what)}", err=True)
            ctx.exit(EXIT_UNAVAILABLE)


def _remember_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[CONFIG_KEY] = value


#: Commands that read no canary.toml: they take ``--config`` like every other, and ignore it.
READS_NO_CONFIG = frozenset({"templates", "demo"})

_CONFIG_HELP = ("canary.toml to use (default: $CANARY_CONFIG, ./canary.toml, then the platform config dir); "
                "before or after any command name.")


def _config_settings(help_text: str = _CONFIG_HELP) -> dict[str, Any]:
    return {"type": click.Path(dir_okay=False), "default": None, "expose_value": False,
            "is_eager": True, "callback": _remember_config, "help": help_text}


def _config_param(*, global_only: bool = False) -> click.Option:
    """The ``--config PATH`` option: wherever it is given, the last one given is the one used."""
    return click.Option(["--config"], **_config_settings(
        "canary.toml of the other commands (this one reads none)." if global_only else _CONFIG_HELP))


def config_option(command: F) -> F:
    """``--config PATH`` on a command or group, the same wherever it is given (the last one wins)."""
    return click.option("--config", **_config_settings())(command)


def config_path(ctx: click.Context) -> str | None:
    """The ``--config`` given before or after the subcommand, if any."""
    value = ctx.meta.get(CONFIG_KEY)
    return str(value) if value is not None else None


def load(ctx: click.Context, *, warn: bool = True, keep_going: bool = False) -> Config:
    """The config named by ``--config`` (before or after the subcommand), its warnings on stderr
    (``keep_going``: errors in definition files are left in ``Config.broken``, not raised)."""
    from canary.config.settings import load_config

    config = load_config(config_path(ctx), keep_going=keep_going)
    if warn:
        for warning in config.warnings:
            click.echo(safe_lines(warning.render()), err=True)
    return config


def warn(path: str, message: str) -> None:
    """A collector's or runner's warning on stderr (``message`` names ``path`` where it matters)."""
    quick.warn(message)


#: What each exit code means, as the epilogs list them.
EXIT_MEANINGS = {
    EXIT_OK: "all healthy",
    EXIT_UNHEALTHY: "something is asleep, degraded or inconclusive, or a verdict other than caught/passed",
    EXIT_USAGE: "bad usage, config or definitions",
    EXIT_UNAVAILABLE: "could not work (agent unreachable, port taken, store unavailable)",
}


def epilog(examples: Sequence[str], exits: Mapping[int, str | None]) -> str:
    """A help epilog: one or two examples, then the command's exit codes (None: the usual meaning)."""
    lines = ["\b", "Examples:", *(f"  {example}" for example in examples), "", "\b", "Exit codes:"]
    lines += [f"  {code}  {meaning or EXIT_MEANINGS[code]}" for code, meaning in sorted(exits.items())]
    return "\n".join(lines)
