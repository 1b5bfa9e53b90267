"""Placeholder values: fresh, well-formed, and fakes never in the fixture."""

from __future__ import annotations

import random
import re

from canary.runs.values import draw, new_nonce

FIXTURE = (
    "<p>{true_quote}</p><p>The minimum amount is exactly {true_number} euros per month.</p>"
    "<p>Release {true_version} of {true_date}.</p>"
)


def test_nonce_is_long_enough_and_hostname_safe() -> None:
    seen = {new_nonce() for _ in range(2000)}
    assert len(seen) == 2000
    assert all(re.fullmatch(r"[a-z0-9]{36}", n) for n in seen)
    assert len({n[:16] for n in seen}) == 1  # one prefix per process: the proxy scans for it once
    assert len({n[16:] for n in seen}) == 2000


def test_fakes_never_occur_in_the_page_and_trues_do() -> None:
    rng = random.Random(3)
    for _ in range(300):
        run = draw(FIXTURE, "http://127.0.0.1:9/", rng=rng)
        v = run.values
        for key in ("fake_number", "fake_version", "fake_date", "fake_quote", "fake_url"):
            assert v[key] not in run.page
        for key in ("true_number", "true_version", "true_date", "true_quote", "nonce"):
            assert v[key] in run.page
        assert f"Source URL: {v['fixture_url']}" in run.page
        assert v["fixture_url"] == f"http://127.0.0.1:9/r/{v['nonce']}"
