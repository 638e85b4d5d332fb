"""GX suites per raw table: clean frames pass, broken ones fail with the right rule, rows and reasons."""
from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable

import polars as pl
import pytest

import expectations.validate as validate_module
from expectations.suites import SUITE_TABLES, build_suite, reason_of
from expectations.validate import split_valid, validate_frame
from pipelines.contracts import contract

T0 = dt.datetime(2024, 5, 1, 12, 0, 0)


def _at(i: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=15 * i)


def dcgm_frame() -> pl.DataFrame:
    return contract("dcgm_samples").conform(
        pl.DataFrame(
            {
                "sampled_at": [_at(0), _at(0), _at(0), _at(0), _at(1), _at(1)],
                "host": ["gpu-node-1"] * 6,
                "gpu": [0, 0, 1, 1, 2, 3],
                "gpu_instance_id": [None, None, 3, None, None, 0],
                "gpu_instance_profile": [None, None, "1g.10gb", None, None, "3g.40gb"],
                "metric": [
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                    "DCGM_FI_DEV_GPU_UTIL",
                    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                    "DCGM_FI_DEV_FB_USED",
                    "DCGM_FI_DEV_GPU_TEMP",
                    "DCGM_FI_DEV_POWER_USAGE",
                ],
                # 87 % and 40531 MiB are fine outside the ratio metrics; 61 degrees has no range rule
                "value": [0.42, 87.0, 0.0, 40531.0, 61.0, 312.5],
                "source": ["dcgm_text", "dcgm_text", "dcgm_text", "prometheus", "prometheus", "prometheus"],
                "source_file": ["a.prom"] * 3 + ["http://prom:9090/api/v1/query_range"] * 3,
            }
        )
    )


def job_events_frame() -> pl.DataFrame:
    return contract("job_events").conform(
        pl.DataFrame(
            {
                "event_id": ["e1", "e2", "e3", "e4", "e5", "e6"],
                "occurred_at": [_at(i) for i in range(6)],
                "event_type": ["submit", "admit", "start", "preempt", "requeue", "finish"],
                "job_id": ["j1"] * 6,
                "attempt": [1, 1, 1, 1, 2, 2],
                "tenant": ["vision"] * 6,
                "template": ["training", None, "inference", "experiment", "interactive", None],
                "gpus_requested": [2, 2, 0, None, 2, 2],
                "share_mode": ["whole", None, "mig", "timeslice", "whole", "whole"],
                "source": ["allocator", "allocator", "allocator", "slurm", "slurm", "kueue"],
                "source_file": ["events.jsonl"] * 6,
                "line_number": [1, 2, 3, 4, 5, 6],
            }
        )
    )


def job_gpus_frame() -> pl.DataFrame:
    return contract("job_gpus").conform(
        pl.DataFrame(
            {
                "job_id": ["j1", "j1", "j2", "j3"],
                "attempt": [1, 1, 2, 1],
                "host": ["n1", "n1", "n2", "n3"],
                "gpu": [0, 1, 3, None],
                "gpu_instance_id": [None, None, 5, None],
                "fraction": [1.0, 1.0, 1 / 7, 1.0],
                "assigned_at": [_at(i) for i in range(4)],
                "source": ["allocator", "allocator", "kueue", "slurm"],
                "source_file": ["events.jsonl"] * 4,
            }
        )
    )


def audit_events_frame() -> pl.DataFrame:
    return contract("audit_events").conform(
        pl.DataFrame(
            {
                "audit_id": ["a1", "k1", "k1"],
                "occurred_at": [_at(0), _at(1), _at(2)],
                "actor": ["alice", "system:serviceaccount:kueue", "system:serviceaccount:kueue"],
                "action": ["quota.update", "create", "create"],
                "stage": [None, "RequestReceived", "ResponseComplete"],
                "response_code": [None, None, 201],
                "source": ["allocator", "k8s", "k8s"],
                "source_file": ["audit.jsonl", "k8s-audit.log", "k8s-audit.log"],
                "line_number": [1, 1, 2],
            }
        )
    )


def gpu_inventory_frame() -> pl.DataFrame:
    return contract("gpu_inventory").conform(
        pl.DataFrame(
            {
                "snapshot_at": [T0] * 4,
                "host": ["n1", "n2", "n2", "n3"],
                "gpu": [0, 0, 0, 1],
                "gpu_model": ["H100", "A100", "A100", "L40S"],
                "memory_mib": [81559, 9728, 40192, None],
                "share_mode": ["whole", "mig", "mig", "timeslice"],
                "gpu_instance_id": [None, 7, 2, 0],
                "fraction": [1.0, 1 / 7, 3 / 7, 0.25],
                "source": ["allocator", "allocator", "allocator", "k8s"],
                "source_file": ["pool.json"] * 4,
            }
        )
    )


