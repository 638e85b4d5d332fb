# Iceberg lakehouse spike (issue 14): pyiceberg SqlCatalog (SQLite) + DuckDB 2.0.1 without its iceberg extension.
# Measures ingest (per-day partition replace), the fct_gpu_activity build, a reader process during a build,
# two writer processes, kill -9 mid-commit and time travel, each against a plain DuckDB-file baseline.
# Setup: /root/.pyenv/versions/3.11.7/bin/python3.11 -m venv /tmp/spike/iceberg/venv
#        /tmp/spike/iceberg/venv/bin/pip install -r spikes/lakehouse/iceberg/requirements.txt
# Run from /work/main:  /tmp/spike/iceberg/venv/bin/python spikes/lakehouse/iceberg/spike.py <step> [args]
# steps: prep | ingest | build | reader | writers | kill | timetravel   (results appended to /tmp/spike/iceberg/results.jsonl)
import glob
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from datetime import date, datetime, timedelta, timezone

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import DayTransform

DEMO = "/tmp/dbtdemo/home"
ROOT = "/tmp/spike/iceberg"
# SPIKE_CATALOG=pg: the same tables in a PostgreSQL catalog (a local postgres on port 55432, see REPORT.md)
PG = os.environ.get("SPIKE_CATALOG") == "pg"
WH = f"{ROOT}/warehouse_pg" if PG else f"{ROOT}/warehouse"  # iceberg data + metadata
CAT = f"{ROOT}/catalog.db"  # SQLite catalog
PG_URI = "postgresql+psycopg2://postgres@localhost:55432/postgres"
BASE = f"{ROOT}/baseline.duckdb"  # plain DuckDB-file baseline
EXPORT = f"{ROOT}/export"  # raw tables exported from the demo warehouse
DAYS = [date(2026, 11, 1) + timedelta(days=i) for i in range(30)]
RAW_TABLES = ["job_events", "job_gpus", "gpu_inventory", "queue_quotas", "audit_events", "governance_actions"]
STOP = False
HERE = os.path.dirname(os.path.abspath(__file__))


def log(step, **kw):
    kw = {"step": step, "at": datetime.now().isoformat(timespec="seconds"), **kw}
    print(json.dumps(kw, default=str), flush=True)
    with open(f"{ROOT}/results.jsonl", "a") as f:
        f.write(json.dumps(kw, default=str) + "\n")


def catalog():
    return SqlCatalog("spike", uri=PG_URI if PG else f"sqlite:///{CAT}", warehouse=f"file://{WH}")


def day_filter(col, d):
    lo = datetime(d.year, d.month, d.day).isoformat()
    hi = (datetime(d.year, d.month, d.day) + timedelta(days=1)).isoformat()
    return And(GreaterThanOrEqual(col, lo), LessThan(col, hi))


def plain(t: pa.Table) -> pa.Table:
    """Dictionary-encoded strings (Polars categoricals) -> plain strings: Iceberg has no dictionary type."""
    cols = []
    for f in t.schema:
        c = t[f.name]
        if pa.types.is_dictionary(f.type):
            c = c.cast(pa.string())
        cols.append(c)
    return pa.table(cols, names=t.schema.names)


def lake_day(d):
    files = sorted(glob.glob(f"{DEMO}/lake/dcgm_samples/date={d}/*/*.parquet"))
    return plain(pa.concat_tables([pq.read_table(f) for f in files]))


def files_of(tbl, row_filter=None):
    scan = tbl.scan(row_filter=row_filter) if row_filter is not None else tbl.scan()
    out = []
    for task in scan.plan_files():
        assert not task.delete_files, "merge-on-read deletes present: read_parquet over files would be wrong"
        out.append(task.file.file_path.removeprefix("file://"))
    return out


def iceberg_view(con, name, tbl, row_filter=None):
    """Register the table's CURRENT snapshot in DuckDB as read_parquet over its data files (no extension)."""
    fs = files_of(tbl, row_filter)
    lst = ", ".join("'" + f + "'" for f in fs)
    con.execute(f"create or replace temp view {name} as select * from read_parquet([{lst}])")
    return len(fs)


def du(path):
    return int(subprocess.check_output(["du", "-sb", path]).split()[0])


