"""Processes for the warehouse concurrency tests: `python -m tests.lake.workers COMMAND ARGS...`.

- reader HOME OUT STOP: until the file STOP exists, open the published warehouse (a fresh connection
  per answer, alternately a plain read-only `duckdb.connect` searching the home, as a data-team client would, and
  `Warehouse.analyst_connect`) and append one JSON line per answer to OUT: the release it read, the
  rows each invariant returned, its lake versions and telemetry counts, or the error.
- write HOME BARRIER NAME WRITE...: each WRITE is DAY:ROWS:TAG (DAY an ISO date). Before each, wait
  for the other writer at BARRIER (a folder), then `Warehouse.replace_partition` of raw.dcgm_samples
  and ops.quarantine; prints "wrote DAY TAG" after each. With HOLD_AFTER_LAKE=1 in the environment,
  it touches BARRIER/NAME.lake after each Delta commit and waits for BARRIER/NAME.go before the
  warehouse transaction (a test forces an interleaving with it).
- big HOME DAY ROWS: one large partition write; prints "ready" just before it starts, "done" after.
- publish-loop HOME: writes one row (ops.kill_test) and publishes, forever; prints "committed N"
  after each publish returned.
- publish-hold HOME: writes one row and publishes, but holds forever once the publish wrote the
  release's file and its chunks (prints "written"): a test kills it mid-publish.
- builds HOME: for each line read on stdin, a full refresh of the models (`build_models`), published,
  in a child forked from this process, which imported the runner and dbt once (a fresh interpreter
  spends about 5 CPU-seconds on that before its first model): prints "child PID" before the child's
  lines, "ended PID" once it exited (a test kills the child with -9; this process lives on).

The frames are synthetic and deterministic (`samples`, `quarantine`): the tests compute what must
be in the warehouse from the same functions.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

import duckdb
import polars as pl

from pipelines.lake.reader import search_config
from pipelines.paths import MODELS_DIR
from pipelines.warehouse import Warehouse

SOURCE = "dcgm_parquet"
METRICS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE")
GPUS_PER_HOST = 8
NATURAL_KEY = ("sampled_at", "host", "gpu", "metric", "ingest_source")  # unique in `samples`
BARRIER_TIMEOUT_S = 120


# -- frames ------------------------------------------------------------------------------------
def samples(day: dt.date, rows: int, tag: str) -> pl.DataFrame:
    """`rows` DCGM samples of `day`, unique on NATURAL_KEY, each marked by `tag` in source_file:
    every minute of the day for 8 GPUs x METRICS of host-0, then of host-1, and so on."""
    per_minute = GPUS_PER_HOST * len(METRICS)
    minute = pl.col("i") // per_minute
    start = dt.datetime(day.year, day.month, day.day)
    return pl.DataFrame({"i": pl.int_range(0, rows, eager=True)}).select(
        sampled_at=pl.lit(start, dtype=pl.Datetime("us")) + pl.duration(minutes=minute % 1440),
        host=pl.format("host-{}", minute // 1440),
        gpu=((pl.col("i") % per_minute) // len(METRICS)).cast(pl.Int32),
        metric=pl.lit(pl.Series(METRICS)).gather(pl.col("i") % len(METRICS)),
        value=(pl.col("i") % 100).cast(pl.Float64),
        source=pl.lit(SOURCE),
        source_file=pl.lit(f"synthetic/{tag}"),
    )


def quarantine(tag: str, rows: int = 3) -> pl.DataFrame:
    """A write's quarantined records, marked by `tag` (so a test sees whose they are)."""
    return pl.DataFrame({
        "source": [SOURCE] * rows,
        "source_file": [f"synthetic/{tag}"] * rows,
        "line_number": pl.Series(range(1, rows + 1), dtype=pl.Int32),
        "reason": ["value is NaN"] * rows,
        "stage": ["validate"] * rows,
        "raw": [None] * rows,
    }, schema_overrides={"raw": pl.String})


def write_partition(wh: Warehouse, day: dt.date, rows: int, tag: str) -> None:
    """One ingest-like write of (day, SOURCE): the samples in Delta, the quarantine and the log row in
    the warehouse, published."""
    q = quarantine(tag)
    wh.replace_partition(SOURCE, day, {"dcgm_samples": samples(day, rows, tag)}, q,
                         files_read=1, records_read=rows + q.height, records_loaded=rows)


# -- readers -----------------------------------------------------------------------------------
def invariants() -> dict[str, str]:
    """The singular tests of models/tests/ (invariants every release must keep), as SQL templates."""
    found = {}
    for path in sorted((MODELS_DIR / "tests").glob("*.sql")):
        sql = re.sub(r"\{\{\s*config\(.*?\)\s*\}\}", "", path.read_text(), flags=re.DOTALL)
        found[path.stem] = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return found


def render(template: str, relations: dict[str, str]) -> str:
    """dbt's ref()/source() as the release's own relations (`relations`: name -> schema.name)."""
    sql = re.sub(r"\{\{\s*ref\('(\w+)'\)\s*\}\}", lambda m: relations[m.group(1)], template)
    return re.sub(r"\{\{\s*source\('(\w+)',\s*'(\w+)'\)\s*\}\}", r"\1.\2", sql)


TELEMETRY = """
with logged as (
  select partition_date, ingest_source, arg_max(rows_by_table, finished_at) as rows_by_table
  from ops.ingest_log group by all
)
select l.partition_date::varchar as day, l.ingest_source,
  json_extract(l.rows_by_table, '$.dcgm_samples')::bigint as logged,
  (select count(*) from raw.dcgm_samples r
   where r.partition_date = l.partition_date and r.ingest_source = l.ingest_source) as lake
from logged l
where json_extract(l.rows_by_table, '$.dcgm_samples') is not null
order by all
"""


