"""The lake's Delta tables on S3-compatible object storage (docs/deploy.md, "Object storage").

The server is moto's S3 (`moto_server`, a dev dependency) on a free loopback port: the same delta-rs
code path as AWS S3 or MinIO (object_store's S3 client, commits by a put with `If-None-Match: *`).
The store is configured only through the environment (GPUPOOL_LAKE_URI and AWS_*), as in production.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import duckdb
import polars as pl
import pytest
import requests
from deltalake import write_deltalake

from pipelines.lake import tables
from pipelines.lake.tables import LAKE_URI_ENV, DeltaStore, LakeError
from pipelines.paths import REPO_ROOT
from tests.components import require_component
from tests.lake.frames import day, day_frame, rows_for

TABLE = "raw.samples"
BUCKET = "lake"
START_TIMEOUT_S = 30
WRITER_TIMEOUT_S = 120
# A fake server's fixed test credentials: moto accepts any; nothing here is a secret.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "moto-test", "AWS_SECRET_ACCESS_KEY": "moto-test", "AWS_REGION": "us-east-1"}

# A writer process: waits for GO, then replaces each day given as OFFSET:TAG, printing each version.
WRITER = """
import sys, time
from pathlib import Path
from pipelines.lake.tables import DeltaStore
from tests.lake.frames import day, day_frame
store = DeltaStore.from_environment(Path("unused-local-root"))
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
for spec in sys.argv[2:]:
    offset, tag = spec.split(":")
    d = day(int(offset))
    print(d, store.replace_partition("raw.samples", d, day_frame(d, writer=tag), "partition_date"), flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server on a free loopback port, stopped after the module. Its request log goes to a
    file: a pipe nobody reads fills up and stalls the server."""
    present = all(importlib.util.find_spec(m) for m in ("moto", "flask", "flask_cors"))
    require_component("moto S3 server", present, "pip install -e '.[dev]' brings moto[s3], flask, flask-cors")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                requests.get(endpoint, timeout=1)
                break
            except requests.ConnectionError:
                if server.poll() is not None or time.monotonic() > deadline:
                    server.kill()
                    server.wait()
                    pytest.fail(f"moto_server did not start on {endpoint}: {log.read_text()[-2000:]}")
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def lake_uri(s3_endpoint: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix of the bucket per test, configured the production way: by environment only."""
    requests.put(f"{s3_endpoint}/{BUCKET}", timeout=10).raise_for_status()  # idempotent in moto
    uri = f"s3://{BUCKET}/{request.node.name}"
    for key, value in {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint, "AWS_ALLOW_HTTP": "true",
                       LAKE_URI_ENV: uri}.items():
        monkeypatch.setenv(key, value)
    return uri


def _object_url(endpoint: str, uri: str) -> str:
    return f"{endpoint}/{uri.removeprefix('s3://')}"


def counts(store: DeltaStore, version: int | None = None) -> dict[date, int]:
    frame = store.read(TABLE, version=version).group_by("partition_date").len()
    return dict(frame.iter_rows())


def test_the_server_refuses_to_overwrite_on_if_none_match(s3_endpoint: str, lake_uri: str) -> None:
    """What delta-rs' commits rely on (no lock service): a put of an existing key with
    `If-None-Match: *` fails. A server that ignored it would let two writers both 'win' a version."""
    import boto3  # moto's own dependency; a signed request, as delta-rs sends
    from botocore.exceptions import ClientError

    s3 = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                      region_name=CREDENTIALS["AWS_REGION"])
    key = f"{lake_uri.removeprefix(f's3://{BUCKET}/')}/probe"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"second", IfNoneMatch="*")
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"first"


