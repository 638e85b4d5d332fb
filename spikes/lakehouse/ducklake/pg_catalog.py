"""(8) The same lake with a PostgreSQL catalog (Debian postgresql 15, local socket): create, load days 1-6, then
the two-writer test of writers.py. Needs duckdb-extension-postgres-scanner==1.5.5 and a running server:
  SPIKE_PG="dbname=lake host=/tmp/spike/ducklake/pgsock port=54329 user=postgres" SPIKE_LK=/tmp/spike/ducklake/lkpg \\
  /tmp/spike/ducklake/venv/bin/python spikes/lakehouse/ducklake/pg_catalog.py"""
import json
import os
import shutil

from common import LK, PG, Timer, connect_lake, setup_extensions
from ingest import create_lake, replace_day_lake
import writers

assert PG and LK.endswith("lkpg")
setup_extensions()
shutil.rmtree(LK, ignore_errors=True)
os.makedirs(LK)
c = connect_lake()
create_lake(c)
with Timer() as t:
    for d in writers.A + writers.B:
        replace_day_lake(c, d)
c.close()
out = {"load_6_days_s": round(t.s, 2)}
for i in range(3):
    out[f"writers_run{i + 1}"] = writers.run({})
print(json.dumps(out, indent=1))
