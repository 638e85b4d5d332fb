"""The MLflow connector's mapping (pure) on answers recorded from `mlflow server` 3.17, and its
parser: kinds, statuses, steps, times, event ids; what is quarantined."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from pipelines.connectors.mlflow import Answers, MlflowConfig, to_records, training_step
from pipelines.sources.mlflow import parse_mlflow_pull

CONFIG = MlflowConfig(tracking_uri="http://mlflow.test:5000")
PULLED_AT = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
RUN = "534619654c8c462f84c636d35385e68c"


def run(run_id: str, status: str = "RUNNING", end_time: int | None = None, **tags: str) -> dict:
    """A Run as runs/search answers it (recorded from mlflow 3.17.2, trimmed)."""
    info = {"run_uuid": run_id, "run_id": run_id, "experiment_id": "1", "user_id": "alice", "status": status,
            "start_time": 1796083200000, "artifact_uri": f"mlflow-artifacts:/1/{run_id}/artifacts",
            "lifecycle_stage": "active"}
    if end_time is not None:
        info["end_time"] = end_time
    return {"info": info, "data": {"tags": [{"key": k.replace("_", ".", 1), "value": v} for k, v in tags.items()]}}


def files(*entries: tuple[str, int | str]) -> list[dict]:
    return [{"path": path, "is_dir": False, "file_size": size} for path, size in entries]


VERSION = {"name": "llm-7b", "version": "3", "creation_timestamp": 1796119200000, "current_stage": "None",
           "source": f"mlflow-artifacts:/1/{RUN}/artifacts/model", "run_id": RUN, "status": "READY"}


def records(answers: Answers) -> dict[str, dict]:
    return {r["artifact_id"]: r for r in to_records(answers, CONFIG, PULLED_AT)}


def test_checkpoints_artifacts_and_model_versions_of_a_running_run():
    answers = Answers(
        runs=[run(RUN, gpupool_job_id="4242", gpupool_attempt="2")],
        artifacts={RUN: files(("checkpoints/step-1000.pt", 1234), ("checkpoints/step-2000/shard-0.bin", "600"),
                              ("checkpoints/step-2000/shard-1.bin", 400), ("model/MLmodel", 10))},
        versions={RUN: [VERSION]},
    )
    got = records(answers)
    assert sorted(got) == [f"{RUN}:artifact:model/MLmodel", f"{RUN}:checkpoint:checkpoints/step-1000.pt",
                           f"{RUN}:checkpoint:checkpoints/step-2000", f"{RUN}:model_version:llm-7b/3"]
    ckpt = got[f"{RUN}:checkpoint:checkpoints/step-1000.pt"]
    assert ckpt == {
        "schema": "gpupool.artifact/v1", "artifact_id": f"{RUN}:checkpoint:checkpoints/step-1000.pt",
        "ts": "2026-12-01T12:00:00.000Z",  # a running run's artifact: first seen at the pull
        "job_id": "4242", "attempt": 2, "kind": "checkpoint", "status": "ok",
        "location": f"mlflow-artifacts:/1/{RUN}/artifacts/checkpoints/step-1000.pt", "size_bytes": 1234,
        "training_step": 1000, "model_name": None, "model_version": None, "run_id": RUN, "reported_by": "alice",
    }
    sharded = got[f"{RUN}:checkpoint:checkpoints/step-2000"]
    assert (sharded["size_bytes"], sharded["training_step"]) == (1000, 2000)  # a directory: sizes summed
    version = got[f"{RUN}:model_version:llm-7b/3"]
    assert (version["ts"], version["model_name"], version["model_version"], version["status"]) == (
        "2026-12-01T10:00:00.000Z", "llm-7b", "3", "ok")


def test_a_failed_runs_artifacts_are_failed_but_its_checkpoints_stay_usable():
    ended = 1796119200000  # 2026-12-01T12:00:00Z minus 2 h
    answers = Answers(
        runs=[run(RUN, status="FAILED", end_time=ended, gpupool_job_id="77")],
        artifacts={RUN: files(("checkpoints/step-5.pt", 10), ("checkpoints/step-6.pt", 0), ("out/report.html", 5))},
        versions={RUN: [{**VERSION, "status": "FAILED_REGISTRATION"}, {**VERSION, "version": "4",
                                                                      "status": "PENDING_REGISTRATION"}]},
    )
    got = records(answers)
    assert {k.split(":", 1)[1]: v["status"] for k, v in got.items()} == {
        "checkpoint:checkpoints/step-5.pt": "ok",
        "checkpoint:checkpoints/step-6.pt": "failed",  # empty file: the write failed
        "artifact:out/report.html": "failed",  # a failed run's output is no deliverable
        "model_version:llm-7b/3": "failed",  # registration failed; version 4 still registering: later
    }
    assert got[f"{RUN}:artifact:out/report.html"]["ts"] == "2026-12-01T10:00:00.000Z"  # the run's end
    assert got[f"{RUN}:artifact:out/report.html"]["attempt"] is None  # no gpupool.attempt tag


@pytest.mark.parametrize("tag", ["0", "-1", "two", ""])
def test_an_attempt_tag_that_is_not_a_positive_integer_is_unknown(tag):
    answers = Answers(runs=[run(RUN, gpupool_job_id="1", gpupool_attempt=tag)], artifacts={RUN: files(("a", 1))},
                      versions={})
    assert [r["attempt"] for r in to_records(answers, CONFIG, PULLED_AT)] == [None]


def test_runs_with_an_empty_tag_link_nothing():
    answers = Answers(runs=[run(RUN, gpupool_job_id="  ")], artifacts={RUN: files(("a.txt", 1))}, versions={})
    assert to_records(answers, CONFIG, PULLED_AT) == []


@pytest.mark.parametrize(("name", "step"), [
    ("step-1000.pt", 1000), ("global_step_42", 42), ("ckpt_step=7.safetensors", 7), ("1500.ckpt", 1500),
    ("epoch-3.pt", None), ("last.ckpt", None), ("model-v2.pt", None),
])
def test_training_step_from_a_checkpoint_name(name, step):
    assert training_step(name) == step


def test_other_tag_and_folder_names_from_the_config():
    config = MlflowConfig(tracking_uri="http://x/", job_tag="slurm_job", checkpoint_dir="ckpt")
    answers = Answers(runs=[{"info": {"run_id": RUN, "status": "FINISHED", "end_time": 1796119200000,
                                      "artifact_uri": "s3://b/1/r/artifacts"},
                             "data": {"tags": [{"key": "slurm_job", "value": "9"}]}}],
                      artifacts={RUN: files(("ckpt/0003.pt", 3))}, versions={})
    [record] = to_records(answers, config, PULLED_AT)
    assert (record["kind"], record["job_id"], record["training_step"], record["location"], record["reported_by"]) == (
        "checkpoint", "9", 3, "s3://b/1/r/artifacts/ckpt/0003.pt", None)
    assert config.tracking_uri == "http://x"


def test_the_config_refuses_what_is_not_an_http_tracking_server():
    with pytest.raises(ValueError, match="not an http"):
        MlflowConfig(tracking_uri="sqlite:///mlflow.db")
    with pytest.raises(ValueError, match="extra"):
        MlflowConfig(tracking_uri="http://x", tag="y")


def test_parser_loads_the_records_and_quarantines_bad_lines():
    good = to_records(Answers(runs=[run(RUN, gpupool_job_id="4242")],
                              artifacts={RUN: files(("checkpoints/step-1.pt", 5))}, versions={RUN: [VERSION]}),
                      CONFIG, PULLED_AT)
    lines = [json.dumps(r) for r in good] + [
        "not json",
        json.dumps({**good[0], "kind": "weights"}),
        json.dumps({**good[0], "schema": "gpupool.event/v1"}),
        json.dumps({**good[1], "model_name": None}),
    ]
    result = parse_mlflow_pull(("\n".join(lines) + "\n").encode(), "landing/mlflow/2026-12-01/pull-x.jsonl")
    frame = result.tables["artifact_events"]
    assert (result.records_read, result.records_loaded) == (6, 2)
    assert frame.select("kind", "job_id", "source", "training_step").rows() == [
        ("checkpoint", "4242", "mlflow", 1), ("model_version", "4242", "mlflow", None)]
    assert frame["occurred_at"].to_list() == [dt.datetime(2026, 12, 1, 12), dt.datetime(2026, 12, 1, 10)]
    assert set(frame["source_file"]) == {"landing/mlflow/2026-12-01/pull-x.jsonl"}
    reasons = result.quarantine["reason"].to_list()
    assert reasons[0].startswith("invalid JSON")
    assert "field 'kind' is 'weights'" in reasons[1]
    assert "field 'schema' is 'gpupool.event/v1', expected 'gpupool.artifact/v1'" in reasons[2]
    assert "kind model_version needs fields 'model_name' and 'model_version'" in reasons[3]