# ---------------------------------------------------------------- prep
def prep():
    os.makedirs(EXPORT, exist_ok=True)
    con = duckdb.connect(f"{DEMO}/warehouse.duckdb", read_only=True)
    for t in RAW_TABLES:
        con.execute(f"copy raw.{t} to '{EXPORT}/{t}.parquet' (format parquet)")
    # expected per-day answers for fct_gpu_activity (the consistency oracle of the reader)
    con.execute(f"copy (select cast(minute_at as date) d, count(*) n, sum(samples) s from marts.fct_gpu_activity "
                f"group by all order by 1) to '{EXPORT}/fct_expected.parquet'")
    log("prep", rows=con.sql(f"select * from read_parquet('{EXPORT}/fct_expected.parquet')").fetchall()[:2])


# ---------------------------------------------------------------- ingest
def ingest(ndays=30):
    days = DAYS[:ndays]
    cat = catalog()
    cat.create_namespace_if_not_exists("raw")
    cat.create_namespace_if_not_exists("marts")
    first = lake_day(days[0])
    if not cat.table_exists("raw.dcgm_samples"):
        t = cat.create_table("raw.dcgm_samples", schema=first.schema)
        with t.update_spec() as u:
            u.add_field("sampled_at", DayTransform(), "sampled_day")
    tbl = cat.load_table("raw.dcgm_samples")
    bcon = duckdb.connect(BASE)
    bcon.execute("create schema if not exists raw")
    bcon.execute("create table if not exists raw.dcgm_samples as select * from first limit 0")
    t_read = t_ice = t_base = 0.0
    for d in days:
        t0 = time.perf_counter()
        df = lake_day(d)
        t1 = time.perf_counter()
        tbl.overwrite(df, overwrite_filter=day_filter("sampled_at", d))  # replace the day (dynamic_partition_overwrite refuses day())
        t2 = time.perf_counter()
        if PG:
            t_read, t_ice = t_read + t1 - t0, t_ice + t2 - t1
            continue
        bcon.execute("begin")
        bcon.execute(f"delete from raw.dcgm_samples where sampled_at >= '{d}' and sampled_at < '{d + timedelta(days=1)}'")
        bcon.execute("insert into raw.dcgm_samples select * from df")
        bcon.execute("commit")
        t3 = time.perf_counter()
        t_read += t1 - t0
        t_ice += t2 - t1
        t_base += t3 - t2
    bcon.execute("checkpoint")
    # the small raw tables: whole-table overwrite (they are not day-partitioned in the project either)
    t4 = time.perf_counter()
    for name in RAW_TABLES:
        at = plain(pq.read_table(f"{EXPORT}/{name}.parquet"))
        ident = f"raw.{name}"
        if not cat.table_exists(ident):
            cat.create_table(ident, schema=at.schema)
        cat.load_table(ident).overwrite(at)
    t5 = time.perf_counter()
    for name in RAW_TABLES:
        bcon.execute(f"create or replace table raw.{name} as select * from read_parquet('{EXPORT}/{name}.parquet')")
    t6 = time.perf_counter()
    bcon.close()
    tbl = cat.load_table("raw.dcgm_samples")
    con = duckdb.connect()
    nfiles = iceberg_view(con, "s", tbl)
    log("ingest", days=len(days), rows=con.execute("select count(*) from s").fetchall()[0][0], data_files=nfiles,
        read_lake_s=round(t_read, 1), iceberg_samples_s=round(t_ice, 1), duckdb_samples_s=round(t_base, 1),
        iceberg_small_tables_s=round(t5 - t4, 1), duckdb_small_tables_s=round(t6 - t5, 1),
        iceberg_bytes=du(WH), iceberg_samples_bytes=du(f"{WH}/raw/dcgm_samples"),
        duckdb_bytes=os.path.getsize(BASE), snapshots=len(tbl.snapshots()))


# ---------------------------------------------------------------- build (fct_gpu_activity)
def model_sql(src, d):
    """The model's SQL as dbt's microbatch runs it for one day: stg_dcgm__samples over `src`, filtered to the day."""
    stg = open(f"{DEMO}/dbt/target/compiled/gpupool/staging/stg_dcgm__samples.sql").read()
    stg = stg.replace('"warehouse"."raw"."dcgm_samples"', src)
    fct = open("/work/main/models/marts/fct_gpu_activity.sql").read()
    fct = fct[fct.index("with samples as"):]
    hi = d + timedelta(days=1)
    ref = f"(select * from ({stg}) where sampled_at >= '{d}' and sampled_at < '{hi}')"
    return fct.replace("{{ ref('stg_dcgm__samples') }}", ref)


