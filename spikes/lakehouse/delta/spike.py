# Delta Lake spike (delta-rs `deltalake` + DuckDB 2.0.1 WITHOUT the delta extension + Polars): measures per-day
# partition-replace ingest, the fct_gpu_activity build, a reader process during a rebuild, two concurrent writer
# processes, kill -9 mid-write, time travel / optimize / vacuum, each against a plain DuckDB-file baseline.
# Setup: python3.11 -m venv /tmp/spike/delta/venv && /tmp/spike/delta/venv/bin/pip install -r spikes/lakehouse/delta/requirements.txt
#        /work/main/.venv/bin/python spikes/lakehouse/delta/export_raw.py      (raw.* tables -> Parquet, read-only)
# Run:   /tmp/spike/delta/venv/bin/python spikes/lakehouse/delta/spike.py all   (from /work/main; results in /tmp/spike/delta/results.jsonl)
import json, os, shutil, signal, statistics, subprocess, sys, time, glob
import duckdb
from deltalake import DeltaTable, write_deltalake

HERE = os.path.dirname(os.path.abspath(__file__))
LAKE = "/tmp/dbtdemo/home/lake/dcgm_samples"          # read only
SRC = "/tmp/spike/delta/src"                           # raw.* tables exported by export_raw.py
W = "/tmp/spike/delta/work"
DL = f"{W}/delta"                                       # Delta tables: DL/raw/<t>, DL/marts/fct_gpu_activity
BASE = f"{W}/base.duckdb"                               # baseline: one DuckDB file
RES = "/tmp/spike/delta/results.jsonl"
DAYS = sorted(p.split("date=")[1] for p in glob.glob(f"{LAKE}/date=*"))
SMALL = ["audit_events", "governance_actions", "gpu_inventory", "job_events", "job_gpus", "queue_quotas"]
SAMPLES = f"{DL}/raw/dcgm_samples"
FCT = f"{DL}/marts/fct_gpu_activity"
STG_SQL = open(f"{HERE}/sql/stg_dcgm__samples.sql").read()
FCT_SQL = open(f"{HERE}/sql/fct_gpu_activity_day.sql").read()


def rec(**kw):
    kw["t"] = time.strftime("%H:%M:%S"); kw["run"] = os.environ.get("RUN", "")
    print(json.dumps(kw), flush=True)
    with open(RES, "a") as f:
        f.write(json.dumps(kw) + "\n")


def con():
    c = duckdb.connect()
    c.execute("set threads=2")
    return c


def samples_day_sql(d):
    return (f"select * exclude (date, ingest), cast(date as date) as partition_date, ingest as ingest_source "
            f"from read_parquet('{LAKE}/date={d}/*/*.parquet', hive_partitioning=true)")


WP = None
if os.environ.get("DELTA_ZSTD"):
    from deltalake import WriterProperties
    WP = WriterProperties(compression="ZSTD")


def replace_day(path, data, col, d):
    """Replace-partition: one Delta commit that removes the day's files and adds the new ones."""
    if DeltaTable.is_deltatable(path):
        write_deltalake(path, data, mode="overwrite", partition_by=[col], predicate=f"{col} = '{d}'", writer_properties=WP)
    else:
        write_deltalake(path, data, mode="append", partition_by=[col], writer_properties=WP)


def ingest_delta_day(c, d, small=True):
    replace_day(SAMPLES, c.sql(samples_day_sql(d)).arrow(), "partition_date", d)
    if small:
        for t in SMALL:
            replace_day(f"{DL}/raw/{t}", c.sql(f"select * from '{SRC}/{t}.parquet' where partition_date = '{d}'").arrow(),
                        "partition_date", d)


def du(path):
    return int(subprocess.run(["du", "-sb", path], capture_output=True, text=True).stdout.split()[0])


