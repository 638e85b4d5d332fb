"""A raw table's rules read as Polars expressions: whether every row of a frame passes, without GX.

GX names the failing rows, reasons and examples, but it takes three seconds to import and a run costs
about 0.2 s whatever the frame's size (it builds its validation graph again on each call,
bench/README.md), while almost every slice an ingest validates passes. `passes` answers that question
from the same rules the GX suite is built from (expectations/suites.py `rules`), read with GX's pandas
semantics; `validate_frame` asks it first and runs GX only on a frame it fails.
tests/expectations/test_screen.py checks, on random frames of every raw table, that each rule breaks
on exactly the rows GX names.

GX's pandas semantics, as the screen follows them: a value is missing when null, or NaN in a float
column (pandas' isnull); `not null` breaks on a missing value, every other rule skips missing values;
`between` compares with its bounds (strict where asked); `in set` compares with the set; `unique`
breaks on every occurrence of a repeated value; a rule's `where` (GX's row condition `column IN
(...)`) limits it to the rows whose value is in the list.
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import polars as pl

from expectations.suites import BETWEEN, IN_SET, NOT_NULL, UNIQUE, Rule, rules


def passes(table: str, frame: pl.DataFrame) -> bool | None:
    """Whether every row of `frame` passes raw.`table`'s rules; None when a column's type is not the
    one its rule compares with (GX then says why)."""
    if frame.is_empty():
        return True
    try:
        return not frame.select(_broken_rows(table, tuple(frame.schema.items())).any()).item()
    except pl.exceptions.PolarsError:
        return None


@cache
def _broken_rows(table: str, schema: tuple[tuple[str, pl.DataType], ...]) -> pl.Expr:
    """True on a row that breaks any of the table's rules, for frames of `schema`."""
    return pl.any_horizontal([broken_by(rule, dict(schema)) for rule in rules(table)])


def broken_by(rule: Rule, schema: Mapping[str, pl.DataType]) -> pl.Expr:
    """True on a row that breaks `rule`, in a frame of `schema` (GX's pandas semantics, module doc)."""
    value = pl.col(rule.column)
    missing = value.is_null()
    if schema[rule.column].is_float():
        missing = missing | value.is_nan()
    present = ~missing
    if rule.kind == NOT_NULL:
        broken = missing
    elif rule.kind == BETWEEN:
        broken = present & ~_within(value, rule)
    elif rule.kind == IN_SET:
        broken = present & ~value.is_in(list(rule.value_set))
    elif rule.kind == UNIQUE:
        broken = present & value.is_duplicated()
    else:
        raise ValueError(f"{rule.column}: no Polars reading of rule kind {rule.kind!r}")
    if rule.where is not None:
        column, values = rule.where
        broken = broken & pl.col(column).is_in(list(values))
    return broken.fill_null(False)


def _within(value: pl.Expr, rule: Rule) -> pl.Expr:
    ok = pl.lit(True)
    if rule.min_value is not None:
        ok = ok & (value > rule.min_value if rule.strict_min else value >= rule.min_value)
    if rule.max_value is not None:
        ok = ok & (value < rule.max_value if rule.strict_max else value <= rule.max_value)
    return ok
