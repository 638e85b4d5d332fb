"""(2) Ingest: load the demo month one UTC day at a time (replace-partition: DELETE day + INSERT day, one
transaction per day) into (a) a DuckLake with SQLite catalog and (b) the baseline (plain DuckDB 1.5.5 file
for raw tables + the project's Parquet lake for samples, written with COPY per day).
  /tmp/spike/ducklake/venv/bin/python spikes/lakehouse/ducklake/ingest.py [lake|base|both]"""
import os
import shutil
import sys

from common import (BASE, DAYS, EXPORT, LK, RAW_TABLES, SAMPLE_COLS, SAMPLES, WHOLE_TABLES, Timer,
                    connect_base, connect_lake, du, nfiles, setup_extensions)

SAMPLE_SRC = (f"(select {SAMPLE_COLS}, \"date\" as partition_date, ingest as ingest_source from read_parquet("
              f"'{SAMPLES}/*/*/*.parquet', hive_partitioning = true))")


def create_lake(c):
    for s in ("raw", "ops", "governance"):
        c.execute(f"create schema if not exists {s}")
    for t in RAW_TABLES:
        c.execute(f"create table raw.{t} as select * from '{EXPORT}/raw.{t}.parquet' limit 0")
        c.execute(f"alter table raw.{t} set partitioned by (partition_date)")
    c.execute(f"create table raw.dcgm_samples as select * from {SAMPLE_SRC} limit 0")
    c.execute("alter table raw.dcgm_samples set partitioned by (partition_date)")
    for t in WHOLE_TABLES:
        c.execute(f"create table {t} as select * from '{EXPORT}/{t}.parquet'")


def replace_day_lake(c, day, tables=RAW_TABLES, samples=True, src_day=None):
    """One transaction: every raw table's partition `day` replaced (re-running a day replaces it)."""
    src_day = src_day or day
    c.execute("begin")
    for t in tables:
        c.execute(f"delete from raw.{t} where partition_date = DATE '{day}'")
        c.execute(f"insert into raw.{t} select * from '{EXPORT}/raw.{t}.parquet' where partition_date = DATE '{src_day}'")
    if samples:
        c.execute(f"delete from raw.dcgm_samples where partition_date = DATE '{day}'")
        c.execute(f"insert into raw.dcgm_samples select {SAMPLE_COLS}, DATE '{day}', ingest from "
                  f"read_parquet('{SAMPLES}/date={src_day}/*/*.parquet', hive_partitioning = true)")
    c.execute("commit")


def create_base(c):
    for s in ("raw", "ops", "governance"):
        c.execute(f"create schema if not exists {s}")
    for t in RAW_TABLES:
        c.execute(f"create table raw.{t} as select * from '{EXPORT}/raw.{t}.parquet' limit 0")
    for t in WHOLE_TABLES:
        c.execute(f"create table {t} as select * from '{EXPORT}/{t}.parquet'")


def create_base_view(c):
    c.execute(f"""create or replace view raw.dcgm_samples as select {SAMPLE_COLS}, cast("date" as date) as partition_date,
        ingest as ingest_source from read_parquet('{BASE}/lake/dcgm_samples/*/*/*.parquet', hive_partitioning = true,
        hive_types = {{'date': date, 'ingest': varchar}})""")


def replace_day_base(c, day):
    c.execute("begin")
    for t in RAW_TABLES:
        c.execute(f"delete from raw.{t} where partition_date = DATE '{day}'")
        c.execute(f"insert into raw.{t} select * from '{EXPORT}/raw.{t}.parquet' where partition_date = DATE '{day}'")
    c.execute("commit")
    d = f"{BASE}/lake/dcgm_samples/date={day}/ingest=dcgm_parquet"
    os.makedirs(d, exist_ok=True)  # the project's way: write part file, rename over the old one
    c.execute(f"copy (select {SAMPLE_COLS} from read_parquet('{SAMPLES}/date={day}/*/*.parquet')) to '{d}/part-0.tmp' "
              f"(format parquet)")
    os.replace(f"{d}/part-0.tmp", f"{d}/part-0.parquet")


def run(which):
    out = {}
    if which in ("lake", "both"):
        setup_extensions()
        shutil.rmtree(LK, ignore_errors=True)
        os.makedirs(LK)
        c = connect_lake()
        create_lake(c)
        with Timer() as t:
            for day in DAYS:
                replace_day_lake(c, day)
        with Timer() as t2:  # re-run one day: replace semantics
            replace_day_lake(c, DAYS[5])
        n = c.sql("select count(*) from raw.dcgm_samples").fetchall()[0][0]
        nj = c.sql("select count(*) from raw.job_events").fetchall()[0][0]
        c.close()
        out["lake"] = dict(seconds_30_days=round(t.s, 1), seconds_rerun_1_day=round(t2.s, 2), sample_rows=n,
                           job_event_rows=nj, bytes_data=du(f"{LK}/data"), files_data=nfiles(f"{LK}/data"),
                           bytes_catalog=os.path.getsize(f"{LK}/catalog.sqlite"))
    if which in ("base", "both"):
        shutil.rmtree(BASE, ignore_errors=True)
        os.makedirs(BASE)
        c = connect_base()
        create_base(c)
        with Timer() as t:
            for day in DAYS:
                replace_day_base(c, day)
        with Timer() as t2:
            replace_day_base(c, DAYS[5])
        create_base_view(c)
        n = c.sql("select count(*) from raw.dcgm_samples").fetchall()[0][0]
        nj = c.sql("select count(*) from raw.job_events").fetchall()[0][0]
        c.execute("checkpoint")
        c.close()
        out["base"] = dict(seconds_30_days=round(t.s, 1), seconds_rerun_1_day=round(t2.s, 2), sample_rows=n,
                           job_event_rows=nj, bytes_duckdb=os.path.getsize(f"{BASE}/warehouse.duckdb"),
                           bytes_lake=du(f"{BASE}/lake"))
    return out


if __name__ == "__main__":
    print(run(sys.argv[1] if len(sys.argv) > 1 else "both"))