# ---------------------------------------------------------------- (2) ingest
def ingest():
    shutil.rmtree(W, ignore_errors=True); os.makedirs(W)
    c = con()
    t0 = time.perf_counter()
    for d in DAYS:
        ingest_delta_day(c, d)
    t_delta = time.perf_counter() - t0
    b = duckdb.connect(BASE); b.execute("set threads=2"); b.execute("create schema raw")
    b.execute(f"create table raw.dcgm_samples as {samples_day_sql(DAYS[0])} limit 0")
    for t in SMALL:
        b.execute(f"create table raw.{t} as select * from '{SRC}/{t}.parquet' limit 0")
    t0 = time.perf_counter()
    for d in DAYS:
        b.execute("begin")
        b.execute(f"delete from raw.dcgm_samples where partition_date = '{d}'")
        b.execute(f"insert into raw.dcgm_samples {samples_day_sql(d)}")
        for t in SMALL:
            b.execute(f"delete from raw.{t} where partition_date = '{d}'")
            b.execute(f"insert into raw.{t} select * from '{SRC}/{t}.parquet' where partition_date = '{d}'")
        b.execute("commit")
    b.execute("checkpoint")
    t_base = time.perf_counter() - t0
    b.close()
    # re-run one day (idempotence) and count
    t0 = time.perf_counter(); ingest_delta_day(c, DAYS[3]); t_rerun = time.perf_counter() - t0
    dt = DeltaTable(SAMPLES)
    rec(step="ingest", days=len(DAYS), delta_s=round(t_delta, 1), base_s=round(t_base, 1), ratio=round(t_delta / t_base, 2),
        rerun_one_day_s=round(t_rerun, 2), delta_bytes=du(DL), base_bytes=os.path.getsize(BASE),
        samples_rows=dt.count() if hasattr(dt, "count") else None, samples_version=dt.version(),
        samples_files=len(dt.file_uris()), lake_bytes=du(LAKE),
        protocol=[dt.protocol().min_reader_version, dt.protocol().min_writer_version, dt.protocol().reader_features, dt.protocol().writer_features])


# ---------------------------------------------------------------- (3) build
def fct_day_sql(d, src):
    import datetime as _dt
    e = (_dt.date.fromisoformat(d) + _dt.timedelta(days=1)).isoformat()
    return FCT_SQL.format(day_start=f"{d} 00:00:00+00:00", day_end=f"{e} 00:00:00+00:00").replace(
        '"warehouse"."staging"."stg_dcgm__samples"', src)


def delta_build_day(c, d, mode):
    dt = DeltaTable(SAMPLES)   # current version, pinned for this day's query
    if mode == "dataset":      # Arrow dataset of the snapshot, pruned to the day's partition, DuckDB replacement scan
        ds = dt.to_pyarrow_dataset(file_pruning_predicate=f"partition_date = '{d}'")
        c.execute("drop view if exists samples_src")
        c.register("samples_src", ds)
    else:                      # Parquet files of the snapshot (no deletion vectors/column mapping in these tables)
        files = dt.file_uris(file_pruning_predicate=f"partition_date = '{d}'")
        try:
            c.unregister("samples_src")
        except Exception:
            pass
        c.execute(f"create or replace temp view samples_src as select * from read_parquet({files!r})")
    c.execute("create or replace temp view stg_dcgm__samples as " + STG_SQL.replace('"warehouse"."raw"."dcgm_samples"', "samples_src"))
    replace_day(FCT, c.sql(fct_day_sql(d, "stg_dcgm__samples")).arrow(), "activity_date", d)


def base_build_setup(b):
    b.execute("create schema if not exists staging; create schema if not exists marts")
    b.execute("create or replace view staging.stg_dcgm__samples as " + STG_SQL.replace('"warehouse"."raw"."dcgm_samples"', "raw.dcgm_samples"))
    b.execute(f"create table if not exists marts.fct_gpu_activity as {fct_day_sql(DAYS[0], 'staging.stg_dcgm__samples')} limit 0")


def base_build_day(b, d):
    b.execute("begin")
    b.execute(f"delete from marts.fct_gpu_activity where activity_date = '{d}'")
    b.execute(f"insert into marts.fct_gpu_activity {fct_day_sql(d, 'staging.stg_dcgm__samples')}")
    b.execute("commit")


