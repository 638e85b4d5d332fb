"""Parquet in the dcgm_samples contract: loaded as is, bad rows and bad files quarantined."""
import datetime as dt
import io

import polars as pl

from pipelines.sources.dcgm_parquet import parse_dcgm_parquet, parse_dcgm_parquet_slices

T0 = dt.datetime(2026, 11, 1)


def _parquet(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


def _samples(**overrides) -> pl.DataFrame:
    base = {
        "sampled_at": [T0, T0 + dt.timedelta(minutes=1), T0 + dt.timedelta(minutes=2), T0],
        "host": ["h100-01", "h100-01", None, "h100-01"],
        "gpu": [0, 0, 0, 1],
        "metric": ["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] * 4,
        "value": [0.5, float("nan"), 0.7, 9223372036854775794.0],
        "hpc_job": ["j-1", "j-1", "j-1", None],
    }
    base.update(overrides)
    return pl.DataFrame(base)


def test_good_rows_load_and_bad_rows_are_quarantined_with_reasons():
    result = parse_dcgm_parquet(_parquet(_samples()), "samples.parquet")
    loaded = result.tables["dcgm_samples"]
    assert loaded.height == 1
    assert loaded.row(0, named=True)["source"] == "dcgm_parquet"
    assert loaded.row(0, named=True)["hpc_job"] == "j-1"
    reasons = dict(zip(result.quarantine["line_number"], result.quarantine["reason"]))
    assert reasons == {2: "value is NaN", 3: "required field is null: host", 4: "DCGM blank sentinel"}
    assert result.records_read == result.records_loaded + result.records_quarantined == 4


def test_a_file_missing_required_columns_is_one_quarantined_record():
    result = parse_dcgm_parquet(_parquet(_samples().drop("metric")), "samples.parquet")
    assert result.records_read == 1 and result.records_loaded == 0
    assert result.quarantine["reason"][0] == "missing required columns metric"


def test_a_file_that_is_not_parquet_is_quarantined():
    result = parse_dcgm_parquet(b"PAR1 not really", "broken.parquet")
    assert result.quarantine["reason"][0].startswith("not a readable Parquet file")


def test_a_file_read_in_slices_gives_the_whole_file_parse(tmp_path):
    path = tmp_path / "samples.parquet"
    samples = _samples().with_columns(pl.col("gpu").cast(pl.Int32))  # the contract's types: no cast to fail
    pl.concat([samples] * 3).write_parquet(path)
    whole = parse_dcgm_parquet(path.read_bytes(), str(path))
    slices = list(parse_dcgm_parquet_slices(path, slice_rows=5))
    assert len(slices) == 3
    assert pl.concat([s.tables["dcgm_samples"] for s in slices]).equals(whole.tables["dcgm_samples"])
    assert pl.concat([s.quarantine for s in slices]).equals(whole.quarantine)
    assert sum(s.records_read for s in slices) == whole.records_read == 12


def test_a_file_whose_columns_need_a_cast_is_parsed_whole(tmp_path):
    path = tmp_path / "samples.parquet"
    _samples(value=["0.5", "x", "0.7", "0.1"]).write_parquet(path)  # strings: a cast that can fail
    (result,) = parse_dcgm_parquet_slices(path, slice_rows=1)
    assert result.records_read == 1
    assert result.quarantine["reason"][0].startswith("columns do not cast to the contract's types")
