"""Shared helpers for the DuckLake spike (duckdb 1.5.5 + PyPI ducklake/sqlite_scanner extension wheels)."""
import glob
import os
import time

import duckdb
import duckdb_extension_ducklake
import duckdb_extension_sqlite_scanner

ROOT = "/tmp/spike/ducklake"
EXT_DIR = f"{ROOT}/ext"  # private extension_directory: never touches ~/.duckdb
EXPORT = f"{ROOT}/export"  # raw tables exported by export_raw.py (duckdb 2.0.1 -> Parquet)
SAMPLES = "/tmp/dbtdemo/home/lake/dcgm_samples"  # read only
LK = os.environ.get("SPIKE_LK", f"{ROOT}/lk")  # DuckLake: catalog lk/catalog.sqlite, data lk/data/
BASE = f"{ROOT}/base"  # baseline: plain DuckDB 1.5.5 file base/warehouse.duckdb + base/lake/ Parquet
RAW_TABLES = ["audit_events", "governance_actions", "gpu_inventory", "job_events", "job_gpus", "queue_quotas"]
WHOLE_TABLES = ["ops.check_results", "ops.ingest_log", "ops.quarantine", "ops.review_packs", "ops.scrape_gaps",
                "governance.capacity_recommendations", "governance.policy_exemptions"]
DAYS = [f"2026-11-{d:02d}" for d in range(1, 31)]
SAMPLE_COLS = ("sampled_at, host, gpu, uuid, device, pci_bus_id, model_name, gpu_instance_id, gpu_instance_profile, "
               "metric, \"value\", k8s_namespace, k8s_pod, k8s_container, hpc_job, extra_labels, \"source\", "
               "source_file, ingested_at")


def ext_file(mod, name):
    return glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", f"{name}.duckdb_extension"))[0]


def setup_extensions():
    """Offline: INSTALL the extension binaries shipped in the PyPI wheels into EXT_DIR (a local-file INSTALL),
    so that ATTACH 'ducklake:sqlite:...' autoloads them (also inside dbt-duckdb, via config_options)."""
    c = duckdb.connect(config={"extension_directory": EXT_DIR})
    mods = [(duckdb_extension_ducklake, "ducklake"), (duckdb_extension_sqlite_scanner, "sqlite_scanner")]
    try:
        import duckdb_extension_postgres_scanner
        mods.append((duckdb_extension_postgres_scanner, "postgres_scanner"))
    except ImportError:
        pass
    for mod, name in mods:
        c.execute(f"INSTALL '{ext_file(mod, name)}'")
    return c.sql("select extension_name, installed, extension_version, install_path from duckdb_extensions() "
                 "where extension_name in ('ducklake','sqlite_scanner')").fetchall()


PG = os.environ.get("SPIKE_PG")  # e.g. "dbname=lake host=/tmp/spike/ducklake/pgsock port=54329 user=postgres"


def lake_attach_sql(lk=LK, alias="lk"):
    if PG:  # (8) PostgreSQL catalog instead of SQLite
        return f"ATTACH 'ducklake:postgres:{PG}' AS {alias} (DATA_PATH '{lk}/data/')"
    # a copied lake keeps the original absolute DATA_PATH in its catalog: OVERRIDE_DATA_PATH points it here
    override = ", OVERRIDE_DATA_PATH true" if lk != f"{ROOT}/lk" else ""
    return f"ATTACH 'ducklake:sqlite:{lk}/catalog.sqlite' AS {alias} (DATA_PATH '{lk}/data/'{override})"


def connect_lake(lk=LK, settings=None):
    c = duckdb.connect(config={"extension_directory": EXT_DIR, "autoinstall_known_extensions": False})
    c.execute(lake_attach_sql(lk))
    c.execute("USE lk")
    for k, v in (settings or {}).items():
        c.execute(f"SET {k} = {v}")
    return c


def connect_base(base=BASE, read_only=False):
    return duckdb.connect(f"{base}/warehouse.duckdb", read_only=read_only)


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(d, f))
    return total


def nfiles(path):
    return sum(len(f) for _, _, f in os.walk(path))


class Timer:
    def __enter__(self):
        self.t = time.perf_counter()
        return self

    def __exit__(self, *a):
        self.s = time.perf_counter() - self.t
