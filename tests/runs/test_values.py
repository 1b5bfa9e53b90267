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


def test_values_of_one_kind_are_distinct_and_fused_quotes_are_made_of_both() -> None:
    rng = random.Random(7)
    for _ in range(200):
        v = draw("<p>{true_quote}</p><p>{true_quote_2}</p>", "http://127.0.0.1:1", rng=rng).values
        assert v["true_quote"] != v["true_quote_2"]
        assert len({v["true_version"], v["true_version_2"], v["sibling_version"]}) == 3
        assert v["decoy_number"] != v["true_number"]
        assert v["fake_fused_quote"].startswith(v["true_quote"].rstrip("."))
        assert v["fake_fused_quote"].endswith(v["true_quote_2"][1:])
        parts = [int(v[f"sum_part_{i}"]) for i in (1, 2, 3)]
        assert int(v["sum_total"]) == sum(parts)
        assert v["fake_total"] != v["sum_total"]


def test_a_fused_quote_is_never_on_its_page() -> None:
    rng = random.Random(3)
    for _ in range(200):
        drawn = draw("<p>{true_quote}</p><p>{true_quote_2}</p>", "http://127.0.0.1:1", rng=rng)
        assert drawn.values["fake_fused_quote"] not in drawn.page
        assert drawn.values["true_quote"] in drawn.page and drawn.values["true_quote_2"] in drawn.page
