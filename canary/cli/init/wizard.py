"""The ``canary init`` command: ask for what is missing, scan, propose, write, check, audit."""

from __future__ import annotations

import re
import shlex
import sys
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from canary.cli.boundary import config_option, config_path, epilog
from canary.cli.init.advice import base_url_advice, upstream_kind
from canary.cli.init.mine import scan_logs, shown
from canary.cli.init.model import (
    InitSettings,
    LogScan,
)
from canary.cli.init.project import init_project, mark_covered
from canary.cli.init.render import NO_DEFS_YET, WITH_DEFS, comment, match_value
from canary.config.commandline import command_line
from canary.config.definitions import expand_glob
from canary.config.urls import redact_url
from canary.errors import UsageError
from canary.sentences import POINT_AT_THE_PROXY
from canary.terminal import safe, safe_lines
from canary.vocabulary import EXIT_OK, EXIT_USAGE, counted
from collectors.scan import MAX_LINE

if TYPE_CHECKING:
    from canary.config.settings import Config

# -- the command -------------------------------------------------------------------------------


def _proposal_lines(scan: LogScan) -> list[str]:
    lines = []
    for proposal in scan.proposals:
        kind = f"   {proposal.kind} template" if proposal.template_files else ""
        covered = f"   (already in {proposal.covered_by.name})" if proposal.covered_by else ""
        flag = "" if proposal.strong else "   (weak: no guard named in the line)"
        lines.append(safe(f"  {proposal.name:<12} {counted(proposal.count, 'line'):>12}   match "
                          f"{match_value(proposal.match)}{kind}{covered}{flag}"))
        for template in proposal.templates[:3]:
            lines.append(safe(f"      {template.count:>6}  {comment(shown(template.text), 110)}"))
    return lines


def _split_list(answer: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in re.split(r"[,\n]", answer) if part.strip())


def _agent_target(answer: str) -> tuple[str | None, tuple[str, ...] | None]:
    answer = answer.strip()
    if not answer:
        return None, None
    if re.match(r"https?://", answer):
        return answer, None
    return None, _with_prompt(tuple(shlex.split(answer)))


def _with_prompt(command: tuple[str, ...]) -> tuple[str, ...]:
    return command if any("{prompt}" in arg for arg in command) else (*command, "{prompt}")


def run_init(
    directory: str = ".",
    *,
    agent_url: str | None = None,
    agent_command: str | None = None,
    logs: Sequence[str] = (),
    model_upstream: str | None = None,
    yes: bool = False,
    template: Sequence[str] = (),
    config_name: str = "canary.toml",
) -> int:
    """``canary init``: ask for what is missing, scan, propose, write, check, audit; the exit code."""
    from canary.cli.printers import audit_table
    from canary.cli.templates import copy_templates, refuse_the_bundled_folder
    from canary.logs.audit import audit

    ask = not yes
    root = Path(directory).absolute()
    refuse_the_bundled_folder(root)
    copied = copy_templates(template, root)
    _show_files(copied)
    if template and (root / config_name).is_file() and not (agent_url or agent_command or logs
                                                            or model_upstream):
        return _templates_added(root / config_name, [path for path, _how in copied])
    settings = _settings(agent_url, agent_command, logs, model_upstream, ask=ask)
    scan = scan_logs(settings.logs, Path.cwd())
    mark_covered(scan, root)
    unmatched = _show_scan(scan, settings.logs)
    chosen = [p for p in scan.proposals if p.covered_by is None and (
        click.confirm(f"Add guard {p.name!r} ({counted(p.count, 'line')})?", default=p.strong)
        if ask else p.strong)]
    use_activity = scan.activity is not None and (not ask or click.confirm(
        f"Count {match_value(scan.activity.match)} as one unit of agent work?", default=True))

    def overwrite(path: Path) -> bool:
        return ask and click.confirm(f"{path} exists and would change. Replace it?", default=False)

    result = init_project(root, settings, accept=lambda p: p in chosen, overwrite=overwrite,
                          activity=use_activity, scan=scan, config_name=config_name)
    click.echo("")
    _show_files(result.files)
    guards_dir = root / "canaries_defs"
    if not any(guards_dir.glob("*.toml")):
        copy = command_line("canary init --template NAME", result.config_path)
        click.echo(safe(f"No definition in {guards_dir} yet: copy a template with `{copy}` "
                        "(`canary templates` lists them) and set its match to your guard's line."))

    config = _checked(result.config_path)
    if config is None:
        return EXIT_USAGE
    click.echo("\n" + safe("$ " + command_line("canary audit", result.config_path)))
    click.echo(audit_table(audit(config, now=datetime.now(UTC))))
    click.echo("\n" + _next_steps(config, settings, unmatched))
    return EXIT_OK