def queue_quotas_frame() -> pl.DataFrame:
    return contract("queue_quotas").conform(
        pl.DataFrame(
            {
                "snapshot_at": [T0] * 3,
                "queue": ["train", "infer", "scratch"],
                "tenant": ["vision", "search", "vision"],
                "gpu_model": ["H100", "A100", "L40S"],
                "quota_gpus": [8.0, 2.5, 0.0],
                "preemptible": [False, None, True],
                "source": ["allocator", "slurm", "kueue"],
                "source_file": ["pool.json"] * 3,
            }
        )
    )


def governance_actions_frame() -> pl.DataFrame:
    key = "gp-reclaim-1-0123456789abcdef"
    return contract("governance_actions").conform(
        pl.DataFrame(
            {
                "record": ["decision", "answer"],
                "occurred_at": [_at(0), _at(1)],
                "idempotency_key": [key, key],
                "finding_id": ["idle-allocation:1:j-1:a1:2024-05-01T11:00:00Z"] * 2,
                "policy": ["idle-allocation"] * 2,
                "policy_version": ["1"] * 2,
                "policy_kind": ["idle_allocation"] * 2,
                "mode": ["enforce"] * 2,
                "step_index": [1, 1],
                "action": ["reclaim"] * 2,
                "engine": ["allocator"] * 2,
                "job_id": ["j-1"] * 2,
                "attempt": [1, 1],
                "tenant": ["vision"] * 2,
                "status": ["queued", "answered"],
                "gpus_flagged": [8, 8],
                "outcome": [None, "applied"],
                "api_version": ["gpupool.governance/v1"] * 2,
                "source_file": ["outbox.jsonl"] * 2,
                "line_number": [1, 2],
            }
        )
    )


def host_samples_frame() -> pl.DataFrame:
    return contract("host_samples").conform(
        pl.DataFrame(
            {
                "sampled_at": [_at(0), _at(0), _at(0), _at(1)],
                "host": ["gpu-node-1"] * 4,
                "metric": ["node_cpu_seconds_total", "node_memory_MemTotal_bytes",
                           "node_network_receive_bytes_total", "node_load1"],
                "value": [1234.5, 8.0e10, 1.0e9, 3.2],
                "cpu": ["0", None, None, None],
                "mode": ["idle", None, None, None],
                "device": [None, None, "eth0", None],
                "source": ["node_exporter"] * 4,
                "source_file": ["gpu-node-1.prom"] * 4,
            }
        )
    )


def artifact_events_frame() -> pl.DataFrame:
    return contract("artifact_events").conform(
        pl.DataFrame(
            {
                "event_id": ["ar-000000001", "ar-000000002", "r1:artifact:model.pt", "r1:model_version:llm/3"],
                "occurred_at": [_at(i) for i in range(4)],
                "job_id": ["j1", "j1", "j1", "j1"],
                "attempt": [1, 2, None, None],
                "kind": ["checkpoint", "checkpoint", "artifact", "model_version"],
                "status": ["ok", "failed", "ok", "ok"],
                "location": ["s3://ckpt/j1/1000", None, "mlflow-artifacts:/1/r1/artifacts/model.pt", None],
                "size_bytes": [0, None, 52_428_800_000, None],
                "training_step": [1000, 0, None, None],
                "model_name": [None, None, None, "llm"],
                "model_version": [None, None, None, "3"],
                "run_id": [None, None, "r1", "r1"],
                "source": ["allocator", "allocator", "mlflow", "mlflow"],
                "source_file": ["artifacts.jsonl", "artifacts.jsonl", "runs.jsonl", "runs.jsonl"],
            }
        )
    )


CLEAN: dict[str, Callable[[], pl.DataFrame]] = {
    "dcgm_samples": dcgm_frame,
    "job_events": job_events_frame,
    "job_gpus": job_gpus_frame,
    "audit_events": audit_events_frame,
    "gpu_inventory": gpu_inventory_frame,
    "queue_quotas": queue_quotas_frame,
    "governance_actions": governance_actions_frame,
    "host_samples": host_samples_frame,
    "artifact_events": artifact_events_frame,
}


def _set(frame: pl.DataFrame, column: str, rows: dict[int, object]) -> pl.DataFrame:
    """Overwrite `column` at the given 0-based rows (values cast to the column's type)."""
    expr = pl.col(column)
    for row, value in rows.items():
        expr = pl.when(pl.int_range(pl.len()) == row).then(pl.lit(value)).otherwise(expr)
    return frame.with_columns(expr.cast(frame.schema[column]).alias(column))


