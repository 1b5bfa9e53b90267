"""Planning and writing a project's files; no file is written over unless the user says yes to it."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from canary.cli.init.mine import scan_logs
from canary.cli.init.model import (
    InitResult,
    InitSettings,
    LogScan,
    Proposal,
)
from canary.cli.init.render import render_config, render_definition
from collectors.rules import parse_json_line


def _existing(defs_dir: Path) -> list[tuple[Path, str, object]]:
    """(file, guard name, match) of every definition already in the folder."""
    out: list[tuple[Path, str, object]] = []
    for path in sorted(defs_dir.glob("*.toml")):
        try:
            with path.open("rb") as handle:
                guard = tomllib.load(handle).get("guard", {})
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if isinstance(guard, dict) and isinstance(guard.get("name"), str):
            out.append((path, guard["name"], guard.get("match")))
    return out


def _covers(match: object, proposal: Proposal) -> bool:
    examples = [line for t in proposal.templates for line in t.examples]
    if isinstance(match, str):
        try:
            compiled = re.compile(match)
        except re.error:
            return False
        return all(compiled.search(line) for line in examples)
    if isinstance(match, dict):
        objs = [parse_json_line(line) or {} for line in examples]
        return all(all(obj.get(k) == v for k, v in match.items()) for obj in objs)
    return False


def mark_covered(scan: LogScan, directory: Path) -> None:
    """Note the proposals an existing definition already matches; rename those whose name is taken."""
    existing = _existing(directory / "canaries_defs")
    owners = {name: path for path, name, _ in existing}
    taken = {p.name for p in scan.proposals}
    for proposal in scan.proposals:
        owner = next((path for path, _, match in existing if _covers(match, proposal)), None)
        if owner is not None:
            proposal.covered_by = owner
            continue
        base, n = proposal.name, 2
        while owners.get(proposal.name, directory / "canaries_defs" / f"{proposal.name}.toml") != (
                directory / "canaries_defs" / f"{proposal.name}.toml") or (
                proposal.name != base and proposal.name in taken):
            proposal.name, n = f"{base}-{n}", n + 1
        taken.add(proposal.name)


def plan_files(directory: Path, settings: InitSettings, scan: LogScan, chosen: Sequence[Proposal],
               *, activity: bool = True, config_name: str = "canary.toml") -> list[tuple[Path, str]]:
    """Every file init would write, with its text."""
    sources = ", ".join(settings.logs) or "the logs"
    has_defs = bool(chosen) or any((directory / "canaries_defs").glob("*.toml"))
    planned = [(directory / config_name,
                render_config(directory, settings, scan, activity=activity, has_defs=has_defs))]
    planned += [(directory / "canaries_defs" / f"{p.name}.toml", render_definition(p, sources))
                for p in chosen]
    return planned


def write_files(
    planned: Sequence[tuple[Path, str]], overwrite: Callable[[Path], bool]
) -> list[tuple[Path, str]]:
    """Write each file; an existing one is replaced only when ``overwrite(path)`` says yes."""
    done: list[tuple[Path, str]] = []
    for path, text in planned:
        if path.exists():
            if path.read_text(encoding="utf-8", errors="replace") == text:
                done.append((path, "unchanged"))
                continue
            if not overwrite(path):
                done.append((path, "kept"))
                continue
            action = "replaced"
        else:
            action = "written"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        done.append((path, action))
    return done


def init_project(
    directory: Path,
    settings: InitSettings,
    *,
    accept: Callable[[Proposal], bool] | None = None,
    overwrite: Callable[[Path], bool] | None = None,
    activity: bool = True,
    scan: LogScan | None = None,
    config_name: str = "canary.toml",
) -> InitResult:
    """Scan the logs, keep the proposals ``accept`` takes (default: the strong ones), write the files.

    ``overwrite`` decides for each existing file whose text would change; by default nothing
    existing is replaced. Proposals an existing definition already covers are never written.
    """
    directory = directory.absolute()
    if scan is None:
        scan = scan_logs(settings.logs, Path.cwd())
        mark_covered(scan, directory)
    take = accept or (lambda p: p.strong)
    chosen = [p for p in scan.proposals if p.covered_by is None and take(p)]
    planned = plan_files(directory, settings, scan, chosen, activity=activity, config_name=config_name)
    files = write_files(planned, overwrite or (lambda path: False))
    return InitResult(scan, chosen, directory / config_name, files)

