"""The demo agent's guards, and the text helpers they read answers and pages with.

Each guard takes the task's state and the answer, and returns its rejections;
each rejection is one ``WARN guards`` line in the agent's log.
"""

from __future__ import annotations

import calendar
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from urllib.parse import urlsplit

from openai.types.chat import ChatCompletionMessageParam

URL_RE = re.compile(r"https?://[^\s<>\"'()\[\]{}]+")
NUMBER_RE = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?!\w)")
QUOTED_RE = re.compile(r"\"([^\"\n]+)\"|“([^”\n]+)”")
SOURCE_QUOTE_RE = re.compile(r"SOURCE QUOTE:\s*(?:\"([^\"\n]*)\"|“([^”\n]*)”)")
AMOUNT_RE = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)*)\s*(?:euros?|EUR)\b", re.I)
VERSION_RE = re.compile(r"(?<![\w.])(v?)(\d+(?:\.\d+)+)(?!\w|\.\d)")
_MONTH_RE = r"(Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|" \
            r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
DATE_RES = (
    re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b"),
    re.compile(rf"\b(?P<d>\d{{1,2}})\s+(?P<mn>{_MONTH_RE})\.?,?\s+(?P<y>\d{{4}})\b", re.I),
    re.compile(rf"\b(?P<mn>{_MONTH_RE})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y>\d{{4}})\b", re.I),
)
DENIAL_RE = re.compile(
    r"\b(?:was|is|were|came back|returned|appears|appeared|seems|seemed)\s+(?:completely\s+|entirely\s+)?"
    r"(?:empty|blank|a 404|404|not found|unavailable)\b"
    r"|\b(?:had|has|contained|contains|with)\s+no\s+(?:content|text|information)\b"
    r"|\bcould(?: not|n't) be found\b|\bpage not found\b",
    re.I,
)
DENIAL_SUBJECT_RE = re.compile(r"\b(?:page|site|document|article|url|link|source|it)\b|https?://", re.I)

class Phase(StrEnum):
    """Where a task is in its life."""

    PLANNING = "planning"
    EXECUTING = "executing"
    REVIEWING = "reviewing"
    REPORTING = "reporting"
    COMPLETED = "completed"


@dataclass
class Conversation:
    """One conversation: its messages after the system prompt (drafts included) and the pages read in it."""

    conversation_id: str
    messages: list[ChatCompletionMessageParam] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)


@dataclass
class TaskState:
    """Everything the agent knows about one task."""

    task_id: str
    prompt: str
    phase: Phase = Phase.PLANNING
    turn: int = 0
    tool_calls: int = 0
    fetched_urls: list[str] = field(default_factory=list)
    page_chars: dict[str, int] = field(default_factory=dict)
    turn_observations: list[str] = field(default_factory=list)
    all_observations: list[str] = field(default_factory=list)
    pages: list[tuple[str, str]] = field(default_factory=list)
    messages: list[ChatCompletionMessageParam] = field(default_factory=list)
    history: list[ChatCompletionMessageParam] = field(default_factory=list)  # earlier turns' messages


@dataclass(frozen=True)
class Rejection:
    """One guard's verdict against an answer: the line it logs and the reason the model is told."""

    guard: str
    line: str
    reason: str


_HIDDEN_RE = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->", re.S | re.I)
_BLOCK_RE = re.compile(r"</?(?:p|div|br|li|ul|ol|h[1-6]|tr|td|section|article|header|footer|title|pre|table|"
                       r"blockquote)\b[^>]*>", re.I)
_TAG_RE = re.compile(r"<[^>]*>")


def page_text(body: str, content_type: str = "text/html") -> str:
    """The readable text of a page: one line per block, whitespace collapsed."""
    text = body
    if "html" in content_type or body.lstrip().startswith("<"):
        text = html.unescape(_TAG_RE.sub("", _BLOCK_RE.sub("\n", _HIDDEN_RE.sub(" ", body))))
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def find_urls(text: str) -> list[str]:
    """The URLs in a text, in order, without repeats or trailing punctuation."""
    return list(dict.fromkeys(match.group(0).rstrip(".,;:!?") for match in URL_RE.finditer(text)))


def normalise_url(url: str) -> str:
    """A URL compared without case in the host, a leading ``www.``, a trailing slash or a fragment."""
    try:
        parts = urlsplit(url.rstrip(".,;:!?"))
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return url.lower().rstrip("/")
    host = (parts.hostname or "").lower().removeprefix("www.")
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme.lower()}://{host}{port}{parts.path.rstrip('/')}{query}"


def _sentences(text: str) -> list[str]:
    return [s for line in text.splitlines() for s in re.split(r"(?<=[.!?])\s+", line) if s.strip()]


def find_dates(text: str) -> list[tuple[str, date]]:
    """Every date written as ``2026-11-29``, ``29 November 2026`` or ``November 29, 2026``."""
    found: list[tuple[str, date]] = []
    for pattern in DATE_RES:
        for match in pattern.finditer(text):
            parts = match.groupdict()
            month = int(parts["m"]) if parts.get("m") else _month_number(parts["mn"])
            try:
                found.append((match.group(0), date(int(parts["y"]), month, int(parts["d"]))))
            except ValueError:
                continue
    return found