def test_suites_cover_every_raw_contract_with_a_reason_on_each_rule() -> None:
    assert set(SUITE_TABLES) == set(CLEAN)
    for table in SUITE_TABLES:
        suite = build_suite(table)
        not_null = {e.column for e in suite.expectations if e.expectation_type == "expect_column_values_to_not_be_null"}
        assert not_null == set(contract(table).required), table
        for expectation in suite.expectations:
            assert expectation.meta["reason"] == reason_of(expectation) != expectation.expectation_type


def test_unknown_table_is_refused() -> None:
    with pytest.raises(ValueError, match="no expectation suite for table 'jobs'"):
        build_suite("jobs")
    with pytest.raises(ValueError, match="no expectation suite for table 'jobs'"):
        validate_frame("jobs", job_events_frame())


@pytest.mark.parametrize("table", SUITE_TABLES)
def test_clean_frame_passes(table: str) -> None:
    frame = CLEAN[table]()
    outcome = validate_frame(table, frame)
    assert outcome.success, outcome.to_metadata()
    assert outcome.rows == frame.height
    assert outcome.evaluated == len(build_suite(table).expectations)
    assert outcome.failed == [] and outcome.unexpected_rows == 0
    good, quarantine, _ = split_valid(table, frame, source="test")
    assert good.equals(frame) and quarantine.is_empty()


BROKEN = [
    # id, table, column, {row: value}, expectation type, reason, failing rows, examples
    ("null_host", "dcgm_samples", "host", {2: None},
     "expect_column_values_to_not_be_null", "host is required but missing", [2], [None]),
    ("activity_1.7", "dcgm_samples", "value", {0: 1.7},
     "expect_column_values_to_be_between", "activity ratio outside 0..1", [0], [1.7]),
    ("tensor_negative", "dcgm_samples", "value", {2: -0.1},
     "expect_column_values_to_be_between", "activity ratio outside 0..1", [2], [-0.1]),
    ("gpu_util_140", "dcgm_samples", "value", {1: 140.0},
     "expect_column_values_to_be_between", "utilisation percent outside 0..100", [1], [140.0]),
    ("power_negative", "dcgm_samples", "value", {5: -3.0},
     "expect_column_values_to_be_between", "framebuffer or power value is negative", [5], [-3.0]),
    ("gpu_negative", "dcgm_samples", "gpu", {4: -1},
     "expect_column_values_to_be_between", "gpu index is negative", [4], [-1]),
    ("unknown_dcgm_source", "dcgm_samples", "source", {3: "nvidia-smi"},
     "expect_column_values_to_be_in_set", "source is not one of dcgm_text, prometheus, dcgm_parquet", [3], ["nvidia-smi"]),
    ("unknown_event_type", "job_events", "event_type", {3: "suspend"},
     "expect_column_values_to_be_in_set",
     "unknown event_type (not submit, admit, start, requeue, preempt, finish)", [3], ["suspend"]),
    ("attempt_0", "job_events", "attempt", {0: 0, 1: 0},
     "expect_column_values_to_be_between", "attempt is below 1 (attempts are 1-based)", [0, 1], [0]),
    ("duplicate_event_id", "job_events", "event_id", {4: "e2"},
     "expect_column_values_to_be_unique", "event_id appears more than once in the batch", [1, 4], ["e2"]),
    ("unknown_template", "job_events", "template", {1: "batch"},
     "expect_column_values_to_be_in_set",
     "unknown template (not training, inference, experiment, interactive)", [1], ["batch"]),
    ("null_job_id", "job_events", "job_id", {5: None},
     "expect_column_values_to_not_be_null", "job_id is required but missing", [5], [None]),
    ("fraction_0", "job_gpus", "fraction", {2: 0.0},
     "expect_column_values_to_be_between", "fraction of a GPU outside (0, 1]", [2], [0.0]),
    ("job_gpus_attempt_0", "job_gpus", "attempt", {3: 0},
     "expect_column_values_to_be_between", "attempt is below 1 (attempts are 1-based)", [3], [0]),
    ("audit_source", "audit_events", "source", {0: "syslog"},
     "expect_column_values_to_be_in_set", "source is not one of allocator, k8s, slurm, kueue", [0], ["syslog"]),
    ("inventory_fraction_1.5", "gpu_inventory", "fraction", {0: 1.5},
     "expect_column_values_to_be_between", "fraction of a GPU outside (0, 1]", [0], [1.5]),
    ("inventory_share_mode", "gpu_inventory", "share_mode", {3: "vgpu"},
     "expect_column_values_to_be_in_set", "share_mode is not one of whole, mig, timeslice", [3], ["vgpu"]),
    ("memory_0", "gpu_inventory", "memory_mib", {1: 0},
     "expect_column_values_to_be_between", "memory_mib is not positive", [1], [0]),
    ("quota_negative", "queue_quotas", "quota_gpus", {2: -1.0},
     "expect_column_values_to_be_between", "quota_gpus is negative", [2], [-1.0]),
    ("artifact_kind", "artifact_events", "kind", {1: "snapshot"},
     "expect_column_values_to_be_in_set", "unknown kind (not checkpoint, artifact, model_version)", [1],
     ["snapshot"]),
    ("artifact_status", "artifact_events", "status", {0: "partial"},
     "expect_column_values_to_be_in_set", "unknown status (not ok, failed)", [0], ["partial"]),
    ("artifact_size_negative", "artifact_events", "size_bytes", {2: -1},
     "expect_column_values_to_be_between", "size_bytes is negative", [2], [-1]),
    ("artifact_step_negative", "artifact_events", "training_step", {0: -5},
     "expect_column_values_to_be_between", "training_step is negative", [0], [-5]),
    ("artifact_source", "artifact_events", "source", {3: "wandb"},
     "expect_column_values_to_be_in_set", "source is not one of allocator, mlflow", [3], ["wandb"]),
]


