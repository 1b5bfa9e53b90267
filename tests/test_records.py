"""``canary.records.frozen`` behaves as ``@dataclass(frozen=True)`` does: one class of each, side by side.
(That ``canary status`` then loads no ``dataclasses`` is ``tests/status/test_status_lean.py``'s to check.)"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from canary import records
from canary.records import FrozenError, frozen


@frozen
class Made:
    """A value with every kind of field the status path uses."""

    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = records.field(default_factory=dict)
    noted: bool = records.field(default=False, compare=False)


@dataclass(frozen=True)
class Twin:
    """``Made``, as a frozen dataclass."""

    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)
    noted: bool = field(default=False, compare=False)


@frozen
class Point:
    """Hashable fields only."""

    name: str
    count: int = 0
    noted: bool = records.field(default=False, compare=False)


@dataclass(frozen=True)
class PointTwin:
    """``Point``, as a frozen dataclass."""

    name: str
    count: int = 0
    noted: bool = field(default=False, compare=False)


@frozen(kw_only=True)
class Named:
    """Keyword-only fields."""

    name: str
    count: int = 0


@frozen
class Lone:
    """One field."""

    only: str


@frozen
class Hashed:
    """A class that hashes itself."""

    name: str
    table: dict[str, int] = records.field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.table.items()))))


@frozen
class Empty:
    """No field at all."""


ARGS = [
    ("a",),
    ("a", 2),
    ("a", 2, ("x", "y")),
    ("b", 0, (), {}),
    ("a", 2, ("x",), {}, True),
]


@pytest.mark.parametrize("args", ARGS)
def test_repr_is_the_dataclass_repr(args: tuple[object, ...]) -> None:
    assert repr(Made(*args)) == repr(Twin(*args)).replace("Twin(", "Made(")  # type: ignore[arg-type]


@pytest.mark.parametrize("left", ARGS)
@pytest.mark.parametrize("right", ARGS)
def test_equality_and_hash_are_the_dataclass_ones(left: tuple[object, ...], right: tuple[object, ...]) -> None:
    made = Made(*left) == Made(*right)  # type: ignore[arg-type]
    twin = Twin(*left) == Twin(*right)  # type: ignore[arg-type]
    assert made == twin
    assert (Made(*left) != Made(*right)) == (not twin)  # type: ignore[arg-type]
    if made:
        assert hash(Point(*left[:2])) == hash(Point(*right[:2]))  # type: ignore[arg-type]


def test_a_field_left_out_of_comparison_changes_neither_equality_nor_hash() -> None:
    assert Made("a", noted=True) == Made("a", noted=False)
    assert hash(Point("a", noted=True)) == hash(Point("a", noted=False))
    assert hash(Point("a", 1)) == hash(PointTwin("a", 1))  # the tuple of the compared fields, as the dataclass's
    with pytest.raises(TypeError):
        hash(Made("a"))  # a dict among the compared fields: unhashable, as the dataclass is


def test_only_its_own_class_is_equal() -> None:
    assert Made("a") != Twin("a")
    assert Made("a") != ("a", 0, (), {})
    assert Lone("a") == Lone("a") and Lone("a") != Lone("b") and hash(Lone("a")) == hash(("a",))
    assert Empty() == Empty() and hash(Empty()) == hash(())
    assert {Point("a", 1), Point("a", 1), Point("b", 1)} == {Point("a", 1), Point("b", 1)}


def test_nothing_is_assigned_or_deleted_once_built() -> None:
    made = Made("a")
    with pytest.raises(FrozenError):
        made.name = "b"  # type: ignore[misc]
    with pytest.raises(AttributeError):  # what the dataclass raises is an AttributeError too
        made.other = 1  # type: ignore[attr-defined]
    with pytest.raises(FrozenError):
        del made.count  # type: ignore[misc]
    assert made == Made("a")


def test_replace_and_asdict_are_the_dataclass_ones() -> None:
    made, twin = Made("a", 1, extra={"k": 1}), Twin("a", 1, extra={"k": 1})
    assert records.replace(made, count=2) == Made("a", 2, extra={"k": 1})
    assert repr(records.replace(made, noted=True)) == repr(dataclasses.replace(twin, noted=True)).replace("Twin", "Made")
    assert list(records.asdict(made).items()) == list(dataclasses.asdict(twin).items())
    assert records.replace(Named(name="a"), count=2) == Named(name="a", count=2)
    with pytest.raises(TypeError):
        records.replace(made, nothing=1)


def test_the_constructor_is_the_dataclass_constructor() -> None:
    assert Made("a").extra is not Made("a").extra  # a factory gives each its own
    assert Named(name="a", count=1).count == 1
    with pytest.raises(TypeError):
        Named("a")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Made()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Made("a", nothing=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Made("a", name="b")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Made("a", 1, (), {}, False, 6)  # type: ignore[call-arg]
    assert Made.__match_args__ == Twin.__match_args__ and Named.__match_args__ == ()


def test_a_field_without_a_default_after_one_with_a_default_is_refused_as_by_the_dataclass() -> None:
    def late() -> type:
        return type("Late", (), {"__annotations__": {"early": "int", "late": "int"}, "early": 0})

    with pytest.raises(TypeError):
        dataclass(frozen=True)(late())
    with pytest.raises(TypeError):
        frozen(late())
    assert frozen(kw_only=True)(late())(late=1).early == 0


def test_a_method_the_class_writes_itself_is_kept() -> None:
    assert hash(Hashed("a", {"k": 1})) == hash(("a", (("k", 1),)))
    assert len({Hashed("a", {"k": 1}), Hashed("a", {"k": 1})}) == 1
