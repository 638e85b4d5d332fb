# Export the demo month's raw.* tables (not dcgm_samples, which is already Parquet) to Parquet for the spike.
# Run with the PROJECT venv (read-only open of the demo warehouse): /work/main/.venv/bin/python spikes/lakehouse/delta/export_raw.py
import duckdb
SRC = "/tmp/dbtdemo/home/warehouse.duckdb"
OUT = "/tmp/spike/delta/src"
c = duckdb.connect(SRC, read_only=True)
for t in ["audit_events", "governance_actions", "gpu_inventory", "job_events", "job_gpus", "queue_quotas"]:
    c.execute(f"copy raw.{t} to '{OUT}/{t}.parquet' (format parquet)")
    print(t, c.execute(f"select count(*) from raw.{t}").fetchone()[0])