def answer(con: duckdb.DuckDBPyConnection, templates: dict[str, str]) -> dict:
    """Everything one answer reads, from one connection (so from one release)."""
    relations = {name: f"{schema}.{name}" for schema, name in con.execute(
        "select table_schema, table_name from information_schema.tables "
        "where table_schema in ('staging', 'marts', 'metrics')").fetchall()}
    (release,) = con.execute("select release_id from lake.release").fetchone()
    return {
        "release": release,
        "violations": {name: len(con.execute(render(sql, relations)).fetchall()) for name, sql in templates.items()},
        "lake_versions": dict(con.execute("select table_name, version from ops.lake_versions").fetchall()),
        "telemetry": [list(r) for r in con.execute(TELEMETRY).fetchall()],
        "pool_cost_usd": con.execute("select sum(total_cost_usd) from metrics.cost_attribution").fetchone()[0],
    }


def reader(home: str, out: str, stop: str) -> None:
    wh = Warehouse(home)
    templates = invariants()
    with open(out, "a") as log:
        n = 0
        while not Path(stop).exists():
            via = "plain" if n % 2 == 0 else "analyst"
            started = time.monotonic()
            try:
                con = duckdb.connect(str(wh.db_path), read_only=True, config=search_config(wh.home)) if via == "plain" else wh.analyst_connect()
                try:
                    record = {"via": via, **answer(con, templates)}
                finally:
                    con.close()
            except Exception:  # noqa: BLE001 - every failure is an answer the test must see
                record = {"via": via, "error": traceback.format_exc()}
            record["seconds"] = round(time.monotonic() - started, 3)
            log.write(json.dumps(record, default=str) + "\n")
            log.flush()
            n += 1
            # then as long again idle: readers that query in a tight loop held both cores of a 2-core
            # machine, and the writer they watch (and the suite's other tests) waited on them
            time.sleep(record["seconds"])


# -- writers -----------------------------------------------------------------------------------
def wait_for_peers(barrier: Path, step: int, name: str, peers: int) -> None:
    """A barrier across processes: each touches BARRIER/<step>.<name> and waits for `peers` such files."""
    (barrier / f"{step}.{name}").touch()
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while len(list(barrier.glob(f"{step}.*"))) < peers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {barrier} step {step}: the other writer never came")
        time.sleep(0.001)


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


def write(home: str, barrier: str, name: str, *writes: str) -> None:
    wh = Warehouse(home)
    if os.environ.get("HOLD_AFTER_LAKE"):  # hold between this write's Delta commit and its warehouse transaction
        commit = wh._write_lake_partition

        def commit_then_hold(*args, **kwargs):
            commit(*args, **kwargs)
            (Path(barrier) / f"{name}.lake").touch()
            wait_for(Path(barrier) / f"{name}.go")

        wh._write_lake_partition = commit_then_hold
    for step, spec in enumerate(writes):
        day, rows, tag = spec.split(":")
        wait_for_peers(Path(barrier), step, name, 2)
        write_partition(wh, dt.date.fromisoformat(day), int(rows), tag)
        print(f"wrote {day} {tag}", flush=True)


def big(home: str, day: str, rows: str) -> None:
    wh = Warehouse(home)
    d = dt.date.fromisoformat(day)
    frame, q = samples(d, int(rows), f"big-{rows}"), quarantine(f"big-{rows}")
    print("ready", flush=True)
    wh.replace_partition(SOURCE, d, {"dcgm_samples": frame}, q, files_read=1,
                         records_read=frame.height + q.height, records_loaded=frame.height)
    print("done", flush=True)


def publish_loop(home: str) -> None:
    wh = Warehouse(home)
    n = 0
    while True:
        n += 1
        with wh.writer() as con:
            con.execute("create table if not exists ops.kill_test (n bigint)")
            con.execute("insert into ops.kill_test values (?)", [n])
        print(f"committed {n}", flush=True)


def publish_hold(home: str) -> None:
    import pipelines.warehouse

    write = pipelines.warehouse.write_release

    def write_then_hold(*args, **kwargs):
        write(*args, **kwargs)
        print("written", flush=True)
        time.sleep(BARRIER_TIMEOUT_S)

    pipelines.warehouse.write_release = write_then_hold  # the publish's new release file, not yet renamed
    with Warehouse(home).writer() as con:
        con.execute("create table if not exists ops.kill_test (n bigint)")
        con.execute("insert into ops.kill_test values (0)")


def build(home: str) -> None:
    """A full rebuild that prints "ready" before it starts, "step <n>/<of>" as each model is built (the
    test kills it at a chosen point of the dbt run), and "done"."""
    from pipelines.runner import build_models

    print("ready", flush=True)
    build_models(Warehouse(home), full_refresh=True,
                 on_step=lambda line: line.startswith("[") and print(f"step {line[1:line.index(']')]}", flush=True))
    print("done", flush=True)


def builds(home: str) -> None:
    import dbt.cli.main  # noqa: F401 - imported here once, not in every child

    import pipelines.runner  # noqa: F401

    for _request in sys.stdin:
        child = os.fork()
        if child == 0:
            try:
                print(f"child {os.getpid()}", flush=True)
                build(home)
            finally:
                os._exit(0)  # never back into this loop, nor through the parent's exit handlers
        os.waitpid(child, 0)
        print(f"ended {child}", flush=True)


COMMANDS = {"reader": reader, "write": write, "big": big, "publish-loop": publish_loop,
            "publish-hold": publish_hold, "builds": builds}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
