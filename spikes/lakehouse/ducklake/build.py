"""(3) Build: the REAL dbt project (/work/main/models) full-refresh, seeds + models (as pipelines/build.py: no
tests), against target `lake` (DuckLake, SQLite catalog) or `base` (plain DuckDB 1.5.5 file). dbt's target/
and logs go to /tmp/spike/ducklake/dbt_<target>/ (nothing is written into models/).
  /tmp/spike/ducklake/venv/bin/python spikes/lakehouse/ducklake/build.py lake|base [extra dbt args]
Prints seconds, per-model status/time (slowest first) and every failure's message."""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = "/tmp/spike/ducklake/venv/bin"


def build(target, extra=()):
    out = f"/tmp/spike/ducklake/dbt_{target}"
    env = dict(os.environ, PYTHONPATH="/work/main", GPUPOOL_HOME="/tmp/spike/ducklake/home",
               DBT_SEND_ANONYMOUS_USAGE_STATS="false")
    args = [f"{VENV}/dbt", "build", "--resource-type", "seed", "--resource-type", "model",
            "--project-dir", "/work/main/models", "--profiles-dir", f"{HERE}/dbt", "--target", target,
            "--target-path", f"{out}/target", "--log-path", f"{out}/logs", "--full-refresh",
            "--event-time-start", "2026-11-01", "--event-time-end", "2026-12-01", "--no-use-colors", *extra]
    t = time.perf_counter()
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    secs = time.perf_counter() - t
    res = json.load(open(f"{out}/target/run_results.json"))["results"]
    rows = sorted(((r["unique_id"].split(".")[-1], r["status"], round(r["execution_time"], 2), r.get("message"))
                   for r in res), key=lambda r: -r[2])
    return dict(target=target, rc=p.returncode, seconds=round(secs, 1), n=len(rows),
                statuses={s: sum(1 for r in rows if r[1] == s) for s in {r[1] for r in rows}},
                slowest=rows[:6], failures=[r for r in rows if r[1] not in ("success", "pass")], tail=p.stdout[-1500:])


if __name__ == "__main__":
    r = build(sys.argv[1], sys.argv[2:])
    print(json.dumps(r, indent=1, default=str))