def build_iceberg(days, mode="files"):
    cat = catalog()
    src = cat.load_table("raw.dcgm_samples")
    con = duckdb.connect()
    per = []
    for d in days:
        t0 = time.perf_counter()
        if mode == "files":  # DuckDB reads the snapshot's Parquet files itself
            iceberg_view(con, "src", src, day_filter("sampled_at", d))
        else:  # pyiceberg reads to Arrow, DuckDB scans the Arrow table
            arrow_src = src.scan(row_filter=day_filter("sampled_at", d)).to_arrow()
            con.register("src", arrow_src)
        out = con.sql(model_sql("src", d)).to_arrow_table()
        t1 = time.perf_counter()
        ident = "marts.fct_gpu_activity"
        if not cat.table_exists(ident):
            t = cat.create_table(ident, schema=out.schema)
            with t.update_spec() as u:
                u.add_field("minute_at", DayTransform(), "minute_day")
        fct = cat.load_table(ident)
        fct.overwrite(out, overwrite_filter=day_filter("minute_at", d))
        t2 = time.perf_counter()
        per.append((t1 - t0, t2 - t1, out.num_rows))
    return per


LOCK_FAILS = []


def connect_rw():
    # a reader PROCESS holding the file (even read-only) locks the writer out: retry, counting the refusals
    while True:
        try:
            return duckdb.connect(BASE)
        except duckdb.IOException as e:
            LOCK_FAILS.append(str(e)[:100])
            time.sleep(0.05)


def build_baseline(days):
    lake = f"read_parquet('{DEMO}/lake/dcgm_samples/*/*/*.parquet', hive_partitioning=true)"
    per = []
    for d in days:
        t0 = time.perf_counter()
        con = connect_rw()  # one connection per day, as separate dbt batches/processes would
        con.execute("create schema if not exists marts")
        sql = model_sql(lake, d)
        con.execute("begin")
        con.execute(f"create table if not exists marts.fct_gpu_activity as {sql} limit 0")
        con.execute(f"delete from marts.fct_gpu_activity where minute_at >= '{d}' and minute_at < '{d + timedelta(days=1)}'")
        con.execute(f"insert into marts.fct_gpu_activity {sql}")
        con.execute("commit")
        con.close()
        per.append(time.perf_counter() - t0)
    return per


def build(ndays=30, mode="files", which="both"):
    days = DAYS[:ndays]
    if which in ("both", "baseline"):
        t0 = time.perf_counter()
        b = build_baseline(days)
        log("build_baseline", days=len(days), total_s=round(time.perf_counter() - t0, 1),
            per_day_median_s=round(statistics.median(b), 2))
    if which in ("both", "iceberg"):
        t0 = time.perf_counter()
        p = build_iceberg(days, mode)
        cat = catalog()
        fct = cat.load_table("marts.fct_gpu_activity")
        con = duckdb.connect()
        iceberg_view(con, "f", fct)
        log("build_iceberg", mode=mode, days=len(days), total_s=round(time.perf_counter() - t0, 1),
            compute_s=round(sum(x[0] for x in p), 1), write_s=round(sum(x[1] for x in p), 1),
            per_day_median_s=round(statistics.median(x[0] + x[1] for x in p), 2),
            rows=con.execute("select count(*) from f").fetchall()[0][0], fct_bytes=du(f"{WH}/marts/fct_gpu_activity"))


