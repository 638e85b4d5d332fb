"""(6) kill -9 of a writer mid-commit and (7) time travel / snapshot expiry / compaction, on the DuckLake.
(6): a worker process replaces 2026-11-10 (samples + job_events) in a loop; it is killed with SIGKILL after
0.5..4 s, 6 times; after each kill a fresh process must read the day with the exact row count; finally the day
is re-run and orphaned files (written by the killed transaction, never committed) are counted and deleted.
(7): AT (VERSION => n) reads, ducklake_expire_snapshots, ducklake_merge_adjacent_files, cleanup.
  /tmp/spike/ducklake/venv/bin/python spikes/lakehouse/ducklake/crash_and_history.py"""
import json
import os
import signal
import subprocess
import sys
import time

from common import LK, SAMPLES, Timer, connect_lake, du, nfiles
from ingest import replace_day_lake

DAY = "2026-11-10"


def loop_worker():
    c = connect_lake()
    while True:
        replace_day_lake(c, DAY, tables=["job_events"])
        print("committed", flush=True)


def day_count(c, version=None):
    at = f" at (version => {version})" if version is not None else ""
    return c.execute(f"select count(*) from raw.dcgm_samples{at} where partition_date = DATE '{DAY}'").fetchall()[0][0]


def crash():
    c = connect_lake()
    want = c.execute(f"select count(*) from read_parquet('{SAMPLES}/date={DAY}/*/*.parquet')").fetchall()[0][0]
    c.close()
    out = []
    for delay in (0.5, 1.0, 1.3, 1.7, 2.1, 2.5, 2.9, 3.2, 3.6, 4.0):
        p = subprocess.Popen([sys.executable, __file__, "worker"], stdout=subprocess.PIPE, text=True)
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        commits = p.communicate()[0].count("committed")
        rec = dict(kill_after_s=delay, commits_before_kill=commits)
        try:
            with Timer() as t:
                c = connect_lake()
                rec["rows_after"] = day_count(c)
                rec["exact"] = rec["rows_after"] == want
                c.close()
            rec["reopen_and_count_s"] = round(t.s, 2)
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
        out.append(rec)
    c = connect_lake()
    files_before = nfiles(f"{LK}/data")
    try:
        orphans = c.execute("call ducklake_delete_orphaned_files('lk', dry_run => true, cleanup_all => true)").fetchall()
        n_orphans = len(orphans)
        c.execute("call ducklake_delete_orphaned_files('lk', cleanup_all => true)")
    except Exception as e:  # noqa: BLE001
        n_orphans = f"{type(e).__name__}: {e}"[:200]
    with Timer() as t:
        replace_day_lake(c, DAY)
    rerun_ok = day_count(c) == want
    return dict(kills=out, expected_rows=want, orphan_files_found=n_orphans, files_before_cleanup=files_before,
                files_after_cleanup=nfiles(f"{LK}/data"), rerun_seconds=round(t.s, 2), rerun_exact=rerun_ok)


def history():
    c = connect_lake()
    snaps = c.execute("select snapshot_id, snapshot_time from ducklake_snapshots('lk') order by 1").fetchall()
    out = dict(snapshots=len(snaps))
    # a version in the middle of the 30-day ingest: day 20 not loaded yet
    mid = snaps[len(snaps) // 4][0]
    out["as_of_version"] = mid
    out["rows_as_of"] = c.execute(f"select count(*) from raw.dcgm_samples at (version => {mid})").fetchall()[0][0]
    out["rows_now"] = c.execute("select count(*) from raw.dcgm_samples").fetchall()[0][0]
    ts = snaps[-2][1]
    out["rows_at_timestamp_of_prev_snapshot"] = c.execute(
        f"select count(*) from raw.dcgm_samples at (timestamp => TIMESTAMPTZ '{ts}')").fetchall()[0][0]
    out["files_before"] = nfiles(f"{LK}/data")
    out["bytes_before"] = du(f"{LK}/data")
    with Timer() as t:
        c.execute("call ducklake_expire_snapshots('lk', older_than => now())")
        c.execute("call ducklake_merge_adjacent_files('lk')")
        c.execute("call ducklake_cleanup_old_files('lk', cleanup_all => true)")
    out["expire_merge_cleanup_s"] = round(t.s, 2)
    out["snapshots_after"] = c.execute("select count(*) from ducklake_snapshots('lk')").fetchall()[0][0]
    out["files_after"] = nfiles(f"{LK}/data")
    out["bytes_after"] = du(f"{LK}/data")
    try:
        c.execute(f"select count(*) from raw.dcgm_samples at (version => {mid})").fetchall()
        out["old_version_after_expiry"] = "still readable"
    except Exception as e:  # noqa: BLE001
        out["old_version_after_expiry"] = f"{type(e).__name__}: {e}"[:200]
    out["rows_now_after"] = c.execute("select count(*) from raw.dcgm_samples").fetchall()[0][0]
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        loop_worker()
    else:
        which = sys.argv[1] if len(sys.argv) > 1 else "both"
        r = {}
        if which in ("crash", "both"):
            r["crash"] = crash()
        if which in ("history", "both"):
            r["history"] = history()
        print(json.dumps(r, indent=1, default=str))