def _month_number(name: str) -> int:
    return list(calendar.month_abbr).index(name[:3].title())


def find_versions(text: str) -> list[str]:
    """Version-shaped numbers as written: ``1.2.3``, ``v0.31.6``, ``v2.1``."""
    return [m.group(0) for m in VERSION_RE.finditer(text) if m.group(1) or m.group(2).count(".") >= 2]


Guard = Callable[[TaskState, str], list[Rejection]]


def citation_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every URL in the answer must be one the agent fetched."""
    fetched = {normalise_url(url) for url in state.fetched_urls}
    return [
        Rejection("citation", f"CitationGuard: rejected url={url} not in fetched urls",
                  f"the URL {url} is not a page you read")
        for url in find_urls(answer) if normalise_url(url) not in fetched
    ]


def quote_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every double-quoted sentence in the answer must appear verbatim in what was fetched."""
    corpus = " ".join("\n".join(state.all_observations).split())
    quotes = (" ".join((a or b).split()) for a, b in QUOTED_RE.findall(answer))
    return [
        Rejection("quote", f'QuoteGuard: rejected quote="{quote}" not found verbatim in observations',
                  f'the quote "{quote}" is not on the page')
        for quote in dict.fromkeys(quotes) if len(quote.split()) >= 3 and quote not in corpus
    ]


def number_guard(state: TaskState, answer: str) -> list[Rejection]:
    """With a ``SOURCE QUOTE``, every number outside the quote must appear inside it."""
    quotes = [a or b for a, b in SOURCE_QUOTE_RE.findall(answer)]
    if not quotes:
        return []
    inside = {n.replace(",", "") for quote in quotes for n in NUMBER_RE.findall(URL_RE.sub(" ", quote))}
    outside = NUMBER_RE.findall(URL_RE.sub(" ", SOURCE_QUOTE_RE.sub(" ", answer)))
    return [
        Rejection("number", f"SpanGrounding: rejected entity={n} not in source quote",
                  f"the number {n} is not in your source quote")
        for n in dict.fromkeys(outside) if n.replace(",", "") not in inside
    ]


def denial_guard(state: TaskState, answer: str) -> list[Rejection]:
    """The answer may not call a page empty or missing when the agent read content from it."""
    chars = sum(state.page_chars.values())
    if not chars:
        return []
    return [
        Rejection("denial", f'EvidenceDenial: rejected claim="{sentence}" while page had {chars} chars',
                  f"the page had {chars} characters of content, it was not empty or missing")
        for sentence in _sentences(answer)
        if DENIAL_RE.search(sentence) and DENIAL_SUBJECT_RE.search(sentence)
    ]


def date_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every date in the answer must appear in the observations."""
    # Only check when this turn has observations: with no tool output in the turn there is
    # nothing to ground a date against, and rejecting every date would be a false alarm.
    if not state.turn_observations:
        return []
    seen = {when for _, when in find_dates("\n".join(state.turn_observations))}
    return [
        Rejection("date", f"DateGuard: rejected date={text} not in observations",
                  f"the date {text} is not on the page")
        for text, when in find_dates(URL_RE.sub(" ", answer)) if when not in seen
    ]


def version_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every version number in the answer must appear in the observations."""
    seen = {v.lstrip("v") for v in find_versions("\n".join(state.all_observations))}
    return [
        Rejection("version", f"VersionGuard: rejected version={v} not in observations",
                  f"the version {v} is not on the page")
        for v in dict.fromkeys(find_versions(URL_RE.sub(" ", answer))) if v.lstrip("v") not in seen
    ]


def _plain(number: str) -> str:
    return number.replace(",", "")


def figure_guard(state: TaskState, answer: str) -> list[Rejection]:
    """Every amount in euros must be on a page read in the conversation, unless stated earlier in it."""
    on_pages = {_plain(n) for n in NUMBER_RE.findall("\n".join(state.all_observations))}
    # Amounts the conversation already stated count as established and are not checked again:
    # the hole a figure invented on one turn and repeated on the next goes through.
    established = {_plain(n) for m in state.history for n in NUMBER_RE.findall(str(m.get("content") or ""))}
    return [
        Rejection("figure", f"FigureGuard: rejected figure={n} euros not on any page of the conversation",
                  f"the figure {n} euros is not on any page you read")
        for n in dict.fromkeys(AMOUNT_RE.findall(URL_RE.sub(" ", answer)))
        if _plain(n) not in on_pages and _plain(n) not in established
    ]


REVIEW_GUARDS: tuple[Guard, ...] = (citation_guard, quote_guard, number_guard, denial_guard, date_guard,
                                    figure_guard)
REPORTING_GUARDS: tuple[Guard, ...] = (version_guard,)

