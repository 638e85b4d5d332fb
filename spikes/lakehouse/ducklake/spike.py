"""DuckLake spike (issue 14): measures ingest (per-day replace), the REAL dbt build, a reader process during the
build, two writer processes, kill -9 mid-commit, time travel/expiry/compaction; DuckLake (SQLite catalog, data
under /tmp/spike/ducklake/lk/) vs a plain DuckDB 1.5.5 file. Setup (once):
  /root/.pyenv/versions/3.11.7/bin/python3.11 -m venv /tmp/spike/ducklake/venv
  /tmp/spike/ducklake/venv/bin/pip install -r spikes/lakehouse/ducklake/requirements.txt
  /work/main/.venv/bin/python spikes/lakehouse/ducklake/export_raw.py      # raw tables -> Parquet (read only)
Run (from /work/main):  /tmp/spike/ducklake/venv/bin/python spikes/lakehouse/ducklake/spike.py [step ...]
steps: ingest build reader writers crash history (default: all, in that order). Results: results/<step>.json"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
PY = sys.executable
RES = f"{HERE}/results"
# fct_telemetry_reconciliation (and its children) never finish on duckdb 1.5.5, lake AND plain file (>15 min vs
# 0.73 s on the project's duckdb 2.0.1): a 1.5.5 planner problem, not DuckLake's. Excluded so the rest can be timed.
EXCLUDE = ["--exclude", "fct_telemetry_reconciliation+"]


def sub(script, *args):
    p = subprocess.run([PY, f"{HERE}/{script}", *args], capture_output=True, text=True, cwd="/work/main")
    if p.returncode:
        return {"rc": p.returncode, "stderr": p.stderr[-3000:], "stdout": p.stdout[-3000:]}
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"stdout": p.stdout[-3000:]}


def reader_during_build(target):
    """Build `target` while reader.py polls it from another process; summarise the reader's log."""
    log, stop = f"/tmp/spike/ducklake/reader_{target}.jsonl", f"/tmp/spike/ducklake/reader_{target}.stop"
    if os.path.exists(stop):
        os.remove(stop)
    r = subprocess.Popen([PY, f"{HERE}/reader.py", target, log, stop], cwd=HERE)
    time.sleep(3)
    b = sub("build.py", target, *EXCLUDE)
    open(stop, "w").close()
    r.wait()
    recs = [json.loads(line) for line in open(log)]
    ok = [x for x in recs if x["ok"]]
    lat = sorted(x["latency"] for x in ok)
    errs = {}
    for x in recs:
        if not x["ok"]:
            k = x["error"][:160]
            errs[k] = errs.get(k, 0) + 1
    counts = sorted({tuple(x["activity"]) for x in ok} | set())
    return dict(build_seconds=b.get("seconds"), build_statuses=b.get("statuses"), queries=len(recs), ok=len(ok),
                errors=errs, p50=lat[len(lat) // 2] if lat else None, p99=lat[int(len(lat) * 0.99)] if lat else None,
                distinct_activity_answers=len(counts), activity_answers=[list(c) for c in counts][:40],
                job_event_answers=sorted({x["job_events"] for x in ok}))


STEPS = {
    "ingest": lambda: sub("ingest.py", "both"),
    "build": lambda: {"lake": sub("build.py", "lake", *EXCLUDE), "base": sub("build.py", "base", *EXCLUDE)},
    "reader": lambda: {"lake": reader_during_build("lake"), "base": reader_during_build("base")},
    "writers": lambda: sub("writers.py"),
    "crash": lambda: sub("crash_and_history.py", "crash"),
    "history": lambda: sub("crash_and_history.py", "history"),
}

if __name__ == "__main__":
    os.makedirs(RES, exist_ok=True)
    for step in sys.argv[1:] or list(STEPS):
        out = STEPS[step]()
        json.dump(out, open(f"{RES}/{step}.json", "w"), indent=1, default=str)
        print(step, json.dumps(out, default=str)[:2000], flush=True)
