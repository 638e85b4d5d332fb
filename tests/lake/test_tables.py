"""DeltaStore on real files: day replaces, round trips, the file-list guard, maintenance."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from pipelines.lake.tables import DeltaStore, LakeError, UnreadableByFileList
from tests.lake.frames import day, day_frame, rows_for

TABLE = "raw.samples"


def counts(store: DeltaStore, name: str = TABLE) -> dict:
    frame = store.read(name).group_by("partition_date").len()
    return dict(zip(frame["partition_date"], frame["len"], strict=True))


def test_replace_partition_replaces_one_day_and_is_idempotent(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    assert store.version(TABLE) is None
    for n in range(3):
        store.replace_partition(TABLE, day(n), day_frame(day(n)), "partition_date")
    assert counts(store) == {day(n): rows_for(day(n)) for n in range(3)}
    before = store.read(TABLE).filter(pl.col("partition_date") != day(1)).sort("ts")

    store.replace_partition(TABLE, day(1), day_frame(day(1), writer="second", rows=5), "partition_date")
    after = store.read(TABLE)
    assert counts(store) == {day(0): rows_for(day(0)), day(1): 5, day(2): rows_for(day(2))}
    assert after.filter(pl.col("partition_date") == day(1))["writer"].unique().to_list() == ["second"]
    assert after.filter(pl.col("partition_date") != day(1)).sort("ts").equals(before)  # others untouched

    version = store.version(TABLE)
    store.replace_partition(TABLE, day(1), day_frame(day(1), writer="second", rows=5), "partition_date")
    assert store.version(TABLE) == version + 1  # one commit per replace
    assert counts(store)[day(1)] == 5


def test_naive_datetimes_and_categoricals_round_trip(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    frame = day_frame(day(0)).with_columns(pl.col("ts").cast(pl.Datetime("ns")))
    store.replace_partition(TABLE, day(0), frame, "partition_date")
    back = store.read(TABLE)
    assert back.schema["ts"] == pl.Datetime("us", None)
    assert back.schema["gpu"] == pl.String
    assert back["ts"].min() == datetime(2026, 11, 1, 0, 0)
    assert store.schema(TABLE).field("ts").type == pa.timestamp("us")
    # DuckDB reads the files as naive TIMESTAMP, not TIMESTAMPTZ
    files = store.files(TABLE)
    assert files and all(Path(f).is_absolute() and Path(f).exists() for f in files)
    con = duckdb.connect()
    assert con.sql(f"select ts from read_parquet({files!r})").types == ["TIMESTAMP"]
    assert con.execute(f"select min(ts) from read_parquet({files!r})").fetchone()[0] == datetime(2026, 11, 1)


def test_rows_outside_the_day_are_refused(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    with pytest.raises(LakeError, match="rows outside 2026-11-02"):
        store.replace_partition(TABLE, day(1), day_frame(day(0)), "partition_date")
    with pytest.raises(LakeError, match="schema.table"):
        store.replace_partition("samples", day(0), day_frame(day(0)), "partition_date")


def test_files_of_an_old_version(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    v1 = store.replace_partition(TABLE, day(0), day_frame(day(0)), "partition_date")
    store.replace_partition(TABLE, day(0), day_frame(day(0), rows=3), "partition_date")
    old = store.files(TABLE, version=v1)
    assert duckdb.execute(f"select count(*) from read_parquet({old!r})").fetchone()[0] == rows_for(day(0))
    assert duckdb.execute(f"select count(*) from read_parquet({store.files(TABLE)!r})").fetchone()[0] == 3


@pytest.mark.parametrize("configuration, why", [
    ({"delta.enableDeletionVectors": "true"}, "deletionVectors"),
    ({"delta.columnMapping.mode": "name"}, "column mapping"),
])
def test_a_file_list_is_refused_when_it_is_not_the_table(tmp_path: Path, configuration: dict, why: str) -> None:
    store = DeltaStore(tmp_path / "lake")
    write_deltalake(str(store.path("raw.odd")), pa.table({"a": [1, 2]}), configuration=configuration)
    with pytest.raises(UnreadableByFileList, match=why):
        store.files("raw.odd")


def test_replace_table_append_compact_vacuum(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    store.replace_table("mart.daily", day_frame(day(0)))
    store.replace_table("mart.daily", day_frame(day(1)).drop("value"))  # a rebuild may change the schema
    assert store.read("mart.daily").columns == ["partition_date", "ts", "gpu", "writer", "seq"]
    for seq in range(4):
        store.append("raw.events", day_frame(day(0), seq=seq, rows=3))
    assert len(store.files("raw.events")) == 4
    metrics = store.compact("raw.events")
    assert metrics["numFilesRemoved"] == 4 and len(store.files("raw.events")) == 1
    assert store.read("raw.events").height == 12
    removed = store.vacuum(retention_hours=0)
    assert len(removed["raw.events"]) == 4 and len(removed["mart.daily"]) == 1
    assert store.read("raw.events").height == 12 and store.tables() == ["mart.daily", "raw.events"]


def test_vacuum_keeps_the_versions_a_release_still_serves(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    served = store.replace_partition(TABLE, day(0), day_frame(day(0)), "partition_date")
    store.replace_partition(TABLE, day(0), day_frame(day(0), rows=2), "partition_date")
    assert store.vacuum(retention_hours=0, keep_versions={TABLE: [served]})[TABLE] == []
    assert duckdb.execute(f"select count(*) from read_parquet({store.files(TABLE, served)!r})").fetchone()[0] \
        == rows_for(day(0))
    assert len(store.vacuum(retention_hours=0)[TABLE]) == 1
