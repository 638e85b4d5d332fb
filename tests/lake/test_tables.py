"""DeltaStore on real files: day replaces, round trips, the file-list guard, maintenance."""
from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.lake import tables
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


# -- the file swap (replace_partition without delta-rs' predicate overwrite) ------------------------
def commit_actions(store: DeltaStore, version: int, name: str = TABLE) -> list[dict]:
    log = store.path(name) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in log.read_text().splitlines()]


def by_writer(store: DeltaStore) -> dict:
    frame = store.read(TABLE).group_by("partition_date", "writer").agg(pl.len(), pl.col("seq").max())
    return {(d, w): (n, seq) for d, w, n, seq in frame.iter_rows()}


def test_a_replace_swaps_the_files_of_one_day_and_source_in_one_commit(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    for n in range(3):
        for w in ("a", "b"):
            store.replace_partition(TABLE, day(n), day_frame(day(n), writer=w), "partition_date", where={"writer": w})
    before = store.version(TABLE)
    kept = {str(f.path) for f in store.data_files(TABLE)
            if not (f.partition["partition_date"] == day(1) and "a" in pl.read_parquet(f.path)["writer"])}

    version = store.replace_partition(TABLE, day(1), day_frame(day(1), writer="a", seq=1, rows=4), "partition_date",
                                      where={"writer": "a"})
    assert version == before + 1 == store.version(TABLE)  # one commit
    actions = commit_actions(store, version)
    assert [a["commitInfo"]["operationParameters"]["mode"] for a in actions if "commitInfo" in a] == ["Append"]
    assert len([a for a in actions if "add" in a]) == len([a for a in actions if "remove" in a]) == 1
    assert kept <= {str(f.path) for f in store.data_files(TABLE)}  # every other file as it was, not rewritten
    expected = {(day(n), w): (rows_for(day(n)), 0) for n in range(3) for w in ("a", "b")}
    assert by_writer(store) == {**expected, (day(1), "a"): (4, 1)}
    # the new file's statistics, as delta-rs reads them to skip files and count rows
    added = pa.table(DeltaTable(store.location(TABLE)).get_add_actions(flatten=True)).to_pylist()
    new = next(a for a in added if a["path"] == next(a for a in actions if "add" in a)["add"]["path"])
    assert (new["num_records"], new["min.ts"], new["max.ts"], new["min.writer"], new["max.writer"],
            new["null_count.value"]) == (4, datetime(2026, 11, 2), datetime(2026, 11, 2, 0, 3), "a", "a", 0)
    assert DeltaTable(store.location(TABLE)).count() == store.read(TABLE).height
    assert store.scan(TABLE).filter(pl.col("ts") > datetime(2026, 11, 2, 0, 2)).filter(
        pl.col("partition_date") == day(1)).collect().group_by("writer").len().sort("writer").rows() \
        == [("a", 1), ("b", rows_for(day(1)) - 3)]
    # an empty frame empties the (day, source), one commit again
    assert store.replace_partition(TABLE, day(1), day_frame(day(1), writer="a", rows=0), "partition_date",
                                   where={"writer": "a"}) == version + 1
    assert (day(1), "a") not in by_writer(store)


def test_a_table_written_before_the_swap_is_replaced_in_place(tmp_path: Path) -> None:
    """A home's table from before (each (day, source) written by delta-rs' predicate overwrite) keeps
    its layout, partitioned by day only: the swap replaces its files, other sources' files stay."""
    store = DeltaStore(tmp_path / "lake")
    location = store.location(TABLE)
    for w in ("a", "b"):
        rows = day_frame(day(0), writer=w).with_columns(pl.col("gpu").cast(pl.String)).to_arrow()
        if w == "a":
            write_deltalake(location, rows.slice(0, 0), mode="ignore", partition_by=["partition_date"])
        write_deltalake(location, rows, mode="overwrite", partition_by=["partition_date"],
                        predicate=f"partition_date = '{day(0).isoformat()}' and writer = '{w}'")
    b_files = [f.path for f in store.data_files(TABLE) if set(pl.read_parquet(f.path)["writer"]) == {"b"}]
    version = store.replace_partition(TABLE, day(0), day_frame(day(0), writer="a", seq=2), "partition_date",
                                      where={"writer": "a"})
    assert version == 3 and store.partition_columns(TABLE) == ["partition_date"]
    assert [a["commitInfo"]["operationParameters"]["mode"] for a in commit_actions(store, version)
            if "commitInfo" in a] == ["Append"]  # the swap, not the predicate overwrite
    assert by_writer(store) == {(day(0), "a"): (rows_for(day(0)), 2), (day(0), "b"): (rows_for(day(0)), 0)}
    assert set(b_files) <= {f.path for f in store.data_files(TABLE)}


def test_a_file_holding_two_sources_is_rewritten_by_the_predicate_overwrite(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    for w in ("a", "b"):
        store.replace_partition(TABLE, day(0), day_frame(day(0), writer=w), "partition_date", where={"writer": w})
    store.compact(TABLE)  # one file with both sources' rows: no swap can replace only a's
    assert len(store.files(TABLE)) == 1
    version = store.replace_partition(TABLE, day(0), day_frame(day(0), writer="a", seq=3, rows=2), "partition_date",
                                      where={"writer": "a"})
    assert version == store.version(TABLE) and [a["commitInfo"]["operationParameters"]["mode"] for a in
                                                 commit_actions(store, version) if "commitInfo" in a] == ["Overwrite"]
    assert by_writer(store) == {(day(0), "a"): (2, 3), (day(0), "b"): (rows_for(day(0)), 0)}


@pytest.mark.parametrize("existing", [False, True], ids=["empty partition", "existing partition"])
def test_a_swap_that_loses_the_race_for_its_day_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture, existing: bool) -> None:
    """Another writer commits the same (day, source) between our table load and our commit. Without
    a file to remove (an empty partition) delta-rs sees no conflict by itself: the application
    transaction named after the partition makes it one, so the day is never both writes."""
    store = DeltaStore(tmp_path / "lake")
    store.replace_partition(TABLE, day(1), day_frame(day(1)), "partition_date")  # the table exists
    if existing:
        store.replace_partition(TABLE, day(0), day_frame(day(0), writer="first"), "partition_date")
    commit = tables.DeltaStore._commit_actions
    raced = []

    def other_writer_first(self, name, table, actions, partition_by, replaced):
        if not raced:  # our table is loaded, our file written: the other writer replaces the day now
            raced.append("other")
            raced.append(store.replace_partition(TABLE, day(0), day_frame(day(0), writer="other", rows=7),
                                                 "partition_date"))
        return commit(self, name, table, actions, partition_by, replaced)

    monkeypatch.setattr(tables.DeltaStore, "_commit_actions", other_writer_first)
    before = store.version(TABLE)
    caplog.set_level(logging.INFO, logger=tables.__name__)
    version = store.replace_partition(TABLE, day(0), day_frame(day(0), writer="mine", rows=3), "partition_date")
    assert raced == ["other", before + 1] and version == before + 2
    assert "commit conflict (attempt 1 of" in caplog.text
    assert store.read(TABLE).filter(pl.col("partition_date") == day(0))["writer"].to_list() == ["mine"] * 3
    assert store.read(TABLE, version=before + 1).filter(pl.col("partition_date") == day(0))["writer"].to_list() \
        == ["other"] * 7


def test_the_version_read_from_the_log_folder_is_delta_rs_version(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    assert store.version(TABLE) is None
    for n in range(12):  # past delta-rs' checkpoint interval of 10 commits
        store.replace_partition(TABLE, day(n % 3), day_frame(day(n % 3), rows=3 + n), "partition_date")
        assert store.version(TABLE) == DeltaTable(str(store.path(TABLE))).version()
    latest = store.version(TABLE)
    assert latest >= 11
    table = DeltaTable(str(store.path(TABLE)))
    table.create_checkpoint()
    table.cleanup_metadata()  # old commit files may go; the latest commit or checkpoint stays
    assert store.version(TABLE) == DeltaTable(str(store.path(TABLE))).version() == latest
    (store.path(TABLE) / "_delta_log" / f"{latest + 1:020d}.json.tmp").write_text("{}")  # a commit being written
    assert store.version(TABLE) == latest