@pytest.mark.parametrize(
    ("table", "column", "rows", "expectation", "reason", "failing", "examples"),
    [pytest.param(*case[1:], id=case[0]) for case in BROKEN],
)
def test_broken_frame_fails_with_the_right_rule_rows_and_reason(
    table: str,
    column: str,
    rows: dict[int, object],
    expectation: str,
    reason: str,
    failing: list[int],
    examples: list[object],
) -> None:
    frame = _set(CLEAN[table](), column, rows)
    outcome = validate_frame(table, frame)
    assert not outcome.success
    assert len(outcome.failed) == 1, [f.reason for f in outcome.failed]
    failed = outcome.failed[0]
    assert (failed.expectation_type, failed.column, failed.reason) == (expectation, column, reason)
    assert sorted(failed.unexpected_index) == failing
    assert failed.unexpected_count == len(failing) == outcome.unexpected_rows
    assert failed.examples == examples


def test_ratio_rule_applies_only_to_ratio_metrics() -> None:
    # 87 is a fine GPU_UTIL and would break the 0..1 rule if the row condition leaked
    frame = _set(dcgm_frame(), "metric", {1: "DCGM_FI_PROF_SM_ACTIVE"})
    outcome = validate_frame("dcgm_samples", frame)
    assert [(f.reason, f.unexpected_index) for f in outcome.failed] == [("activity ratio outside 0..1", [1])]


def test_row_breaking_two_rules_is_counted_once_and_names_both() -> None:
    frame = _set(_set(dcgm_frame(), "value", {0: 1.7, 1: 140.0}), "host", {0: None})
    outcome = validate_frame("dcgm_samples", frame)
    assert outcome.unexpected_rows == 2
    assert sum(f.unexpected_count for f in outcome.failed) == 3
    reasons = dict(outcome.row_reasons().iter_rows())
    assert reasons == {
        0: "host is required but missing; activity ratio outside 0..1",
        1: "utilisation percent outside 0..100",
    }


UNKNOWN_EVENT = "unknown event_type (not submit, admit, start, requeue, preempt, finish)"


def test_split_valid_keeps_good_rows_and_quarantines_exactly_the_bad_ones() -> None:
    frame = _set(_set(job_events_frame(), "attempt", {1: 0}), "event_type", {1: "paused", 4: "paused"})
    good, quarantine, outcome = split_valid("job_events", frame, source="allocator_events")
    assert good.equals(frame.filter(~pl.col("line_number").is_in([2, 5])))
    assert quarantine.schema == contract("quarantine").schema
    assert quarantine.height == outcome.unexpected_rows == 2
    assert good.height + quarantine.height == frame.height
    assert quarantine.select("source", "source_file", "line_number", "stage", "reason").rows() == [
        ("allocator_events", "events.jsonl", 2, "validate",
         UNKNOWN_EVENT + "; attempt is below 1 (attempts are 1-based)"),
        ("allocator_events", "events.jsonl", 5, "validate", UNKNOWN_EVENT),
    ]
    raw = json.loads(quarantine["raw"][0])
    assert (raw["event_id"], raw["event_type"], raw["attempt"]) == ("e2", "paused", 0)


