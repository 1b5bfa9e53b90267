"""Column types of the store: times go in and come back aware, in UTC."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from canary.vocabulary import as_utc


class UTCDateTime(TypeDecorator[datetime]):
    """A datetime column: written as its UTC instant, read back aware in UTC.

    SQLite keeps no zone, so a value is stored as UTC wall time (the text the
    store has always written) and given its zone back when read. A naive value
    is taken to be UTC, as ``canary.vocabulary.as_utc`` does.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """The UTC instant of ``value``."""
        return None if value is None else as_utc(value)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """``value`` aware in UTC."""
        return None if value is None else as_utc(value)

    def coerce_compared_value(self, op: Any, value: Any) -> Any:
        """Compare with this type, so a bound time in any zone is compared as its UTC instant."""
        return self
