"""Which of several byte strings a body carries, in one pass per shared prefix.

The nonces of one process share their first characters (``canary.runs.values.new_nonce``),
so with any number of runs in flight a body is scanned once for that prefix, and only where
it occurs are the whole nonces compared. Strings without a common prefix still work: each
distinct prefix is one more pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

__all__ = ["PREFIX", "Needles"]

T = TypeVar("T")
#: How many leading bytes group needles into one scan (a long prefix lets the search skip far).
PREFIX = 16


class Needles(Generic[T]):
    """A fixed set of needles, each with a value; ``find`` returns the value of one found in a body."""

    __slots__ = ("_groups",)

    def __init__(self, needles: Mapping[bytes, T]) -> None:
        groups: dict[bytes, list[tuple[bytes, T]]] = {}
        for needle, value in needles.items():
            if needle:
                groups.setdefault(needle[:PREFIX], []).append((needle, value))
        self._groups = tuple((prefix, tuple(members)) for prefix, members in groups.items())

    def __bool__(self) -> bool:
        return bool(self._groups)

    def find(self, body: bytes) -> T | None:
        """The value of the needle found earliest in ``body`` within the first group that has one, or None."""
        for prefix, members in self._groups:
            if len(members) == 1:
                needle, value = members[0]
                if needle in body:
                    return value
                continue
            at = body.find(prefix)
            while at >= 0:
                for needle, value in members:
                    if body.startswith(needle, at):
                        return value
                at = body.find(prefix, at + 1)
        return None
