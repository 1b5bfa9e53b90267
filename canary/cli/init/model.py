"""What ``canary init`` works with: log templates, proposed guards, its settings and results."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from canary.locations import bundled_defs_dir

LogFormat = Literal["text", "jsonl"]
Piece = tuple[str | None, str]  # (mask kind or None for literal text, the text)

EXAMPLES = 5
MAX_TEMPLATES = 50_000
#: Guard kinds the bundled templates cover: how a guard's line names it, and its template files.
KINDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # tool governance first: their guards' names (UrlAllowlist, ShellPolicy) would read as others
    ("tool-fetch", r"allow-?list|egress|fetch_url", ("tool_fetch.toml",)),
    ("tool-write", r"sandbox|write_file", ("tool_write.toml",)),
    ("tool-shell", r"shell|run_shell", ("tool_shell.toml",)),
    ("tool-step", r"step ?polic|step=", ("tool_step.toml",)),
    ("conversation", r"conversation|earlier turn|previous turn", ("conversation.toml",)),
    ("provenance", r"provenance|never opened|not opened|unopened|snippet", ("provenance.toml",)),
    ("citation", r"citation|cite|\burl|\blink", ("citation.toml",)),
    ("quote", r"quote|verbatim", ("quote.toml", "quote_fused.toml")),
    ("version", r"version", ("version.toml", "version_sibling.toml")),
    ("date", r"\bdate", ("date.toml",)),
    ("money", r"money|currenc|amount|price|euro|dollar|lira|€", ("money.toml",)),
    ("arithmetic", r"arithmetic|\bsum\b|total|addition", ("arithmetic.toml",)),
    ("exclusion", r"exclu|skip", ("exclusion.toml",)),
    ("number", r"number|numeric|entit|span|figure", ("number.toml", "number_blindspots.toml")),
    ("denial", r"denial|deny|denies|empty|\b404\b|not found(?! (?:verbatim )?in)|missing", (
        "denial.toml", "denial_phrasings.toml")),
)


@dataclass
class Template:
    """Lines that differ only in their masked values."""

    text: str
    fields: tuple[tuple[str, str], ...] = ()  # jsonl: the fields whose values never vary
    count: int = 0
    examples: list[str] = field(default_factory=list)
    key: str = ""  # the words that make it a rejection ('CitationGuard: rejected'); "" if it is not one
    ident: str = ""  # the guard the line names ('CitationGuard'), if it names one
    strong: bool = False  # it names its guard

    def add(self, line: str) -> None:
        """Count one more line of this template."""
        self.count += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(line)


@dataclass
class Proposal:
    """One guard found in the logs: its name, match, kind and the lines it matches."""

    name: str
    match: str | dict[str, object]
    count: int
    strong: bool
    kind: str | None
    templates: list[Template]
    covered_by: Path | None = None  # an existing definition already matching these lines

    @property
    def example(self) -> str:
        """One real line of the guard's most frequent template."""
        return max(self.templates, key=lambda t: t.count).examples[0]

    @property
    def template_files(self) -> tuple[Path, ...]:
        """The bundled templates whose canaries this guard gets."""
        files = next((names for kind, _, names in KINDS if kind == self.kind), ())
        return tuple(bundled_defs_dir() / name for name in files)


@dataclass
class LogScan:
    """What ``scan_logs`` found: files, line counts, the proposed guards and agent activity."""

    patterns: tuple[str, ...]
    files: list[Path]
    unreadable: list[tuple[Path, str]]
    lines: int
    log_format: LogFormat
    proposals: list[Proposal]
    activity: Proposal | None
    cut: int = 0  # lines longer than the collectors' MAX_LINE, read only that far


@dataclass(frozen=True)
class InitSettings:
    """What ``canary init`` was told: how to reach the agent, its logs and its model server."""

    agent_url: str | None = None
    agent_command: tuple[str, ...] | None = None
    logs: tuple[str, ...] = ()
    model_upstream: str | None = None


@dataclass
class InitResult:
    """The scan, the guards chosen, and what happened to each file."""

    scan: LogScan
    chosen: list[Proposal]
    config_path: Path
    files: list[tuple[Path, str]]  # (path, "written" | "replaced" | "kept" | "unchanged")

