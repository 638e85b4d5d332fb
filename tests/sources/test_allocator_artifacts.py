"""The allocator's artifact log (gpupool.artifact/v1 JSON lines) → raw.artifact_events."""
from __future__ import annotations

import datetime as dt
import json

from allocator.records import artifact_record
from pipelines.sources.allocator_artifacts import parse_artifact_log
from pipelines.sources.registry import source

T0 = dt.datetime(2026, 11, 2, 8, 30)

GOOD = [
    artifact_record("ar-000000001", T0, "job-000001", 1, "checkpoint", "ok", location="s3://ckpt/1000",
                    size_bytes=5_000_000_000, training_step=1000, reported_by="vic"),
    artifact_record("ar-000000002", T0, "job-000001", 2, "checkpoint", "failed"),
    artifact_record("ar-000000003", T0, "job-000001", 2, "model_version", "ok", model_name="det", model_version="3"),
]
BROKEN = [
    ("not json", "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({**GOOD[0], "schema": "gpupool.event/v1"}, "field 'schema' is 'gpupool.event/v1', expected 'gpupool.artifact/v1'"),
    ({**GOOD[0], "kind": "snapshot"}, "field 'kind' is 'snapshot', expected one of checkpoint, artifact, model_version"),
    ({**GOOD[0], "status": "partial"}, "field 'status' is 'partial', expected one of ok, failed"),
    ({**GOOD[0], "size_bytes": -1}, "field 'size_bytes' is -1, expected at least 0"),
    ({**GOOD[0], "attempt": 0}, "field 'attempt' is 0, expected at least 1"),
    ({**GOOD[0], "ts": "yesterday"}, "'ts'"),
    ({k: v for k, v in GOOD[0].items() if k != "job_id"}, "'job_id'"),
    ({**GOOD[2], "model_version": None}, "kind model_version needs fields 'model_name' and 'model_version'"),
]


def lines(records: list) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_good_lines_load_with_every_field():
    result = parse_artifact_log(lines(GOOD), "artifacts.jsonl")
    assert (result.records_read, result.records_loaded) == (3, 3) and result.quarantine.is_empty()
    frame = result.tables["artifact_events"]
    assert frame.row(0, named=True) == {
        "event_id": "ar-000000001", "occurred_at": T0, "job_id": "job-000001", "attempt": 1, "kind": "checkpoint",
        "status": "ok", "location": "s3://ckpt/1000", "size_bytes": 5_000_000_000, "training_step": 1000,
        "model_name": None, "model_version": None, "run_id": None, "reported_by": "vic", "source": "allocator",
        "source_file": "artifacts.jsonl",
    }
    assert frame.get_column("model_name").to_list() == [None, None, "det"]


def test_broken_lines_are_quarantined_with_the_reason_and_good_ones_kept():
    data = lines([GOOD[0], *(record for record, _ in BROKEN), GOOD[1]])
    result = parse_artifact_log(data, "artifacts.jsonl")
    assert (result.records_read, result.records_loaded) == (len(BROKEN) + 2, 2)
    assert result.tables["artifact_events"].get_column("event_id").to_list() == ["ar-000000001", "ar-000000002"]
    quarantined = result.quarantine.sort("line_number")
    assert quarantined.get_column("line_number").to_list() == list(range(2, len(BROKEN) + 2))
    for reason, (_, expected) in zip(quarantined.get_column("reason").to_list(), BROKEN, strict=True):
        assert expected in reason, (reason, expected)


def test_the_ingest_source_files_records_by_their_own_day():
    src = source("allocator_artifacts")
    assert src.tables == ("artifact_events",) and src.time_columns == {"artifact_events": "occurred_at"}
    assert src.parse_bytes(lines(GOOD).encode(), "x.jsonl").records_loaded == 3
