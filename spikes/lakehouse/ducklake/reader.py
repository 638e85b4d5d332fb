"""(4) Reader: a separate process that, until <stop-file> exists, opens a connection (as `gpupool sql` or a
dashboard would), runs count/sum over marts.fct_gpu_activity and count over raw.job_events, closes, sleeps.
Writes one JSON line per query to <out>.
  /tmp/spike/ducklake/venv/bin/python spikes/lakehouse/ducklake/reader.py lake|base <out.jsonl> <stop-file>"""
import json
import os
import sys
import time

from common import connect_base, connect_lake

Q1 = "select count(*), sum(gpu) from marts.fct_gpu_activity"
Q2 = "select count(*) from raw.job_events"


def main(target, out, stop):
    with open(out, "w") as f:
        while not os.path.exists(stop):
            t = time.perf_counter()
            rec = {"t": time.time()}
            try:
                c = connect_lake() if target == "lake" else connect_base(read_only=True)
                try:
                    rec["activity"] = c.execute(Q1).fetchall()[0]
                    rec["job_events"] = c.execute(Q2).fetchall()[0][0]
                finally:
                    c.close()
                rec["ok"] = True
            except Exception as e:  # noqa: BLE001
                rec["ok"] = False
                rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            rec["latency"] = time.perf_counter() - t
            f.write(json.dumps(rec, default=str) + "\n")
            f.flush()
            time.sleep(0.2)


if __name__ == "__main__":
    main(*sys.argv[1:4])