def build(ndays=None, modes=("files", "dataset")):
    days = DAYS[:ndays] if ndays else DAYS
    out = {}
    b = duckdb.connect(BASE); b.execute("set threads=2"); base_build_setup(b)
    t0 = time.perf_counter()
    for d in days:
        base_build_day(b, d)
    out["base_s"] = round(time.perf_counter() - t0, 1)
    b.close()
    c = con()
    for m in modes:
        t0 = time.perf_counter()
        for d in days:
            delta_build_day(c, d, m)
        out[f"delta_{m}_s"] = round(time.perf_counter() - t0, 1)
        out[f"ratio_{m}"] = round(out[f"delta_{m}_s"] / out["base_s"], 2)
    # check equality of the results (Delta vs baseline) for the built days
    b = duckdb.connect(BASE, read_only=True)
    bs = b.execute("select activity_date::varchar, count(*), sum(samples), round(sum(activity),3) from marts.fct_gpu_activity group by 1 order by 1").fetchall()
    c.register("fct", DeltaTable(FCT).to_pyarrow_dataset())
    ds = c.execute("select activity_date::varchar, count(*), sum(samples), round(sum(activity),3) from fct group by 1 order by 1").fetchall()
    rec(step="build", days=len(days), equal_to_baseline=(bs == ds), fct_rows=sum(r[1] for r in ds), fct_version=DeltaTable(FCT).version(), **out)
    json.dump({r[0]: [r[1], r[2]] for r in ds}, open(f"{W}/fct_expected.json", "w"))
    b.close()


# ---------------------------------------------------------------- (4) reader process
def reader(kind, seconds, out):
    exp = json.load(open(f"{W}/fct_expected.json"))
    lat, errs, bad, n = [], [], 0, 0
    end = time.time() + float(seconds)
    while time.time() < end:
        t0 = time.perf_counter()
        try:
            if kind == "delta":
                c = con()
                c.register("fct", DeltaTable(FCT).to_pyarrow_dataset())       # latest committed version
                c.register("jobs", DeltaTable(f"{DL}/raw/job_events").to_pyarrow_dataset())
                rows = c.execute("select activity_date::varchar, count(*), sum(samples) from fct group by 1").fetchall()
                c.execute("select count(*), sum(attempt) from jobs").fetchall()
            elif kind == "deltafiles":
                c = con()
                f = DeltaTable(FCT).file_uris(); j = DeltaTable(f"{DL}/raw/job_events").file_uris()
                rows = c.execute(f"select activity_date::varchar, count(*), sum(samples) from read_parquet({f!r}, hive_partitioning=true) group by 1").fetchall()
                c.execute(f"select count(*), sum(attempt) from read_parquet({j!r})").fetchall()
            else:
                c = duckdb.connect(BASE, read_only=True)
                rows = c.execute("select activity_date::varchar, count(*), sum(samples) from marts.fct_gpu_activity group by 1").fetchall()
                c.execute("select count(*), sum(attempt) from raw.job_events").fetchall()
            c.close()
            got = {r[0]: [r[1], r[2]] for r in rows}
            if got != exp:
                bad += 1
            lat.append(time.perf_counter() - t0); n += 1
        except Exception as e:
            errs.append(str(e).splitlines()[0][:200])
            time.sleep(0.05)
    json.dump({"kind": kind, "ok": n, "lat": lat, "errors": errs, "inconsistent": bad}, open(out, "w"))


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))], 3) if xs else None


