"""The one place where filter strings are built. Every value goes through `literal`, every column
name through `column`, so an id such as `u1' OR '1'='1` is only ever an id."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from agent_memory.errors import InvalidInputError
from agent_memory.models import OrgScope, Scope, as_utc

_COLUMN = re.compile(r"^[a-z_][a-z0-9_]*$")


def column(name: str) -> str:
    """A column name, checked against a strict pattern (names never come from users)."""
    if not _COLUMN.match(name):
        raise ValueError(f"not a column name: {name!r}")
    return name


def literal(value: Any) -> str:
    """A SQL literal for `value`: strings quoted with embedded quotes doubled, timestamps typed."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError("filter values must be finite numbers")
        return repr(value)
    if isinstance(value, datetime):
        ts = as_utc(value).replace(tzinfo=None)
        # isoformat pads the year to four digits (strftime's %Y does not below 1000 on glibc).
        return f"arrow_cast('{ts.isoformat(timespec='microseconds')}Z', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError("filter values must not contain NUL characters")
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def metadata_term(key: str, value: Any) -> str:
    """The `key=value` term stored in `metadata_kv` for equality filters on metadata."""
    return f"{key}={json.dumps(value, sort_keys=True, ensure_ascii=False)}"


class Where:
    """A conjunction of conditions, rendered to one filter string."""

    def __init__(self, table: str | None = None) -> None:
        # `table` qualifies every column (`target.state`), for the conditions of a merge_insert.
        if table is not None and table not in ("target", "source"):
            raise ValueError(f"not a merge table alias: {table!r}")
        self._prefix = f"{table}." if table else ""
        self._parts: list[str] = []

    def _col(self, name: str) -> str:
        return self._prefix + column(name)

    def eq(self, name: str, value: Any) -> Where:
        """`name = value` (or `IS NULL` for None)."""
        if value is None:
            self._parts.append(f"{self._col(name)} IS NULL")
        else:
            self._parts.append(f"{self._col(name)} = {literal(value)}")
        return self

    def ne(self, name: str, value: Any) -> Where:
        """`name <> value` (or `IS NOT NULL` for None)."""
        if value is None:
            self._parts.append(f"{self._col(name)} IS NOT NULL")
        else:
            self._parts.append(f"{self._col(name)} <> {literal(value)}")
        return self

    def any_of(self, *alternatives: Where) -> Where:
        """At least one of the alternatives holds (each itself a conjunction)."""
        if not alternatives:
            raise ValueError("any_of needs at least one alternative")
        self._parts.append(" OR ".join(f"({a.render()})" for a in alternatives))
        return self

    def isin(self, name: str, values: Iterable[Any]) -> Where:
        """`name IN (...)`; an empty set matches nothing."""
        values = list(values)
        if not values:
            self._parts.append("FALSE")
        else:
            self._parts.append(f"{self._col(name)} IN ({', '.join(literal(v) for v in values)})")
        return self

    def null_or_in(self, name: str, values: Iterable[Any]) -> Where:
        """`name IS NULL OR name IN (...)`: no value, or one of `values` (none: only no value)."""
        values = list(values)
        if not values:
            self._parts.append(f"{self._col(name)} IS NULL")
        else:
            self._parts.append(f"({self._col(name)} IS NULL OR {self._col(name)} IN "
                               f"({', '.join(literal(v) for v in values)}))")
        return self

    def ge(self, name: str, value: Any) -> Where:
        """`name >= value`."""
        self._parts.append(f"{self._col(name)} >= {literal(value)}")
        return self

    def le(self, name: str, value: Any) -> Where:
        """`name <= value`."""
        self._parts.append(f"{self._col(name)} <= {literal(value)}")
        return self

    def lt(self, name: str, value: Any) -> Where:
        """`name < value`."""
        self._parts.append(f"{self._col(name)} < {literal(value)}")
        return self

    def null_or_gt(self, name: str, value: Any) -> Where:
        """`name IS NULL OR name > value`: an optional deadline not yet passed."""
        self._parts.append(f"({self._col(name)} IS NULL OR {self._col(name)} > {literal(value)})")
        return self

    def has_all(self, name: str, values: Sequence[str]) -> Where:
        """Every value is an element of the list column `name`."""
        if values:
            self._parts.append(f"array_has_all({self._col(name)}, make_array({', '.join(literal(v) for v in values)}))")
        return self

    def scope(self, scope: Scope | OrgScope, *, owner_only: bool = False) -> Where:
        """The tenant scope: org always, then user or team, then agent and session where given.

        `owner_only` stops at the user or team, for tables without agent and session columns.
        """
        self.eq("org_id", scope.org_id)
        if isinstance(scope, OrgScope):
            return self
        if scope.user_id is not None:
            self.eq("user_id", scope.user_id)
        if scope.team_id is not None:
            self.eq("team_id", scope.team_id)
        if owner_only:
            return self
        if scope.agent_id is not None:
            self.eq("agent_id", scope.agent_id)
        if scope.session_id is not None:
            self.eq("session_id", scope.session_id)
        return self

    def render(self) -> str:
        """The filter string (at least one condition is always present)."""
        if not self._parts:
            raise ValueError("an empty filter would match every tenant's rows")
        return " AND ".join(f"({p})" for p in self._parts)


def scoped(scope: Scope | OrgScope, *, owner_only: bool = False) -> Where:
    """A filter that starts with the tenant scope; every query on tenant data begins here."""
    return Where().scope(scope, owner_only=owner_only)
