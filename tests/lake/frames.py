"""Small deterministic frames for the lake tests, shared by the tests and the writer processes."""
from __future__ import annotations

from datetime import date, datetime, timedelta

import polars as pl

DAY0 = date(2026, 11, 1)


def day(n: int) -> date:
    return DAY0 + timedelta(days=n)


def rows_for(d: date) -> int:
    """Each day has its own row count, so a lost or duplicated write shows in the counts."""
    return 20 + d.day


def day_frame(d: date, writer: str = "test", seq: int = 0, rows: int | None = None) -> pl.DataFrame:
    n = rows_for(d) if rows is None else rows
    start = datetime(d.year, d.month, d.day)
    return pl.DataFrame({
        "partition_date": pl.Series([d] * n, dtype=pl.Date),
        "ts": pl.Series([start + timedelta(minutes=i) for i in range(n)], dtype=pl.Datetime("us")),
        "gpu": pl.Series([f"gpu-{i % 4}" for i in range(n)], dtype=pl.Categorical),
        "writer": pl.Series([writer] * n, dtype=pl.String),
        "seq": pl.Series([seq] * n, dtype=pl.Int64),
        "value": pl.Series([float(i) for i in range(n)], dtype=pl.Float64),
    })