def reader_during_build2(ndays=12):
    """Reader runs for a fixed time while the build of ndays runs; both are separate processes."""
    py = sys.executable
    for kind in KINDS:
        out = f"{W}/reader_{kind}.json"
        subprocess.run([py, __file__, "reader", kind, "6", out], check=True)
        idle = json.load(open(out))
        rec(step="reader_idle", kind=kind, ok=idle["ok"], p50=pct(idle["lat"], 50), p99=pct(idle["lat"], 99), errors=len(idle["errors"]))
        t0 = time.perf_counter()
        w = subprocess.Popen([py, __file__, "buildonly", "base" if kind == "base" else "delta", str(ndays)])
        time.sleep(0.5)
        # reader runs roughly as long as the build (estimated from a 1-day timing done by the writer)
        r = subprocess.Popen([py, __file__, "reader", kind, str(READER_SECONDS), out])
        w.wait(); tb = time.perf_counter() - t0
        r.wait()
        res = json.load(open(out))
        errs = {}
        for e in res["errors"]:
            errs[e[:120]] = errs.get(e[:120], 0) + 1
        rec(step="reader_during_build", kind=kind, build_days=ndays, build_s=round(tb, 1), reader_s=READER_SECONDS,
            ok=res["ok"], p50=pct(res["lat"], 50), p99=pct(res["lat"], 99), max=pct(res["lat"], 100),
            errors=len(res["errors"]), error_texts=errs, inconsistent_answers=res["inconsistent"])


READER_SECONDS = 30
KINDS = os.environ.get("READER_KINDS", "delta,deltafiles,base").split(",")


def buildonly(kind, ndays):
    if kind == "delta":
        c = con()
        for d in DAYS[:int(ndays)]:
            delta_build_day(c, d, "files")
    else:
        b = duckdb.connect(BASE); b.execute("set threads=2")
        for d in DAYS[:int(ndays)]:
            base_build_day(b, d)
        b.close()


