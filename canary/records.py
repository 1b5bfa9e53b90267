"""``frozen``: the frozen value types that ``canary status`` loads, defined without generating code.

``@dataclass(frozen=True)`` compiles six methods for every class it decorates, and importing
``dataclasses`` brings ``inspect``, ``ast`` and ``dis`` along: with the forty-odd classes of the
config and the status documents, that was a third of what ``canary status`` did as a whole
command. ``@frozen`` makes the same class from the same definition (annotated fields, defaults,
``field(default_factory=..., compare=...)``, ``kw_only``), with methods that are shared functions
reading the field names the class was given once; type checkers read it as a frozen dataclass.

What stays as the frozen dataclass would have it (``tests/test_records.py`` holds such a class and
a frozen dataclass side by side): the constructor takes the fields in order (by keyword only with
``kw_only``), fills defaults and calls factories; an instance equals only one of its own class
with equal compared fields, hashes as the tuple of those fields, shows as
``Name(field=value, ...)``, and raises ``FrozenError`` (an ``AttributeError``) on any assignment
or deletion. ``replace`` and ``asdict`` stand for the functions of ``dataclasses``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["FrozenError", "asdict", "field", "frozen", "replace"]

T = TypeVar("T")

Key = Callable[[object], tuple[object, ...]]


class FrozenError(AttributeError):
    """An assignment to (or deletion of) a field of a frozen value."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """What ``field(...)`` says of one field: its default or factory, and whether it is compared."""

    __slots__ = ("compare", "default", "default_factory")

    def __init__(self, default: object, default_factory: Callable[[], object] | Any, compare: bool) -> None:
        self.default, self.default_factory, self.compare = default, default_factory, compare


@overload
def field(*, default: T, compare: bool = True) -> T: ...


@overload
def field(*, default_factory: Callable[[], T], compare: bool = True) -> T: ...


def field(*, default: Any = MISSING, default_factory: Any = MISSING, compare: bool = True) -> Any:
    """A field's default (or a factory called for each instance), and whether ``==`` compares it."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, compare)


class _Spec:
    """A class's fields, read once when it is defined."""

    __slots__ = ("compare", "defaults", "factories", "names", "positional")

    def __init__(self, cls: type, kw_only: bool) -> None:
        names: list[str] = []
        self.defaults: dict[str, object] = {}
        self.factories: dict[str, Callable[[], object]] = {}
        compared: list[str] = []
        defaulted = False
        # the class's own annotations (``inspect.get_annotations`` would import inspect for this)
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
            if "ClassVar" in str(annotation):
                continue
            value = cls.__dict__.get(name, MISSING)
            compare = True
            if isinstance(value, Field):
                compare = value.compare
                if value.default_factory is not MISSING:
                    self.factories[name] = value.default_factory
                value = value.default
                if value is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, value)
            if value is not MISSING:
                self.defaults[name] = value
            elif defaulted and not kw_only and name not in self.factories:
                raise TypeError(f"{cls.__qualname__}: {name!r} without a default follows a field with one")
            defaulted = defaulted or name in self.defaults or name in self.factories
            names.append(name)
            if compare:
                compared.append(name)
        self.names = tuple(names)
        self.positional = 0 if kw_only else len(names)
        self.compare = _key(tuple(compared))


def _key(names: tuple[str, ...]) -> Key:
    """The tuple of the named attributes of an object (``attrgetter`` returns one value bare)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _init(self: Any, *args: object, **kwargs: object) -> None:
    spec: _Spec = self.__frozen__
    cls = type(self).__qualname__
    if len(args) > spec.positional:
        raise TypeError(f"{cls}() takes {spec.positional} positional arguments but {len(args)} were given")
    given = dict(zip(spec.names, args, strict=False))  # the first len(args) fields
    for name, value in kwargs.items():
        if name not in spec.names or name in given:
            what = "multiple values for argument" if name in given else "an unexpected keyword argument"
            raise TypeError(f"{cls}() got {what} {name!r}")
        given[name] = value
    state = self.__dict__
    for name in spec.names:
        if name in given:
            state[name] = given[name]
        elif name in spec.defaults:
            state[name] = spec.defaults[name]
        elif name in spec.factories:
            state[name] = spec.factories[name]()
        else:
            raise TypeError(f"{cls}() missing required argument: {name!r}")


def _eq(self: Any, other: object) -> object:  # bool, or NotImplemented for another class
    key: Key = self.__frozen__.compare
    if other.__class__ is self.__class__:
        return bool(key(self) == key(other))
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__frozen__.compare(self))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__frozen__.names)
    return f"{self.__class__.__qualname__}({shown})"


def _setattr(self: Any, name: str, value: object) -> None:
    raise FrozenError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise FrozenError(f"cannot delete field {name!r}")


def _finish(cls: type[T], kw_only: bool) -> type[T]:
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__qualname__}: a frozen value has no __post_init__")
    spec = _Spec(cls, kw_only)
    methods: dict[str, object] = {
        "__frozen__": spec, "__match_args__": spec.names[:spec.positional], "__init__": _init,
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


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: type[T] | None = None, /, *, kw_only: bool = False) -> type[T] | Callable[[type[T]], type[T]]:
    """Make ``cls`` a frozen value type (``kw_only``: its fields are passed by keyword only)."""
    if cls is None:
        return lambda c: _finish(c, kw_only)
    return _finish(cls, kw_only)


def replace(obj: T, /, **changes: object) -> T:
    """A copy of the frozen value ``obj`` with ``changes`` (``dataclasses.replace``)."""
    names: tuple[str, ...] = type(obj).__frozen__.names  # type: ignore[attr-defined]
    return type(obj)(**{name: getattr(obj, name) for name in names} | changes)


def asdict(obj: object) -> dict[str, Any]:
    """The fields of the frozen value ``obj`` by name, in order (their values as they are)."""
    names: tuple[str, ...] = type(obj).__frozen__.names  # type: ignore[attr-defined]
    return {name: getattr(obj, name) for name in names}
