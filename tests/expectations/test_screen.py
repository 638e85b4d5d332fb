"""The screen (expectations/screen.py) reads each table's rules as GX reads the suite built from them: on
random frames of every raw table, each rule breaks on exactly the rows GX's pandas engine names, a frame
passes the screen exactly when it passes GX, and a passing frame never imports GX."""
from __future__ import annotations

import datetime as dt
import math
import random
import subprocess
import sys

import polars as pl
import pytest

from expectations import screen
from expectations.suites import IN_SET, SUITE_TABLES, UNIQUE, rules
from expectations.validate import validate_frame
from pipelines.contracts import contract
from pipelines.paths import REPO_ROOT

ROWS = 1500
SEEDS = (1, 2)
T0 = dt.datetime(2026, 11, 1, 12)
# values every float column draws from: both sides of each bound the suites use (0, 1, 100), and the
# values pandas and Polars could read differently (NaN, infinities, negative zero, null)
FLOATS = [None, math.nan, math.inf, -math.inf, -1.0, -1e-12, -0.0, 0.0, 1e-12, 0.5, 1.0, 1.0000001, 99.9,
          100.0, 100.5, 40531.0]
INTS = [None, -2, -1, 0, 1, 2, 7]


def _pools(table: str) -> dict[str, list]:
    """Per column, the values a random frame draws from: for strings, the members of every set and row
    condition the suite names for it (often, so most rows satisfy most rules), a stranger, an empty
    string and null."""
    named: dict[str, list] = {}
    for rule in rules(table):
        if rule.kind == IN_SET:
            named.setdefault(rule.column, []).extend(rule.value_set)
        if rule.where is not None:
            named.setdefault(rule.where[0], []).extend(rule.where[1])
    pools: dict[str, list] = {}
    for column, dtype in contract(table).schema.items():
        if dtype == pl.String:
            members = named.get(column, ["a", "b"])
            pools[column] = members * 4 + ["stranger", "", None]
        elif dtype.is_float():
            pools[column] = FLOATS
        elif dtype.is_integer():
            pools[column] = INTS
        elif dtype == pl.Boolean:
            pools[column] = [None, True, False]
        elif dtype == pl.Datetime:
            pools[column] = [None, T0, T0 + dt.timedelta(minutes=1)] + [T0] * 6
        elif dtype == pl.Date:
            pools[column] = [None, T0.date()] + [T0.date()] * 6
        else:
            raise AssertionError(f"raw.{table}.{column}: no pool for {dtype}")
    return pools


def random_frame(table: str, seed: int) -> pl.DataFrame:
    rng = random.Random(seed)
    pools = _pools(table)
    unique = {rule.column for rule in rules(table) if rule.kind == UNIQUE}
    data = {}
    for column, pool in pools.items():
        if column in unique:  # mostly distinct, some repeated, some null
            data[column] = [None if rng.random() < 0.02 else f"id{rng.randrange(ROWS * 4)}" for _ in range(ROWS)]
        else:
            data[column] = [rng.choice(pool) for _ in range(ROWS)]
    return pl.DataFrame(data, schema=contract(table).schema)


def gx_rows(table: str, frame: pl.DataFrame, monkeypatch: pytest.MonkeyPatch) -> dict[tuple, set[int]]:
    """(expectation, column, reason) -> the rows GX finds breaking it (GX alone: the screen is off)."""
    with monkeypatch.context() as patch:
        patch.setattr(screen, "passes", lambda _table, _frame: None)
        outcome = validate_frame(table, frame)
    return {(o.expectation_type, o.column, o.reason): set(o.unexpected_index) for o in outcome.failed}


def screen_rows(table: str, frame: pl.DataFrame) -> dict[tuple, set[int]]:
    found = {}
    for rule in rules(table):
        rows = set(frame.select(screen.broken_by(rule, frame.schema)).to_series().arg_true().to_list())
        if rows:
            found[(rule.kind, rule.column, rule.reason)] = rows
    return found


@pytest.mark.parametrize("table", SUITE_TABLES)
def test_every_rule_breaks_on_the_rows_gx_names(table: str, monkeypatch: pytest.MonkeyPatch):
    for seed in SEEDS:
        frame = random_frame(table, seed)
        expected = gx_rows(table, frame, monkeypatch)
        assert expected, "the random frame breaks some rule"
        assert screen_rows(table, frame) == expected
        assert screen.passes(table, frame) is False
        broken = set().union(*expected.values())
        kept = frame.with_row_index("_row").filter(~pl.col("_row").is_in(list(broken))).drop("_row")
        assert kept.height > 0, "some rows pass every rule"
        assert gx_rows(table, kept, monkeypatch) == {}
        assert screen.passes(table, kept) is True


def test_a_column_of_another_type_is_left_to_gx():
    frame = random_frame("dcgm_samples", 3).with_columns(pl.col("value").cast(pl.String))
    assert screen.passes("dcgm_samples", frame) is None


PASSING_FRAME_VALIDATED = """
import sys
import polars as pl
from expectations import screen
from expectations.suites import rules
from expectations.validate import validate_frame
from tests.expectations.test_screen import random_frame

frame = random_frame("job_events", 1)
broken = pl.any_horizontal([screen.broken_by(rule, frame.schema) for rule in rules("job_events")])
outcome = validate_frame("job_events", frame.filter(~broken))
print(outcome.success, outcome.rows > 0, "great_expectations" in sys.modules)
"""


def test_a_passing_frame_never_imports_gx():
    run = subprocess.run([sys.executable, "-c", PASSING_FRAME_VALIDATED], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True)
    assert run.stdout.split() == ["True", "True", "False"]
