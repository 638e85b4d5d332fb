"""(5) Two writer PROCESSES on one DuckLake (SQLite catalog) replacing day partitions of raw.dcgm_samples
(+ raw.job_events) at the same time: different days, then the same day; vs one process doing both sets.
Each worker retries a failed day up to 20 times (app-level) and reports every error text.
Afterwards the row count of every touched day is compared with the source (lost/duplicated rows).
  /tmp/spike/ducklake/venv/bin/python spikes/lakehouse/ducklake/writers.py"""
import json
import subprocess
import sys
import time

from common import SAMPLES, connect_lake
from ingest import replace_day_lake

A = ["2026-11-01", "2026-11-02", "2026-11-03"]
B = ["2026-11-04", "2026-11-05", "2026-11-06"]


def worker(days, settings):
    c = connect_lake(settings=json.loads(settings))
    errors, retries = [], 0
    t = time.perf_counter()
    for day in days.split(","):
        for attempt in range(20):
            try:
                replace_day_lake(c, day, tables=["job_events"])
                break
            except Exception as e:  # noqa: BLE001
                try:
                    c.execute("rollback")
                except Exception:  # noqa: BLE001
                    pass
                retries += 1
                errors.append(f"{type(e).__name__}: {str(e)[:200]}")
                time.sleep(0.2 * (attempt + 1))
        else:
            errors.append(f"GAVE UP on {day}")
    print(json.dumps(dict(seconds=round(time.perf_counter() - t, 2), retries=retries, errors=errors)))


def spawn(days, settings):
    return subprocess.Popen([sys.executable, __file__, "worker", ",".join(days), json.dumps(settings)],
                            stdout=subprocess.PIPE, text=True)


def check(days):
    c = connect_lake()
    bad = {}
    for d in days:
        got = c.execute(f"select count(*) from raw.dcgm_samples where partition_date = DATE '{d}'").fetchall()[0][0]
        want = c.execute(f"select count(*) from read_parquet('{SAMPLES}/date={d}/*/*.parquet')").fetchall()[0][0]
        gj = c.execute(f"select count(*) from raw.job_events where partition_date = DATE '{d}'").fetchall()[0][0]
        wj = c.execute(f"select count(*) from '/tmp/spike/ducklake/export/raw.job_events.parquet' "
                       f"where partition_date = DATE '{d}'").fetchall()[0][0]
        if got != want or gj != wj:
            bad[d] = dict(samples=(got, want), job_events=(gj, wj))
    c.close()
    return bad or "all days exact"


def run(settings):
    out = {"settings": settings}
    t = time.perf_counter()
    p = spawn(A + B, settings)
    out["one_writer_6_days"] = dict(wall=round(time.perf_counter() - t, 2), **json.loads(p.communicate()[0]))
    out["one_writer_6_days"]["wall"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    ps = [spawn(A, settings), spawn(B, settings)]
    res = [json.loads(p.communicate()[0]) for p in ps]
    out["two_writers_3_days_each"] = dict(wall=round(time.perf_counter() - t, 2), workers=res, check=check(A + B))
    t = time.perf_counter()
    ps = [spawn(A[:1], settings), spawn(A[:1], settings)]
    res = [json.loads(p.communicate()[0]) for p in ps]
    out["two_writers_same_day"] = dict(wall=round(time.perf_counter() - t, 2), workers=res, check=check(A[:1]))
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2], sys.argv[3])
    else:
        print(json.dumps(run(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}), indent=1))