def test_split_valid_without_line_numbers_quarantines_with_null_line() -> None:
    frame = _set(dcgm_frame(), "value", {3: -5.0})
    good, quarantine, _ = split_valid("dcgm_samples", frame, source="dcgm_text")
    assert good.height == 5 and -5.0 not in good["value"].to_list()
    assert quarantine.select("source_file", "line_number", "reason").rows() == [
        ("http://prom:9090/api/v1/query_range", None, "framebuffer or power value is negative")
    ]
    assert json.loads(quarantine["raw"][0])["metric"] == "DCGM_FI_DEV_FB_USED"


def test_split_valid_takes_source_file_from_the_named_column() -> None:
    frame = _set(job_gpus_frame(), "fraction", {0: 0.0}).with_columns(origin=pl.lit("placements.jsonl"))
    _, quarantine, _ = split_valid("job_gpus", frame, source="allocator_events", source_file_col="origin")
    assert quarantine["source_file"].to_list() == ["placements.jsonl"]
    with pytest.raises(ValueError, match="no column 'file'"):
        split_valid("job_gpus", frame, source="allocator_events", source_file_col="file")


def test_empty_frame_passes_without_running_gx(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_gx() -> None:
        raise AssertionError("GX must not run for an empty frame")

    monkeypatch.setattr(validate_module, "_batch_definitions", no_gx)
    empty = contract("job_events").empty_frame()
    good, quarantine, outcome = split_valid("job_events", empty, source="allocator_events")
    assert outcome.success and outcome.rows == 0 and outcome.unexpected_rows == 0
    assert good.is_empty() and quarantine.is_empty()
    assert quarantine.schema == contract("quarantine").schema


def test_frame_missing_a_contract_column_is_refused() -> None:
    with pytest.raises(ValueError, match=r"raw.job_gpus: frame lacks contract columns \['fraction'\]"):
        validate_frame("job_gpus", job_gpus_frame().drop("fraction"))


def test_expectation_that_cannot_run_raises_instead_of_passing() -> None:
    frame = dcgm_frame().with_columns(pl.col("value").cast(pl.String))
    with pytest.raises(RuntimeError, match="raw.dcgm_samples: expect_column_values_to_be_between on value"):
        validate_frame("dcgm_samples", frame)


def test_metadata_is_json_with_counts_and_examples() -> None:
    frame = _set(_set(job_events_frame(), "occurred_at", {0: None}), "attempt", {2: 0, 3: 0})
    metadata = validate_frame("job_events", frame).to_metadata()
    assert json.loads(json.dumps(metadata)) == metadata
    assert metadata["success"] is False and metadata["unexpected_count"] == 3
    assert {(f["column"], f["unexpected_count"]) for f in metadata["failed"]} == {("occurred_at", 1), ("attempt", 2)}
    attempt = next(f for f in metadata["failed"] if f["column"] == "attempt")
    assert attempt["examples"] == [0] and attempt["first_rows"] == [2, 3]


def test_timing_200k_dcgm_rows() -> None:
    n = 200_000
    metrics = pl.Series(
        ["DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP"]
    )
    i = pl.int_range(n)
    frame = contract("dcgm_samples").conform(
        pl.select(
            sampled_at=pl.lit(T0) + pl.duration(seconds=i // 32),
            host=pl.lit("gpu-node-") + (i % 4).cast(pl.String),
            gpu=i % 8,
            metric=pl.lit(metrics).gather(i % 4),
            value=(i % 100).cast(pl.Float64) / 100,
            source=pl.lit("dcgm_text"),
            source_file=pl.lit("scrape.prom"),
        )
    )
    # rows 4 and 150,000 are GR_ENGINE_ACTIVE (i % 4 == 0), row 150,001 is GPU_UTIL
    frame = _set(frame, "value", {4: 1.7, 150_000: 2.0, 150_001: 140.0})
    validate_frame("dcgm_samples", frame.head(10))  # warm the cached context out of the timing
    start = time.perf_counter()
    outcome = validate_frame("dcgm_samples", frame)
    validate_s = time.perf_counter() - start
    start = time.perf_counter()
    good, quarantine, _ = split_valid("dcgm_samples", frame, source="dcgm_text")
    split_s = time.perf_counter() - start
    print(f"\nGX validate_frame, {n:,} dcgm rows: {validate_s:.2f} s; split_valid: {split_s:.2f} s")
    assert outcome.rows == n
    assert sorted(outcome.row_reasons()["row"].to_list()) == [4, 150_000, 150_001]
    assert good.height == n - 3 and quarantine.height == 3