# ---------------------------------------------------------------- reader (second process)
def reader(seconds, target="iceberg", out=None):
    exp = {r[0]: (r[1], r[2]) for r in duckdb.sql(f"select * from read_parquet('{EXPORT}/fct_expected.parquet')").fetchall()}
    lat, errors, bad, answers = [], [], 0, 0
    end = time.time() + seconds
    while time.time() < end and not STOP:
        t0 = time.perf_counter()
        try:
            if target == "iceberg":
                cat = catalog()
                con = duckdb.connect()
                iceberg_view(con, "f", cat.load_table("marts.fct_gpu_activity"))
                iceberg_view(con, "s", cat.load_table("raw.job_events"))
                f, s = "f", "s"
            else:
                con = duckdb.connect(BASE, read_only=True)
                f, s = "marts.fct_gpu_activity", "raw.job_events"
            rows = con.sql(f"select cast(minute_at as date), count(*), sum(samples) from {f} group by 1").fetchall()
            con.execute(f"select count(*) from {s}").fetchall()[0]
            con.close()
            lat.append(time.perf_counter() - t0)
            answers += 1
            # committed state: every day present is exactly the expected day (never half a day, never twice)
            if any(exp.get(d) != (n, sm) for d, n, sm in rows):
                bad += 1
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {str(e)[:160]}")
            time.sleep(0.05)
    lat.sort()
    res = dict(target=target, answers=answers, inconsistent=bad, errors=len(errors),
               error_kinds=sorted(set(e[:120] for e in errors))[:3],
               p50_ms=round(1000 * lat[len(lat) // 2]) if lat else None,
               p99_ms=round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]) if lat else None)
    if out:
        json.dump(res, open(out, "w"))
    return res


def reader_during_build(ndays=5):
    for target in ("baseline", "iceberg"):
        out = f"{ROOT}/reader_{target}.json"
        p = subprocess.Popen([sys.executable, __file__, "_reader", target, "240", out])
        time.sleep(2)
        t0 = time.perf_counter()
        if target == "baseline":
            build_baseline(DAYS[:ndays])
        else:
            build_iceberg(DAYS[:ndays])
        dt = time.perf_counter() - t0
        p.send_signal(signal.SIGTERM)
        p.wait()
        log("reader_during_build", build_days=ndays, build_s=round(dt, 1), writer_lock_refusals=len(LOCK_FAILS),
            **json.load(open(out)))
        LOCK_FAILS.clear()


# ---------------------------------------------------------------- two writers
def write_days(days_csv, tag):
    cat = catalog()
    tbl = cat.load_table("raw.dcgm_samples")
    for ds in days_csv.split(","):
        d = date.fromisoformat(ds)
        df = lake_day(d)
        print("writing", flush=True)
        t0 = time.perf_counter()
        try:
            tbl.overwrite(df, overwrite_filter=day_filter("sampled_at", d))
            print(json.dumps({"tag": tag, "day": ds, "ok": True, "s": round(time.perf_counter() - t0, 2)}), flush=True)
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"tag": tag, "day": ds, "ok": False, "err": f"{type(e).__name__}: {str(e)[:200]}"}), flush=True)
        tbl = cat.load_table("raw.dcgm_samples")


def samples_state():
    cat = catalog()
    tbl = cat.load_table("raw.dcgm_samples")
    con = duckdb.connect()
    iceberg_view(con, "s", tbl)
    n = con.execute("select count(*) from s").fetchall()[0][0]
    per = dict(con.sql("select cast(sampled_at as date)::varchar, count(*) from s group by 1").fetchall())
    return n, per, len(tbl.snapshots())


