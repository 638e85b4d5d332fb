"""Reader files: views over one release; an open reader keeps its release across a publish."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb

from pipelines.lake.reader import publish_reader_file, release_of
from pipelines.lake.releases import ReleaseRegistry
from pipelines.lake.tables import DeltaStore
from tests.lake.frames import day, day_frame, rows_for

TABLE = "raw.samples"


def answer_elsewhere(path: Path, query: str) -> list:
    """The query's rows from a fresh reader process, as JSON."""
    code = ("import duckdb, json, sys; con = duckdb.connect(sys.argv[1], read_only=True); "
            "print(json.dumps(con.execute(sys.argv[2]).fetchall(), default=str))")
    out = subprocess.run([sys.executable, "-c", code, str(path), query], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def publish(store: DeltaStore, registry: ReleaseRegistry, path: Path) -> int:
    release_id = registry.record("ingest", None, {name: store.version(name) for name in store.tables()})
    publish_reader_file(store, registry.get(release_id), path)
    return release_id


def test_an_open_reader_keeps_its_release(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    registry = ReleaseRegistry.under(store.root)
    current = tmp_path / "current.duckdb"
    for n in range(2):
        store.replace_partition(TABLE, day(n), day_frame(day(n)), "partition_date")
    first = publish(store, registry, current)

    old = duckdb.connect(str(current), read_only=True)
    query = "select partition_date, count(*), max(seq) from raw.samples group by 1 order by 1"
    first_answer = old.execute(query).fetchall()
    assert first_answer == [(day(0), rows_for(day(0)), 0), (day(1), rows_for(day(1)), 0)]
    assert old.sql("select * from raw.samples").types == ["DATE", "TIMESTAMP", "VARCHAR", "VARCHAR",
                                                            "BIGINT", "DOUBLE"]

    store.replace_partition(TABLE, day(1), day_frame(day(1), seq=1, rows=7), "partition_date")
    store.replace_partition(TABLE, day(2), day_frame(day(2), seq=1), "partition_date")
    second = publish(store, registry, current)

    assert old.execute(query).fetchall() == first_answer  # the old file, the old release
    assert old.execute("select release_id from lake.release").fetchone()[0] == first
    # A new open in another process gets the new file. (Within one process DuckDB hands a second
    # connect to a path that is still open the same database instance, i.e. the old release.)
    assert answer_elsewhere(current, query) == [[str(day(0)), rows_for(day(0)), 0], [str(day(1)), 7, 1],
                                                [str(day(2)), rows_for(day(2)), 1]]
    old.close()
    assert release_of(current) == second  # and in this process once the old connection is closed
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_an_empty_table_is_a_typed_empty_view(tmp_path: Path) -> None:
    store = DeltaStore(tmp_path / "lake")
    registry = ReleaseRegistry.under(store.root)
    store.replace_table("mart.empty", day_frame(day(0)).clear())
    store.replace_partition(TABLE, day(0), day_frame(day(0)), "partition_date")
    store.replace_partition(TABLE, day(0), day_frame(day(0)).clear(), "partition_date")  # a day emptied
    assert store.files("mart.empty") == [] and store.files(TABLE) == []
    current = tmp_path / "current.duckdb"
    publish(store, registry, current)
    con = duckdb.connect(str(current), read_only=True)
    for name in ("mart.empty", TABLE):
        relation = con.sql(f"select * from {name}")
        assert relation.columns == ["partition_date", "ts", "gpu", "writer", "seq", "value"]
        assert relation.types == ["DATE", "TIMESTAMP", "VARCHAR", "VARCHAR", "BIGINT", "DOUBLE"]
        assert relation.fetchall() == []
    con.close()
