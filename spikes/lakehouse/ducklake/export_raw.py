"""Step 0 (run with the PROJECT venv, duckdb 2.0.1, read-only): export the demo home's raw/ops/governance/seeds
tables to Parquet under /tmp/spike/ducklake/export/<schema>.<table>.parquet so duckdb 1.5.5 can read them.
  /work/main/.venv/bin/python spikes/lakehouse/ducklake/export_raw.py"""
import duckdb, os
OUT = "/tmp/spike/ducklake/export"
os.makedirs(OUT, exist_ok=True)
c = duckdb.connect("/tmp/dbtdemo/home/warehouse.duckdb", read_only=True)
tabs = c.sql("select schema_name, table_name from duckdb_tables() where schema_name in ('raw','ops','governance')").fetchall()
for s, t in tabs:
    c.execute(f"copy {s}.{t} to '{OUT}/{s}.{t}.parquet' (format parquet)")
    print(s, t)