def test_partitions_time_travel_files_and_vacuum_on_s3(s3_endpoint: str, lake_uri: str, tmp_path: Path) -> None:
    store = DeltaStore.from_environment(tmp_path / "unused")
    assert store.remote and store.root == lake_uri and store.location(TABLE) == f"{lake_uri}/raw/samples"
    assert store.storage_options == {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_endpoint, "AWS_ALLOW_HTTP": "true"}
    assert store.tables() == [] and store.version(TABLE) is None
    for n in range(3):
        store.replace_partition(TABLE, day(n), day_frame(day(n)), "partition_date")
    assert store.tables() == [TABLE]
    assert counts(store) == {day(n): rows_for(day(n)) for n in range(3)}
    first = store.version(TABLE)

    second = store.replace_partition(TABLE, day(1), day_frame(day(1), writer="again", rows=5), "partition_date")
    assert second == first + 1
    assert counts(store) == {day(0): rows_for(day(0)), day(1): 5, day(2): rows_for(day(2))}
    assert counts(store, version=first) == {day(n): rows_for(day(n)) for n in range(3)}  # time travel
    assert store.scan(TABLE).filter(pl.col("partition_date") == day(1)).collect()["writer"].unique().to_list() \
        == ["again"]
    with pytest.raises(LakeError, match="use DeltaStore.location"):
        store.path(TABLE)

    # the file list is of object URIs, each an object the server has, with the rows Delta logged
    old_files = store.data_files(TABLE, version=first)
    current = store.data_files(TABLE)
    assert [f.partition["partition_date"] for f in current] == [day(0), day(1), day(2)]
    for f in current:
        assert isinstance(f.path, str) and f.path.startswith(f"{lake_uri}/raw/samples/partition_date=")
        assert pl.read_parquet(f.path, storage_options=store.storage_options).height == f.rows
    assert store.files(TABLE) == [f.path for f in current]

    # DuckDB without httpfs: through Arrow (Polars), not through the s3:// URIs
    con = duckdb.connect()
    con.register("samples", store.read(TABLE).to_arrow())
    assert con.execute("select count(*) from samples").fetchone()[0] == rows_for(day(0)) + 5 + rows_for(day(2))

    # vacuum removes the replaced day-1 file; the current version stays whole, the old one loses it
    replaced = sorted({f.path for f in old_files} - {f.path for f in current})
    assert len(replaced) == 1
    removed = store.vacuum(retention_hours=0)
    assert [f"{store.location(TABLE)}/{p}" for p in removed[TABLE]] == replaced
    assert requests.head(_object_url(s3_endpoint, replaced[0]), timeout=10).status_code == 404
    assert counts(store) == {day(0): rows_for(day(0)), day(1): 5, day(2): rows_for(day(2))}


def test_a_same_day_commit_that_loses_the_race_is_retried(lake_uri: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Another writer commits the same day between our table load and our commit (our file already
    written): S3 refuses our commit's log entry (its key exists), delta-rs reports the conflict, and
    the retry commits the same file cleanly."""
    store = DeltaStore.from_environment(tmp_path / "unused")
    store.replace_partition(TABLE, day(0), day_frame(day(0)), "partition_date")
    commit = tables.DeltaStore._commit_actions
    raced = []

    def other_writer_first(self, name, table, actions, partition_by, replaced):
        if not raced:  # first attempt: `table` is already loaded at the version before the race
            raced.append(write_deltalake(store.location(TABLE), day_frame(day(0), writer="other", rows=7).to_arrow(),
                                         mode="overwrite", predicate="partition_date = '2026-11-01'",
                                         storage_options=store.storage_options))
        return commit(self, name, table, actions, partition_by, replaced)

    monkeypatch.setattr(tables.DeltaStore, "_commit_actions", other_writer_first)
    before = store.version(TABLE)
    caplog.set_level(logging.INFO, logger=tables.__name__)
    version = store.replace_partition(TABLE, day(0), day_frame(day(0), writer="mine", rows=3), "partition_date")
    assert raced and version == before + 2  # the other writer's commit, then ours (after a retry)
    assert "commit conflict (attempt 1 of" in caplog.text
    assert store.read(TABLE)["writer"].to_list() == ["mine"] * 3
    assert store.read(TABLE, version=before + 1)["writer"].to_list() == ["other"] * 7


def test_two_writer_processes_on_s3(lake_uri: str, tmp_path: Path) -> None:
    """Two processes replace days at the same moment, different days and then one same day: every
    day whole, once; the shared day is one writer's write, not a mix; every commit its own version."""
    store = DeltaStore.from_environment(tmp_path / "unused")
    store.replace_partition(TABLE, day(0), day_frame(day(0), writer="seed"), "partition_date")
    go = tmp_path / "go"
    a, b = ["1:a", "3:a", "5:a", "6:a"], ["2:b", "4:b", "6:b", "6:b"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(go), *specs], cwd=REPO_ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for specs in (a, b)]
    time.sleep(1.0)  # both imported and waiting
    go.touch()
    commits = []  # (version, day, writer)
    for name, p in zip("ab", writers, strict=True):
        out, err = p.communicate(timeout=WRITER_TIMEOUT_S)
        assert p.returncode == 0, err
        commits += [(int(version), date.fromisoformat(d), name) for d, version in map(str.split, out.splitlines())]

    assert sorted(v for v, _, _ in commits) == list(range(2, 2 + len(a) + len(b)))  # each commit its own version
    got = store.read(TABLE)
    assert counts(store) == {day(n): rows_for(day(n)) for n in range(7)}  # none lost, none duplicated
    writers_by_day = dict(got.group_by("partition_date").agg(pl.col("writer").unique()).iter_rows())
    assert {d: sorted(w) for d, w in writers_by_day.items()} == {
        day(0): ["seed"], day(1): ["a"], day(2): ["b"], day(3): ["a"], day(4): ["b"], day(5): ["a"],
        day(6): [max(c for c in commits if c[1] == day(6))[2]]}  # the last commit of day 6 is what is there