def _show_files(files: Sequence[tuple[Path, str]]) -> None:
    for path, action in files:
        note = "  (exists; left as it was)" if action == "kept" else ""
        click.echo(f"{action:<9} {path}{note}")


def _settings(agent_url: str | None, agent_command: str | None, logs: Sequence[str],
              model_upstream: str | None, *, ask: bool) -> InitSettings:
    """What the flags say, with what they leave out asked for (unless ``ask`` is False)."""
    url, command = agent_url, _with_prompt(tuple(shlex.split(agent_command))) if agent_command else None
    if url is None and command is None and ask:
        url, command = _agent_target(click.prompt(
            "How do canaries reach your agent? Its HTTP endpoint (http://127.0.0.1:8700/ask) or the "
            "command that asks it (my-agent ask); empty to decide later", default="", show_default=False))
    found = tuple(logs)
    if not found and ask:
        found = _split_list(click.prompt("Your agent's log files (globs, comma-separated)", default="",
                                         show_default=False))
    upstream = model_upstream
    if upstream is None and ask:
        upstream = click.prompt(
            "Your real model server (Ollama http://127.0.0.1:11434, llama.cpp or mlx_lm "
            "http://127.0.0.1:8080, LM Studio http://127.0.0.1:1234, vLLM http://127.0.0.1:8000); "
            "empty if none",
            default="", show_default=False) or None
    return InitSettings(agent_url=url, agent_command=command, logs=found, model_upstream=upstream)


def _show_scan(scan: LogScan, found: Sequence[str]) -> list[str]:
    """What the scan read and proposes; returns the globs that match no file."""
    click.echo(f"\nRead {counted(scan.lines, 'line')} in {counted(len(scan.files), 'file')} "
               f"({scan.log_format}).")
    if scan.cut:
        many = scan.cut > 1
        click.echo(f"{scan.cut} line{'s' if many else ''} longer than {MAX_LINE} bytes: only "
                   f"{'their' if many else 'its'} first {MAX_LINE} bytes were read, as the collectors "
                   "read them.")
    for path, error in scan.unreadable:
        click.echo(safe(f"warning: could not read {path}: {error}"), err=True)
    unmatched = [p for p in found if not expand_glob(p, Path.cwd())]
    for pattern in unmatched:
        click.echo(safe(f"warning: --logs {pattern!r} matches no file"), err=True)
    if not found or not scan.files:
        click.echo("No log file to read: no guard can be proposed from logs.")
    if scan.proposals:
        click.echo("Lines that read like a guard's rejection, by the guard each names:")
        click.echo("\n".join(_proposal_lines(scan)))
    elif scan.files:
        click.echo("No line reads like a guard's rejection (reject, guard, grounding, bounce, citation...).")
    if scan.activity is not None:
        click.echo(safe(f"Agent activity: {match_value(scan.activity.match)} "
                        f"({counted(scan.activity.count, 'line')})."))
    return unmatched


def _checked(config_path: Path) -> Config | None:
    """``canary check`` of the project written, shown; its config, or None (told) if broken."""
    from canary.config.settings import load_config
    from canary.config.summary import summarize
    from canary.errors import ConfigError

    check = command_line("canary check", config_path)
    click.echo("\n" + safe(f"$ {check}"))
    try:
        config = load_config(path=config_path)
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(problem.render(), err=True)
        click.echo(safe(f"{len(exc.problems)} problem(s) in the files above; fix them and run `{check}`."))
        return None
    click.echo(summarize(config))
    return config


def defs_read(config: Config, written: Sequence[Path]) -> bool:
    """Whether the config's ``defs`` reads every file written; if not, say which and what to add."""
    base = config.path.parent if config.path is not None else Path.cwd()
    read = {p.resolve() for pattern in config.defs for p in expand_glob(pattern, base)}
    unread = [p for p in written if p.resolve() not in read]
    if unread:
        names = ", ".join(p.name for p in unread)
        click.echo(safe(f"note: defs in {config.path} ({list(config.defs)}) does not read {names} in "
                        f"{unread[0].parent}: add \"canaries_defs/*.toml\" to defs, or move them where "
                        "it reads"))
    return not unread


def _templates_added(config_path: Path, written: Sequence[Path]) -> int:
    """Templates copied into a project ``canary init`` already wrote: its ``defs`` now reads them."""
    text = config_path.read_text(encoding="utf-8")
    if NO_DEFS_YET in text:
        config_path.write_text(text.replace(NO_DEFS_YET, WITH_DEFS), encoding="utf-8")
        click.echo(f"updated   {config_path}  (defs reads canaries_defs/*.toml)")
    config = _checked(config_path)
    if config is None or not defs_read(config, written):
        return EXIT_USAGE
    click.echo("\n" + safe("Next: set each copied guard's match to the line your guard writes, then "
                            f"`{command_line('canary run', config_path)}`."))
    return EXIT_OK


