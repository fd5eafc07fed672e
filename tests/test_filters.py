"""Filter strings are built by one escaping function."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from agent_memory.errors import InvalidInputError
from agent_memory.models import Scope
from storage.filters import Where, column, literal, scoped


def test_quotes_are_doubled_not_interpreted() -> None:
    assert literal("u1' OR '1'='1") == "'u1'' OR ''1''=''1'"


def test_scope_filter_always_has_org_and_user() -> None:
    text = scoped(Scope.user("acme", "o'neil")).render()
    assert text == "(org_id = 'acme') AND (user_id = 'o''neil')"


def test_team_scope_filters_team_not_user() -> None:
    text = scoped(Scope(org_id="acme", team_id="t1")).render()
    assert "team_id = 't1'" in text and "user_id" not in text


def test_scope_requires_org_and_user_or_team() -> None:
    with pytest.raises(InvalidInputError):
        Scope(org_id="", user_id="u")
    with pytest.raises(InvalidInputError):
        Scope(org_id="acme")


def test_values_are_typed() -> None:
    assert literal(3) == "3" and literal(True) == "TRUE" and literal(None) == "NULL"
    assert literal(datetime(2026, 1, 2, tzinfo=timezone.utc)).startswith("arrow_cast('2026-01-02T00:00:00.000000Z'")
    with pytest.raises(InvalidInputError):
        literal(float("nan"))
    with pytest.raises(InvalidInputError):
        literal("a\x00b")


@pytest.mark.parametrize(("value", "text"), [
    (datetime(399, 6, 26, 18, 39, 25), "0399-06-26T18:39:25.000000Z"),
    (datetime(1, 1, 1, tzinfo=timezone.utc), "0001-01-01T00:00:00.000000Z"),
    (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc), "9999-12-31T23:59:59.999999Z"),
    (datetime(1000, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))), "0999-12-31T23:30:00.000000Z"),
])
def test_timestamps_are_utc_with_four_digit_years(value: datetime, text: str) -> None:
    assert literal(value) == f"arrow_cast('{text}', 'Timestamp(Microsecond, Some(\"UTC\"))')"


def test_column_names_are_checked_and_empty_filters_refused() -> None:
    with pytest.raises(ValueError):
        column("user_id; DROP")
    with pytest.raises(ValueError):
        Where().render()
    assert Where().isin("id", []).render() == "(FALSE)"


def test_a_value_or_none_of_a_set() -> None:
    assert Where().null_or_in("team_id", ["t'1", "t2"]).render() == "((team_id IS NULL OR team_id IN ('t''1', 't2')))"
    assert Where().null_or_in("team_id", []).render() == "(team_id IS NULL)"