def run_writers(a, b):
    t0 = time.perf_counter()
    ps = [subprocess.Popen([sys.executable, __file__, "_write", x, t], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for x, t in ((a, "A"), (b, "B"))]
    outs = [p.communicate() for p in ps]
    return time.perf_counter() - t0, outs


def writers():
    n0, per0, s0 = samples_state()
    # one writer doing both days (the baseline for the timing)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "_write", "2026-11-03,2026-11-04", "solo"], check=True, capture_output=True)
    solo = time.perf_counter() - t0
    for label, a, b in (("different_days", "2026-11-05", "2026-11-06"), ("same_day", "2026-11-07", "2026-11-07")):
        dt, outs = run_writers(a, b)
        n, per, s = samples_state()
        retries = sum(o[1].count("retrying") for o in outs)
        log("writers", case=label, two_procs_s=round(dt, 1), one_proc_both_days_s=round(solo, 1),
            results=[o[0].strip() for o in outs], retry_warnings=retries,
            stderr_tail=[o[1].strip()[-300:] for o in outs if "Error" in o[1] or "Exception" in o[1]],
            rows_before=n0, rows_after=n, per_day_unchanged=(per == per0), snapshots=s)
    # the DuckDB baseline: a second writer process while the first holds the file
    code = ("import duckdb,time,sys; c=duckdb.connect(sys.argv[1]); c.execute('begin'); "
            "c.execute('delete from raw.dcgm_samples where sampled_at < \\'2026-11-01 00:01\\''); time.sleep(3); c.execute('rollback')")
    p = subprocess.Popen([sys.executable, "-c", code, BASE])
    time.sleep(1.5)
    try:
        duckdb.connect(BASE).execute("select 1")
        err = None
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {str(e)[:160]}"
    p.wait()
    log("writers_baseline", second_writer_error=err)


# ---------------------------------------------------------------- kill -9
def kill_test(rounds=8):
    n0, per0, s0 = samples_state()
    results = []
    for i in range(rounds):
        files_before = len(glob.glob(f"{WH}/raw/dcgm_samples/**/*", recursive=True))
        p = subprocess.Popen([sys.executable, __file__, "_write", "2026-11-08", "K"], stdout=subprocess.PIPE, text=True)
        p.stdout.readline()  # "writing": the data is in memory, the overwrite (files + commit) starts now
        delay = random.uniform(0.5, 7.0)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        out = p.communicate()[0]
        try:
            n, per, s = samples_state()
            ok = (n == n0 and per == per0)
            err = None
        except Exception as e:  # noqa: BLE001
            ok, err = False, f"{type(e).__name__}: {str(e)[:160]}"
        leftovers = len(glob.glob(f"{WH}/raw/dcgm_samples/**/*", recursive=True)) - files_before
        results.append(dict(delay_s=round(delay, 2), committed_before_kill='"ok": true' in out, readable_and_complete=ok,
                            err=err, new_files_left=leftovers))
    rerun = subprocess.run([sys.executable, __file__, "_write", "2026-11-08", "rerun"], capture_output=True, text=True)
    n, per, s = samples_state()
    log("kill9", rounds=results, rerun=rerun.stdout.strip(), rows_after_rerun=n, complete_after_rerun=(per == per0 and n == n0))


# ---------------------------------------------------------------- time travel / maintenance
def timetravel():
    cat = catalog()
    tbl = cat.load_table("raw.dcgm_samples")
    snaps = tbl.snapshots()
    con = duckdb.connect()
    first = snaps[0]
    t0 = time.perf_counter()
    files = [t.file.file_path.removeprefix("file://") for t in tbl.scan(snapshot_id=first.snapshot_id).plan_files()]
    con.execute("create view s0 as select * from read_parquet([" + ",".join(f"'{f}'" for f in files) + "])")
    n_first = con.execute("select count(*) from s0").fetchall()[0][0]
    tt_s = time.perf_counter() - t0
    n_arrow = tbl.scan(snapshot_id=snaps[len(snaps) // 2].snapshot_id, selected_fields=("gpu",)).to_arrow().num_rows
    bytes_before = du(WH)
    data_files_on_disk = len(glob.glob(f"{WH}/raw/dcgm_samples/data/**/*.parquet", recursive=True))
    live = len(files_of(tbl))
    t1 = time.perf_counter()
    tbl.maintenance.expire_snapshots().older_than(datetime.now(timezone.utc)).commit()
    exp_s = time.perf_counter() - t1
    tbl = cat.load_table("raw.dcgm_samples")
    log("timetravel", snapshots=len(snaps), first_snapshot_rows=n_first, asof_query_s=round(tt_s, 2),
        mid_snapshot_rows_arrow=n_arrow, live_data_files=live, data_files_on_disk=data_files_on_disk,
        expire_s=round(exp_s, 2), snapshots_after_expire=len(tbl.snapshots()), bytes_before_expire=bytes_before,
        bytes_after_expire=du(WH),
        data_files_on_disk_after=len(glob.glob(f"{WH}/raw/dcgm_samples/data/**/*.parquet", recursive=True)))


if __name__ == "__main__":
    step, args = sys.argv[1], sys.argv[2:]
    if step == "prep":
        prep()
    elif step == "ingest":
        ingest(int(args[0]) if args else 30)
    elif step == "build":
        build(int(args[0]) if args else 30, *(args[1:]))
    elif step == "reader":
        reader_during_build(int(args[0]) if args else 5)
    elif step == "_reader":
        signal.signal(signal.SIGTERM, lambda *a: globals().__setitem__("STOP", True))
        reader(float(args[1]), args[0], args[2])
    elif step == "_write":
        write_days(args[0], args[1])
    elif step == "writers":
        writers()
    elif step == "kill":
        kill_test()
    elif step == "timetravel":
        timetravel()