def _next_steps(config: Config, settings: InitSettings, unmatched: Sequence[str] = ()) -> str:
    """The steps after init, each command carrying ``--config`` when the config is not the default."""
    listen = config.model.listen
    name = config.path.name if config.path is not None else "canary.toml"

    def cmd(words: str) -> str:
        return command_line(words, config.path)

    relay = (f"it relays every call to {redact_url(config.model.upstream)}, except a canary's"
             if config.model.upstream else
             "with no [model] upstream it answers only canary calls: set upstream to your model server")
    steps = [
        "Next:",
        f"  1. Keep the proxy up: {cmd('canary service install')}   "
        f"(or {cmd('canary daemon')}, in a second terminal)",
        f"  2. Point your agent's model base URL at the proxy on {listen}",
        f"     ({relay}):",
        *(f"       {line}" for line in base_url_advice(listen, upstream_kind(config.model.upstream))),
        *textwrap.wrap(POINT_AT_THE_PROXY, 100, initial_indent="     ", subsequent_indent="     "),
        "  3. Read each canaries_defs/*.toml: make each prompt lead your agent to the step its guard",
        "     checks, and make sure the guard's log line carries the offending value.",
        f"  4. {cmd('canary run')}          # every canary once, a verdict per guard",
    ]
    if unmatched:
        steps[-1] = (f"  4. fix [logs] paths in {name} ({', '.join(map(repr, unmatched))} "
                     f"matches no file), then {cmd('canary check')}")
    if not (settings.agent_url or settings.agent_command):
        steps.insert(1, f"  0. Tell {name} how to reach your agent: [agent] url or command.")
    return safe_lines("\n".join(steps))


@click.command(name="init", epilog=epilog(
    ["canary init", "canary init --yes --agent-url http://127.0.0.1:8700/ask --logs 'logs/*.log'"],
    {0: "the files are written and check clean", 2: "a written file has problems, or bad usage"}))
@click.option("--agent-url", default=None, help="The agent's HTTP endpoint canaries send a prompt to.")
@click.option("--agent-command", default=None,
              help="Or: the command that asks the agent (its answer is stdout).")
@click.option("--logs", multiple=True, help="A glob of the agent's log files (repeat for more).")
@click.option("--model-upstream", default=None, help="The real model server the proxy relays to.")
@click.option("--dir", "directory", default=None, type=click.Path(file_okay=False),
              help="Where to write canary.toml and canaries_defs/ (default: --config's folder, else here).")
@click.option("--yes", is_flag=True, help="Ask nothing: take the proposed guards; never replace a file.")
@click.option("--template", multiple=True,
              help="Copy a bundled template into canaries_defs/ (repeatable; see `canary templates`).")
@click.option("--traces", is_flag=True,
              help="Propose a guard per guard-shaped span the daemon's trace receiver got ([traces]).")
@config_option
@click.pass_context
def init_command(ctx: click.Context, *, agent_url: str | None, agent_command: str | None,
                 logs: tuple[str, ...], model_upstream: str | None, directory: str | None, yes: bool,
                 template: tuple[str, ...], traces: bool) -> None:
    """Propose a guard per rejection line in your agent's logs, write canary.toml and canaries_defs/,
    then check and audit them."""
    folder, name = _where(directory, config_path(ctx))
    from canary.cli.templates import refuse_the_bundled_folder

    refuse_the_bundled_folder(Path(folder).absolute())
    if traces:
        from canary.cli.init.traces import run_init_traces

        sys.exit(run_init_traces(folder, yes=yes, config_name=name))
    if agent_url and agent_command:
        raise UsageError("give --agent-url or --agent-command, not both", option="--agent-url")
    sys.exit(run_init(folder, agent_url=agent_url, agent_command=agent_command, logs=logs,
                      model_upstream=model_upstream, yes=yes, template=template, config_name=name))


def _where(directory: str | None, config: str | None) -> tuple[str, str]:
    """The folder init writes in and its config file's name: ``--dir``, else ``--config``'s folder."""
    if config is None:
        return directory or ".", "canary.toml"
    target = Path(config).expanduser().absolute()
    if directory is not None and Path(directory).absolute() != target.parent:
        raise UsageError(f"--dir {directory!r} and --config {config!r} name different folders; "
                         "give one of them", option="--dir")
    return str(target.parent), target.name

