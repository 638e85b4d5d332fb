"""Ingest through the landing zone: idempotent partitions, crash safety, accounting."""
import datetime as dt
import shutil

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipelines.ingest import ingest_partition, stage_files
from pipelines.lake import tables
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow  # ingests through Dagster with the GX suites

DAY = dt.date(2026, 11, 1)


def _table(wh: Warehouse, table: str) -> pl.DataFrame:
    with wh.connect(read_only=True) as con:
        frame = con.sql(f"select * exclude (ingested_at) from {table}").pl()
    return frame.sort(frame.columns, nulls_last=True)


def _stage_real_samples(wh: Warehouse, real_data) -> None:
    for prom in sorted((real_data / "dcgm-exporter").glob("*.prom")):
        stage_files(wh, "dcgm_text", prom, DAY)
    stage_files(wh, "k8s_audit", real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl", DAY)
    stage_files(wh, "slurm_sacct_json", real_data / "slurm" / "sacct_json_slurm_23_11_5_mila_SARC.json", DAY)


def test_rerunning_a_partition_leaves_identical_tables(warehouse, real_data):
    _stage_real_samples(warehouse, real_data)
    tables = ["raw.dcgm_samples", "raw.audit_events", "raw.job_events", "raw.job_gpus", "ops.quarantine"]
    for source in ("dcgm_text", "k8s_audit", "slurm_sacct_json"):
        ingest_partition(warehouse, source, DAY)
    first = {t: _table(warehouse, t) for t in tables}
    for source in ("dcgm_text", "k8s_audit", "slurm_sacct_json"):
        ingest_partition(warehouse, source, DAY)
    second = {t: _table(warehouse, t) for t in tables}
    for t in tables:
        assert first[t].equals(second[t]), t
    assert first["raw.dcgm_samples"].height > 0
    assert first["raw.audit_events"].height > 0


def test_every_record_is_loaded_or_quarantined(warehouse, real_data):
    _stage_real_samples(warehouse, real_data)
    reports = [ingest_partition(warehouse, s, DAY) for s in ("dcgm_text", "k8s_audit", "slurm_sacct_json")]
    for report in reports:
        assert report.records_read > 0, report
        assert report.records_read == report.records_loaded + report.records_quarantined, report


def test_a_crash_while_replacing_keeps_the_previous_partition(warehouse, real_data, monkeypatch):
    stage_files(warehouse, "k8s_audit", real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl", DAY)
    ingest_partition(warehouse, "k8s_audit", DAY)
    before = _table(warehouse, "raw.audit_events")

    def crash(*_args, **_kwargs):
        raise RuntimeError("simulated crash mid-write")

    monkeypatch.setattr(Warehouse, "_replace_rows", staticmethod(crash))
    with pytest.raises(RuntimeError, match="simulated crash"):
        ingest_partition(warehouse, "k8s_audit", DAY)
    monkeypatch.undo()
    assert _table(warehouse, "raw.audit_events").equals(before)


def test_a_crash_while_writing_the_lake_keeps_the_previous_version(warehouse, real_data, monkeypatch):
    stage_files(warehouse, "dcgm_text", real_data / "dcgm-exporter" / "metrics_sample_a100_mig_nvidia_docs.prom", DAY)
    ingest_partition(warehouse, "dcgm_text", DAY)
    before = _table(warehouse, "raw.dcgm_samples")
    version = warehouse.store.version("raw.dcgm_samples")

    def crash(*args, **kwargs):
        # a data file half written into the table's folder, then the process dies before its commit
        folder = warehouse.store.path("raw.dcgm_samples")
        (folder / "part-00000-half-written.parquet").write_bytes(b"PAR1 truncated")
        raise OSError("disk full")

    monkeypatch.setattr(tables.DeltaStore, "_write_file", crash)
    with pytest.raises(OSError, match="disk full"):
        ingest_partition(warehouse, "dcgm_text", DAY)
    monkeypatch.undo()
    assert warehouse.store.version("raw.dcgm_samples") == version
    assert _table(warehouse, "raw.dcgm_samples").equals(before)
    ingest_partition(warehouse, "dcgm_text", DAY)  # and the day re-runs
    assert _table(warehouse, "raw.dcgm_samples").equals(before)


def test_staging_refuses_a_folder_without_matching_files(warehouse, tmp_path):
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(ValueError, match="no files matching"):
        stage_files(warehouse, "dcgm_text", empty, DAY)


def test_an_empty_landing_day_replaces_with_nothing(warehouse, real_data):
    stage_files(warehouse, "k8s_audit", real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl", DAY)
    ingest_partition(warehouse, "k8s_audit", DAY)
    shutil.rmtree(warehouse.landing / "k8s_audit" / DAY.isoformat())
    report = ingest_partition(warehouse, "k8s_audit", DAY)
    assert report.records_read == 0
    assert _table(warehouse, "raw.audit_events").height == 0


def _telemetry_day(folder) -> None:
    """Two DCGM Parquet files of the day: rows the parse quarantines (NaN), rows the validation
    quarantines (a negative GPU, a ratio above 1) and rows timestamped on the next day."""
    t0 = dt.datetime(2026, 11, 1, 23, 50)
    for n, name in ((23, "a.parquet"), (17, "b.parquet")):
        minutes = list(range(n))
        pl.DataFrame({
            "sampled_at": [t0 + dt.timedelta(minutes=m) for m in minutes],
            "host": [f"h100-{m % 3:02d}" for m in minutes],
            "gpu": [-1 if m % 7 == 3 else m % 8 for m in minutes],
            "metric": ["DCGM_FI_PROF_SM_ACTIVE"] * n,
            "value": [float("nan") if m % 11 == 5 else 1.5 if m % 5 == 1 else 0.25 for m in minutes],
        }, schema_overrides={"gpu": pl.Int32}).write_parquet(folder / name)


@pytest.mark.parametrize("unreadable", [None, 0, 1])
def test_a_day_loaded_in_slices_is_the_day_loaded_whole(tmp_path, monkeypatch, unreadable):
    """Slices (and a file found unreadable at its first slice or mid-way, and parsed whole) change nothing:
    rows, quarantine, counts, notes and the validation's outcome are those of one pass over the day."""
    from pipelines import ingest
    from pipelines.sources import dcgm_parquet

    def load(home, slice_rows: int) -> tuple:
        wh = Warehouse(home)
        folder = tmp_path / "files"
        folder.mkdir(exist_ok=True)
        _telemetry_day(folder)
        stage_files(wh, "dcgm_parquet", folder, DAY)

        def slices(path):
            for i, result in enumerate(dcgm_parquet.parse_dcgm_parquet_slices(path, slice_rows)):
                if path.name == "b.parquet" and i == unreadable:
                    raise dcgm_parquet.UnreadableSlice("a bad page")
                yield result

        monkeypatch.setattr(ingest, "SLICE_ROWS", slice_rows)
        monkeypatch.setitem(ingest.SLICED, "dcgm_parquet", slices)
        report = ingest_partition(wh, "dcgm_parquet", DAY)
        summary = (report.records_read, report.records_loaded, report.records_quarantined, report.rows_by_table,
                   [n.replace(str(home), "") for n in report.notes], report.validation)
        quarantine = _table(wh, "ops.quarantine").with_columns(
            pl.col("source_file", "raw").str.replace_all(str(home), "", literal=True))
        samples = _table(wh, "raw.dcgm_samples").with_columns(
            pl.col("source_file").str.replace(str(home), "", literal=True))
        return summary, quarantine, samples

    whole = load(tmp_path / "whole", 1 << 20)
    sliced = load(tmp_path / "sliced", 4)
    assert whole[0] == sliced[0]
    assert_frame_equal(whole[1], sliced[1])
    assert_frame_equal(whole[2], sliced[2])
    assert whole[0][2] > 0 and whole[0][5]["dcgm_samples"]["failed"]  # both kinds of quarantine happened
    assert any("went to that day's partition" in note for note in whole[0][4])
