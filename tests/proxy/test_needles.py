"""Needles: one pass per shared prefix finds a needle exactly when a substring search would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from canary.proxy.needles import Needles

ALPHABET = b"ab01"  # a small alphabet, so prefixes collide and near misses abound
needle = st.binary(min_size=1, max_size=8).map(lambda b: bytes(ALPHABET[x % 4] for x in b))
body = st.binary(max_size=200).map(lambda b: bytes(ALPHABET[x % 4] for x in b))


@given(needles=st.lists(needle, max_size=6, unique=True), body=body)
def test_finds_a_needle_exactly_when_one_occurs(needles: list[bytes], body: bytes) -> None:
    found = Needles({n: n for n in needles}).find(body)
    if any(n in body for n in needles):
        assert found is not None and found in body
    else:
        assert found is None


def test_shared_prefixes_and_near_misses() -> None:
    needles = Needles({b"pfx1aaaa": 1, b"pfx1bbbb": 2, b"zzzzcccc": 3})
    assert needles.find(b"... pfx1aaab pfx1bbbb ...") == 2
    assert needles.find(b"pfx1pfx1aaaa") == 1
    assert needles.find(b"pfx1aaa") is None
    assert needles.find(b"xx zzzzcccc") == 3
    assert not Needles({}) and Needles({}).find(b"anything") is None
