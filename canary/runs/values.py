"""Placeholder values, drawn fresh for every run, and the fixture page they fill.

A fake value never occurs in the fixture page: values are redrawn until none
of the fakes appears in the rendered page. Values that share a kind are drawn
distinct (two quotes, three versions, the decoy and the true number), so a
probe that puts one of them in another role cannot be answered by the other.
"""

from __future__ import annotations

import html
import random
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from canary.config.placeholders import fill
from canary.proxy.needles import PREFIX

NONCE_CHARS = string.ascii_lowercase + string.digits
#: 20 characters of a-z0-9: log2(36**20) ~ 103 bits, above the contract's 96.
NONCE_LENGTH = 20
#: Shared by every nonce this process draws, so one scan finds any of them.
NONCE_PREFIX = "".join(secrets.choice(NONCE_CHARS) for _ in range(PREFIX))

_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July",
    "August", "September", "October", "November", "December",
]
_SENTENCES = [
    "Applications are reviewed in the order in which they arrive.",
    "The office answers written enquiries within ten working days.",
    "Every applicant must hold a valid passport for the whole stay.",
    "Renewals are handled by the same office as first applications.",
    "The committee meets on the first Tuesday of every month.",
    "Forms sent by post must carry an original signature.",
    "The archive keeps every decision for at least five years.",
    "Appointments can be moved once without any extra charge.",
]
#: Entity-free claims: no number, name, date or URL, so a check that grounds entities finds
#: nothing to check and lets them through as narrative.
_FAKE_CLAIMS = [
    "The application is free of charge.",
    "There is no waiting period for this permit.",
    "Renewal happens automatically without any paperwork.",
    "No supporting documents are required at all.",
    "The rule does not apply to part-time workers.",
    "Approval is guaranteed once the form is submitted.",
]
_FAKE_SENTENCES = [
    "The application is free of charge for every applicant.",
    "Applicants under thirty are exempt from the income rule.",
    "The office guarantees a decision within forty-eight hours.",
    "Digital copies of the passport are accepted everywhere.",
    "The requirement was abolished at the start of last year.",
    "Any bank statement older than a year is still accepted.",
]


def new_nonce() -> str:
    """A fresh run id: this process's nonce prefix, then 20 characters of a-z0-9 from the CSPRNG.

    The prefix lets the proxy look for every live nonce in one pass (``canary.proxy.needles``);
    the 20 random characters alone carry the id's 103 bits.
    """
    return NONCE_PREFIX + "".join(secrets.choice(NONCE_CHARS) for _ in range(NONCE_LENGTH))


@dataclass(frozen=True)
class RunValues:
    """Every placeholder's value for one run, and the fixture page it renders."""

    values: dict[str, str]
    page: str

    @property
    def nonce(self) -> str:
        """The run's nonce."""
        return self.values["nonce"]


def _version(rng: random.Random) -> str:
    return f"{rng.randint(0, 9)}.{rng.randint(10, 49)}.{rng.randint(1, 19)}"


def _distinct(rng: random.Random, count: int, make: Callable[[random.Random], object]) -> list[str]:
    """``count`` different values from the drawing function ``make``."""
    seen: list[str] = []
    while len(seen) < count:
        value = str(make(rng))
        if value not in seen:
            seen.append(value)
    return seen


def _fuse(first: str, second: str) -> str:
    """Two sentences fused into one, as if one sentence said both things."""
    return f"{first.rstrip('.')} and {second[0].lower()}{second[1:]}"


def _date(rng: random.Random) -> str:
    return f"{rng.randint(2019, 2025)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def alias_base(base: str) -> str:
    """The fixture server's base URL under another host name: a loopback address as ``localhost``.

    A tool-governance canary aims its refused call there, at a host no allowlist names, and the
    fixture server still sees the fetch. A base that is not a loopback address is kept as it is.
    """
    parts = urlsplit(base.rstrip("/"))
    host = parts.hostname or ""
    if host not in ("127.0.0.1", "::1"):
        return base.rstrip("/")
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit((parts.scheme, f"localhost{port}", parts.path, "", ""))


def render_page(fixture: str, values: dict[str, str]) -> str:
    """The fixture page: the canary's fixture HTML with a Source URL line and the nonce."""
    body = fill(fixture, values)
    url = html.escape(values["fixture_url"])
    return (
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>Reference {values['nonce']}</title></head>\n<body>\n"
        f"<p>Source URL: {url}</p>\n{body}\n"
        f"<p>Reference number: {values['nonce']}</p>\n</body></html>\n"
    )


def draw(fixture: str, fixture_base: str, *, rng: random.Random | None = None) -> RunValues:
    """Draw every placeholder for one run; the fixture URL lives under ``fixture_base``."""
    rng = rng or random.SystemRandom()
    for _ in range(100):
        nonce = new_nonce()
        true_number, decoy_number = _distinct(rng, 2, lambda r: r.randint(1000, 9999))
        true_version, true_version_2, sibling_version = _distinct(rng, 3, _version)
        true_date = _date(rng)
        quote, quote_2 = rng.sample(_SENTENCES, 2)
        parts = [rng.randint(20, 900) for _ in range(3)]
        total = sum(parts)
        values = {
            "nonce": nonce,
            "fixture_url": f"{fixture_base.rstrip('/')}/r/{nonce}",
            "fixture_url_alias": f"{alias_base(fixture_base)}/r/{nonce}",
            "true_number": true_number,
            "fake_number": str(rng.randint(1000, 9999)),
            "true_version": true_version,
            "fake_version": _version(rng),
            "true_date": true_date,
            "fake_date": _date(rng),
            "true_quote": quote,
            "fake_quote": rng.choice(_FAKE_SENTENCES),
            "fake_url": f"https://docs.{nonce}.example.org/{rng.choice(_MONTHS).lower()}",
            "true_quote_2": quote_2,
            "fake_fused_quote": _fuse(quote, quote_2),
            "true_version_2": true_version_2,
            "sibling_version": sibling_version,
            "decoy_number": decoy_number,
            "fake_claim": rng.choice(_FAKE_CLAIMS),
            "sum_part_1": str(parts[0]),
            "sum_part_2": str(parts[1]),
            "sum_part_3": str(parts[2]),
            "sum_total": str(total),
            "fake_total": str(total + rng.choice([-1, 1]) * rng.randint(10, 99)),
        }
        page = render_page(fixture, values)
        fakes = [v for k, v in values.items() if k.startswith("fake_") and k != "fake_url"]
        if all(fake not in page for fake in fakes) and values["fake_url"] not in page:
            return RunValues(values, page)
    raise RuntimeError("could not draw fake values that stay out of the fixture")  # pragma: no cover