# ---------------------------------------------------------------- (5) two writers
def writer(days, out):
    c = con(); errs = []; t0 = time.perf_counter()
    for d in days.split(","):
        try:
            ingest_delta_day(c, d, small=False)
        except Exception as e:
            errs.append(f"{d}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    json.dump({"s": time.perf_counter() - t0, "errors": errs}, open(out, "w"))


def day_counts_ok():
    """Every day of the samples table must hold exactly the lake's rows for that day."""
    c = con()
    c.register("s", DeltaTable(SAMPLES).to_pyarrow_dataset())
    got = dict(c.execute("select partition_date::varchar, count(*) from s group by 1").fetchall())
    exp = dict(c.execute(f"select date::varchar, count(*) from read_parquet('{LAKE}/*/*/*.parquet', hive_partitioning=true) group by 1").fetchall())
    return {d: (got.get(d), exp[d]) for d in exp if got.get(d) != exp[d]}


def two_writers():
    py = sys.executable
    a, b = ",".join(DAYS[0:3]), ",".join(DAYS[3:6])
    t0 = time.perf_counter(); writer(a + "," + b, f"{W}/w1.json"); one = time.perf_counter() - t0
    v0 = DeltaTable(SAMPLES).version()
    t0 = time.perf_counter()
    pa_ = subprocess.Popen([py, __file__, "writer", a, f"{W}/wa.json"])
    pb_ = subprocess.Popen([py, __file__, "writer", b, f"{W}/wb.json"])
    pa_.wait(); pb_.wait(); two = time.perf_counter() - t0
    ra, rb = json.load(open(f"{W}/wa.json")), json.load(open(f"{W}/wb.json"))
    rec(step="two_writers_different_days", one_writer_s=round(one, 1), two_procs_s=round(two, 1), ratio=round(two / one, 2),
        errors=ra["errors"] + rb["errors"], commits=DeltaTable(SAMPLES).version() - v0, bad_days=day_counts_ok())
    # same day, both processes, 3 times each
    same = ",".join([DAYS[0]] * 3)
    v0 = DeltaTable(SAMPLES).version()
    t0 = time.perf_counter()
    pa_ = subprocess.Popen([py, __file__, "writer", same, f"{W}/wa.json"])
    pb_ = subprocess.Popen([py, __file__, "writer", same, f"{W}/wb.json"])
    pa_.wait(); pb_.wait(); two = time.perf_counter() - t0
    ra, rb = json.load(open(f"{W}/wa.json")), json.load(open(f"{W}/wb.json"))
    rec(step="two_writers_same_day", writes_attempted=6, two_procs_s=round(two, 1), errors=ra["errors"] + rb["errors"],
        commits=DeltaTable(SAMPLES).version() - v0, bad_days=day_counts_ok())


# ---------------------------------------------------------------- (6) kill -9
def kill9():
    py = sys.executable
    for delay in (1.5, 3.5, 5.0, 6.5, 8.0):
        v0 = DeltaTable(SAMPLES).version()
        files0 = set(x for x in glob.glob(f"{SAMPLES}/**/*", recursive=True) if os.path.isfile(x))
        p = subprocess.Popen([py, __file__, "writer", ",".join(DAYS[10:14]), f"{W}/wk.json"])
        time.sleep(delay); p.send_signal(signal.SIGKILL); p.wait()
        try:
            dt = DeltaTable(SAMPLES); v1 = dt.version()
            bad = day_counts_ok(); readable = True
        except Exception as e:
            v1, bad, readable = None, str(e)[:200], False
        new = set(x for x in glob.glob(f"{SAMPLES}/**/*", recursive=True) if os.path.isfile(x) and "_delta_log" not in x) - files0 - {f.replace("file://", "") for f in DeltaTable(SAMPLES).file_uris()}
        orphans = [os.path.relpath(x, SAMPLES) for x in sorted(new)][:4] + [len(new)]
        tmp = [os.path.basename(x) for x in glob.glob(f"{SAMPLES}/_delta_log/*") if not x.endswith((".json", ".checkpoint.parquet", "_last_checkpoint"))]
        t0 = time.perf_counter()
        rerun_err = None
        try:
            ingest_delta_day(con(), DAYS[10], small=False)
        except Exception as e:
            rerun_err = str(e)[:200]
        rec(step="kill9", delay_s=delay, readable=readable, commits_landed=(v1 - v0) if v1 is not None else None,
            bad_days=bad, orphan_parquet_files=orphans, log_leftovers=tmp[:5], rerun_s=round(time.perf_counter() - t0, 2),
            rerun_error=rerun_err, bad_days_after_rerun=day_counts_ok())


# ---------------------------------------------------------------- (7) time travel, optimize, vacuum, polars
def travel():
    import polars as pl
    dt = DeltaTable(SAMPLES)
    hist = dt.history()
    v = dt.version()
    c = con()
    t0 = time.perf_counter()
    c.register("s0", DeltaTable(SAMPLES, version=0).to_pyarrow_dataset())
    n0 = c.execute("select count(*), count(distinct partition_date) from s0").fetchall()[0]
    t_tt = time.perf_counter() - t0
    c.register("sN", dt.to_pyarrow_dataset())
    nN = c.execute("select count(*), count(distinct partition_date) from sN").fetchall()[0]
    files_before = len(dt.file_uris()); bytes_before = du(SAMPLES)
    t0 = time.perf_counter(); m = dt.optimize.compact(); t_opt = time.perf_counter() - t0
    dt = DeltaTable(SAMPLES)
    files_after = len(dt.file_uris())
    t0 = time.perf_counter(); vac = dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False); t_vac = time.perf_counter() - t0
    bytes_after = du(SAMPLES)
    try:
        c.register("old", DeltaTable(SAMPLES, version=1).to_pyarrow_dataset())
        c.execute("select count(*) from old").fetchall()[0]; old_after_vac = "readable"
    except Exception as e:
        old_after_vac = f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"
    t0 = time.perf_counter(); dt.create_checkpoint(); t_ck = time.perf_counter() - t0
    # polars native
    t0 = time.perf_counter()
    pl_n = pl.scan_delta(FCT).filter(pl.col("activity_date") == pl.date(2026, 11, 2)).select(pl.len()).collect().item()
    pl_v0 = pl.read_delta(FCT, version=0).height
    t_pl = time.perf_counter() - t0
    df = pl.scan_delta(FCT).filter(pl.col("activity_date") == pl.date(2026, 11, 2)).collect()
    t0 = time.perf_counter()
    df.write_delta(FCT, mode="overwrite", delta_write_options={"predicate": "activity_date = '2026-11-02'", "partition_by": ["activity_date"]})
    t_plw = time.perf_counter() - t0
    pl_after = pl.scan_delta(FCT).filter(pl.col("activity_date") == pl.date(2026, 11, 2)).select(pl.len()).collect().item()
    rec(step="travel", versions=v + 1, history_entries=len(hist), v0=n0, latest=nN, time_travel_query_s=round(t_tt, 2),
        optimize_s=round(t_opt, 1), optimize_metrics={k: m.get(k) for k in ("numFilesAdded", "numFilesRemoved")},
        files_before=files_before, files_after=files_after, vacuum_s=round(t_vac, 1), vacuumed_files=len(vac),
        bytes_before=bytes_before, bytes_after=bytes_after, old_version_after_vacuum=old_after_vac, checkpoint_s=round(t_ck, 2),
        polars_scan_day_rows=pl_n, polars_read_v0_rows=pl_v0, polars_read_s=round(t_pl, 2), polars_write_day_s=round(t_plw, 2),
        polars_rows_after_rewrite=pl_after)


