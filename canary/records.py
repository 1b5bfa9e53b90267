"""``frozen``: a frozen dataclass that is cheap to define, for the value types ``canary status`` loads.

``@dataclass(frozen=True)`` compiles six methods for every class it decorates (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``): with the forty-odd
classes of the config and the status documents, that compiling was a third of what
``canary status`` did as a whole command. ``@frozen`` is the same dataclass with only its
``__init__`` compiled; equality, hashing, ``repr`` and immutability are the shared functions below,
which read the field names the class was given once. ``dataclasses.fields``, ``replace`` and
``asdict`` work on these classes as on any dataclass, and type checkers read it as a frozen one.

What stays as the dataclass would have it (``tests/test_records.py`` holds such a class and a frozen
dataclass side by side): an instance equals only one of its own class with equal ``compare``
fields, hashes as the tuple of those fields, shows as ``Name(field=value, ...)`` over its ``repr``
fields, and raises ``FrozenInstanceError`` on any assignment or deletion once built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["frozen"]

T = TypeVar("T")

Key = Callable[[object], tuple[object, ...]]


def _key(names: tuple[str, ...]) -> Key:
    """The tuple of the named attributes of an object (``attrgetter`` returns one value bare)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _eq(self: Any, other: object) -> object:  # bool, or NotImplemented for another class
    key: Key = self.__frozen_compare__
    if other.__class__ is self.__class__:
        return bool(key(self) == key(other))
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__frozen_hash__(self))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__frozen_repr__)
    return f"{self.__class__.__qualname__}({shown})"


def _setattr(self: Any, name: str, value: object) -> None:
    # The generated __init__ sets each field once; after that, as in a frozen dataclass, nothing is set.
    if name in self.__dict__ or name not in self.__dataclass_fields__:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _finish(cls: type[T], kw_only: bool) -> type[T]:
    cls = dataclasses.dataclass(cls, eq=False, repr=False, kw_only=kw_only)  # compiles __init__ only
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    compared = tuple(f.name for f in fields if f.compare)
    hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    methods: dict[str, object] = {
        "__frozen_compare__": staticmethod(_key(compared)),
        "__frozen_hash__": staticmethod(_key(hashed)),
        "__frozen_repr__": tuple(f.name for f in fields if f.repr),
        "__eq__": _eq, "__hash__": _hash, "__repr__": _repr, "__setattr__": _setattr, "__delattr__": _delattr,
    }
    for name, value in methods.items():
        if name not in cls.__dict__:  # as the dataclass does, a method the class writes itself stays
            type.__setattr__(cls, name, value)
    return cls


@overload
def frozen(cls: type[T], /) -> type[T]: ...


@overload
def frozen(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: type[T] | None = None, /, *, kw_only: bool = False) -> type[T] | Callable[[type[T]], type[T]]:
    """Make ``cls`` a frozen dataclass (``kw_only`` as the dataclass's) whose methods are shared."""
    if cls is None:
        return lambda c: _finish(c, kw_only)
    return _finish(cls, kw_only)
