"""Views of a Delta table version: exactly that version's rows, typed, partition values restored."""
from __future__ import annotations

from pathlib import Path

import duckdb

from pipelines.lake.reader import view_sql
from pipelines.lake.tables import DeltaStore
from tests.lake.frames import day, day_frame, rows_for

TABLE = "raw.samples"
COLUMNS = ["partition_date", "ts", "gpu", "writer", "seq", "value"]
TYPES = ["DATE", "TIMESTAMP", "VARCHAR", "VARCHAR", "BIGINT", "DOUBLE"]


def view(store: DeltaStore, name: str, version: int | None = None) -> duckdb.DuckDBPyRelation:
    """The version as view v of a fresh in-memory database."""
    con = duckdb.connect()
    con.execute("create view v as " + view_sql(store.schema(name, version), store.partition_columns(name, version),
                                                store.data_files(name, version)))
    return con.sql("select * from v")


def per_day(relation: duckdb.DuckDBPyRelation) -> list[tuple]:
    return relation.aggregate("partition_date, count(*), max(seq)").order("partition_date").fetchall()


def test_a_view_reads_exactly_its_version(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    for n in range(2):
        store.replace_partition(TABLE, day(n), day_frame(day(n)), "partition_date")
    first = store.version(TABLE)
    store.replace_partition(TABLE, day(1), day_frame(day(1), seq=1, rows=7), "partition_date")
    store.replace_partition(TABLE, day(2), day_frame(day(2), seq=1), "partition_date")

    old = view(store, TABLE, first)
    assert old.columns == COLUMNS and old.types == TYPES
    assert per_day(old) == [(day(0), rows_for(day(0)), 0), (day(1), rows_for(day(1)), 0)]
    assert per_day(view(store, TABLE)) == [(day(0), rows_for(day(0)), 0), (day(1), 7, 1),
                                           (day(2), rows_for(day(2)), 1)]


def test_an_empty_table_is_a_typed_empty_view(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    store.replace_table("mart.empty", day_frame(day(0)).clear())
    store.replace_partition(TABLE, day(0), day_frame(day(0)), "partition_date")
    store.replace_partition(TABLE, day(0), day_frame(day(0)).clear(), "partition_date")  # a day emptied
    assert store.files("mart.empty") == [] and store.files(TABLE) == []
    for name in ("mart.empty", TABLE):
        relation = view(store, name)
        assert relation.columns == COLUMNS and relation.types == TYPES
        assert relation.fetchall() == []