def compact(n=200):
    """Small-file case: n small appends (streaming-style ingest), then open/read times, optimize.compact, vacuum."""
    import pyarrow.parquet as pq
    path = f"{DL}/raw/job_events_small"
    shutil.rmtree(path, ignore_errors=True)
    t = pq.read_table(f"{SRC}/job_events.parquet")
    step = len(t) // n + 1
    t0 = time.perf_counter()
    for i in range(n):
        write_deltalake(path, t.slice(i * step, step), mode="append", partition_by=["partition_date"])
    t_app = time.perf_counter() - t0
    def timed_read():
        t0 = time.perf_counter(); dt = DeltaTable(path); t_open = time.perf_counter() - t0
        c = con(); f = dt.file_uris()
        r = c.execute(f"select count(*), sum(attempt) from read_parquet({f!r})").fetchall()[0]
        return round(t_open, 3), round(time.perf_counter() - t0, 3), len(f), r
    before = [timed_read() for _ in range(3)]
    ckpts = len(glob.glob(f"{path}/_delta_log/*.checkpoint.parquet"))
    dt = DeltaTable(path)
    t0 = time.perf_counter(); m = dt.optimize.compact(); t_opt = time.perf_counter() - t0
    dt = DeltaTable(path)
    t0 = time.perf_counter(); vac = dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False); t_vac = time.perf_counter() - t0
    after = [timed_read() for _ in range(3)]
    rec(step="compact", appends=n, append_s=round(t_app, 1), per_commit_ms=round(1000 * t_app / n, 1), auto_checkpoints=ckpts,
        before_open_s=statistics.median(x[0] for x in before), before_read_s=statistics.median(x[1] for x in before), files_before=before[0][2],
        optimize_s=round(t_opt, 2), metrics={k: m.get(k) for k in ("numFilesAdded", "numFilesRemoved")}, vacuum_s=round(t_vac, 2), vacuumed=len(vac),
        after_open_s=statistics.median(x[0] for x in after), after_read_s=statistics.median(x[1] for x in after), files_after=after[0][2],
        same_answer=before[0][3] == after[0][3], versions=DeltaTable(path).version() + 1)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "reader":
        reader(*sys.argv[2:5])
    elif cmd == "writer":
        writer(*sys.argv[2:4])
    elif cmd == "buildonly":
        buildonly(*sys.argv[2:4])
    elif cmd == "all":
        ingest(); build(3); build(None, ("files",)); reader_during_build2(); two_writers(); kill9(); travel(); compact()
    elif cmd == "build":
        build(int(sys.argv[2]) if len(sys.argv) > 2 else None, tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("files", "dataset"))
    else:
        {"ingest": ingest, "readers": reader_during_build2, "writers": two_writers, "kill9": kill9, "travel": travel, "compact": compact}[cmd]()
