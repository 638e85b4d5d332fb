"""Checkpoint and artifact reports: POST /v1/jobs/{id}/artifacts, the engine's rules, the records
(GET /v1/artifacts, the landing files), Job.last_checkpoint_at, and the pull and ingest downstream."""

from __future__ import annotations

import datetime as dt
import json
import warnings
from pathlib import Path

import pytest
import requests

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its test client; httpx works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from allocator.artifacts import REPORT_GRACE_S, ArtifactReport, ArtifactReportError
from allocator.auth import parse_tokens
from allocator.model import Action, ActionKind, JobState
from allocator.records import JsonlDaySink
from allocator.service import create_app
from allocator.store import Store
from pipelines.connectors.allocator import AllocatorClient
from pipelines.ingest import ingest_partition
from pipelines.warehouse import Warehouse
from tests.allocator.conftest import at, make_engine, training
from tests.allocator.helpers import (
    ADMIN,
    BOT,
    NLP,
    T0,
    TOKENS,
    TRAINING,
    VISION,
    Clock,
    auth,
    small_pool,
)
from tests.governance.conftest import allocator  # noqa: F401 (the real API over uvicorn, for the pull)

CHECKPOINT = {"kind": "checkpoint", "location": "s3://ckpt/vision/run-7/step-1000", "size_bytes": 2_147_483_648,
              "training_step": 1000}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "allocator.db", small_pool())
    yield s
    s.close()


@pytest.fixture
def client(store: Store, clock: Clock) -> TestClient:
    app = create_app(store, parse_tokens(json.dumps(TOKENS), "test tokens"), clock=clock, tick_interval_s=None)
    return TestClient(app)


def running_job(client: TestClient) -> str:
    r = client.post("/v1/jobs", json=TRAINING, headers=auth(VISION))
    assert r.status_code == 201 and r.json()["state"] == "RUNNING", r.text
    return r.json()["job_id"]


def report(client: TestClient, job_id: str, token: str = VISION, **body) -> dict:
    r = client.post(f"/v1/jobs/{job_id}/artifacts", json=body or CHECKPOINT, headers=auth(token))
    assert r.status_code == 201, r.text
    return r.json()


def artifacts(client: TestClient, token: str = ADMIN) -> list[dict]:
    page = client.get("/v1/artifacts", params={"cursor": 0}, headers=auth(token)).json()
    return page["records"]


# -- the endpoint ----------------------------------------------------------------------------------


def test_the_jobs_tenant_token_reports_a_checkpoint_and_the_record_is_served(client, clock, store):
    job_id = running_job(client)
    clock.advance(600)
    record = report(client, job_id)
    assert record == {"schema": "gpupool.artifact/v1", "artifact_id": "ar-000000001", "ts": "2026-11-02T08:10:00Z",
                      "job_id": job_id, "attempt": 1, "kind": "checkpoint", "status": "ok",
                      "location": CHECKPOINT["location"], "size_bytes": 2_147_483_648, "training_step": 1000,
                      "reported_by": "vic"}
    # an admin may report too; a model version names its model
    model = report(client, job_id, ADMIN, kind="model_version", model_name="vision-det", model_version="3",
                   written_at="2026-11-02T09:05:00+01:00")
    assert (model["artifact_id"], model["ts"], model["reported_by"]) == ("ar-000000002", "2026-11-02T08:05:00Z",
                                                                          "alice")
    assert artifacts(client) == [record, model]
    assert artifacts(client, VISION) == [record, model]
    assert artifacts(client, NLP) == []  # another tenant sees none of them
    assert store.engine.jobs[job_id].last_checkpoint_at == T0 + dt.timedelta(seconds=600)


def test_who_may_report(client):
    job_id = running_job(client)
    # another tenant's token: the job does not exist for it, exactly as an unknown one (issue 26)
    other = client.post(f"/v1/jobs/{job_id}/artifacts", json=CHECKPOINT, headers=auth(NLP))
    assert other.status_code == 404 and other.json() == {"detail": f"job {job_id} not found"}
    assert client.post(f"/v1/jobs/{job_id}/artifacts", json=CHECKPOINT, headers=auth(BOT)).status_code == 403
    assert client.post(f"/v1/jobs/{job_id}/artifacts", json=CHECKPOINT).status_code == 401
    unknown = client.post("/v1/jobs/job-999999/artifacts", json=CHECKPOINT, headers=auth(ADMIN))
    assert unknown.status_code == 404 and unknown.json() == {"detail": "job job-999999 not found"}
    assert artifacts(client) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "snapshot"}, "'checkpoint', 'artifact' or 'model_version'"),
        ({"kind": "checkpoint", "status": "partial"}, "'ok' or 'failed'"),
        ({**CHECKPOINT, "size_bytes": -1}, "greater than or equal to 0"),
        ({**CHECKPOINT, "training_step": -5}, "greater than or equal to 0"),
        ({**CHECKPOINT, "size_bytes": "1GB"}, "valid integer"),
        ({**CHECKPOINT, "written_at": "2026-11-02T09:00:00Z"}, "is in the future"),
        ({**CHECKPOINT, "written_at": "2026-11-02T07:59:00Z"}, "is before attempt 1 of job"),
        ({**CHECKPOINT, "written_at": "yesterday"}, "datetime"),
        ({**CHECKPOINT, "written_at": "0001-01-01T00:00:00+01:00"}, "out of range once converted to UTC"),
        ({**CHECKPOINT, "written_at": "0001-01-01T00:00:00Z"}, "is before attempt 1 of job"),
        ({**CHECKPOINT, "attempt": 3}, "has no attempt 3 (its latest is attempt 1)"),
        ({**CHECKPOINT, "attempt": 0}, "greater than or equal to 1"),
        ({**CHECKPOINT, "step": 10}, "Extra inputs are not permitted"),
        ({"kind": "model_version", "model_name": "vision-det"}, "needs model_name and model_version"),
        ({**CHECKPOINT, "model_name": "vision-det"}, "are for kind model_version, not checkpoint"),
        ({}, "Field required"),
    ],
)
def test_a_bad_report_is_422_with_what_was_wrong_and_records_nothing(client, clock, body, message):
    job_id = running_job(client)
    clock.advance(60)
    r = client.post(f"/v1/jobs/{job_id}/artifacts", json=body, headers=auth(VISION))
    assert r.status_code == 422, r.text
    assert message in r.text
    assert artifacts(client) == []


def test_an_attempt_ended_longer_than_the_grace_ago_is_409(client, clock):
    job_id = running_job(client)
    clock.advance(3600)
    finished = client.post(f"/v1/jobs/{job_id}/finish", json={"state": "COMPLETED"}, headers=auth(BOT))
    assert finished.status_code == 200, finished.text
    clock.advance(REPORT_GRACE_S)  # the final model, registered as the job ends: still counted
    assert report(client, job_id, kind="model_version", model_name="m", model_version="1")["attempt"] == 1
    clock.advance(1)
    late = client.post(f"/v1/jobs/{job_id}/artifacts", json=CHECKPOINT, headers=auth(VISION))
    assert late.status_code == 409
    assert late.json()["detail"] == (f"artifact: attempt 1 of job {job_id} ended at 2026-11-02T09:00:00Z: "
                                     f"reports are taken up to {REPORT_GRACE_S} s after an attempt ends")
    assert len(artifacts(client)) == 1


def test_a_retried_report_with_the_same_idempotency_key_is_recorded_once(client):
    job_id = running_job(client)
    headers = {**auth(VISION), "Idempotency-Key": "ckpt-1000"}
    first = client.post(f"/v1/jobs/{job_id}/artifacts", json=CHECKPOINT, headers=headers)
    again = client.post(f"/v1/jobs/{job_id}/artifacts", json=CHECKPOINT, headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert len(artifacts(client)) == 1


# -- last_checkpoint_at ----------------------------------------------------------------------------


def test_only_ok_checkpoints_move_last_checkpoint_at_and_it_survives_a_restart(tmp_path, clock):
    path = tmp_path / "allocator.db"
    tokens = parse_tokens(json.dumps(TOKENS), "test tokens")
    store = Store(path, small_pool())
    client = TestClient(create_app(store, tokens, clock=clock, tick_interval_s=None))
    job_id = running_job(client)
    clock.advance(1200)
    report(client, job_id, kind="checkpoint", written_at="2026-11-02T08:15:00Z")
    ok_at = dt.datetime(2026, 11, 2, 8, 15)
    report(client, job_id, kind="checkpoint", status="failed")  # a checkpoint that could not be written
    report(client, job_id, kind="artifact", location="s3://logs/eval.json")
    report(client, job_id, kind="checkpoint", written_at="2026-11-02T08:10:00Z")  # older: late upload
    assert store.engine.jobs[job_id].last_checkpoint_at == ok_at
    store.close(snapshot=False)  # as a crash would: the next start replays the log

    replayed = Store(path, small_pool())
    assert replayed.replay_divergences == 0
    assert replayed.engine.jobs[job_id].last_checkpoint_at == ok_at
    assert [r["artifact_id"] for r in replayed.artifacts()[0]] == [f"ar-00000000{i}" for i in (1, 2, 3, 4)]
    replayed.close()  # snapshots: the next start reads the state
    restored = Store(path, small_pool())
    assert restored.replayed_commands == 0
    assert restored.engine.jobs[job_id].last_checkpoint_at == ok_at
    client = TestClient(create_app(restored, tokens, clock=clock, tick_interval_s=None))
    assert report(client, job_id)["artifact_id"] == "ar-000000005"  # ids never repeat across a restart
    restored.close()


def test_last_checkpoint_at_is_per_attempt_and_a_preempted_attempt_still_takes_its_reports():
    engine, sink = make_engine()
    job = engine.submit(training(), at(0), "vision-alice")
    engine.schedule(at(0))
    engine.report_artifact(job.job_id, ArtifactReport("checkpoint"), at(30), "vision-alice")
    assert job.last_checkpoint_at == at(30)
    engine.apply_action(Action(ActionKind.PREEMPT, "k1", job.job_id, "gov-bot"), at(40))
    assert (job.state, job.attempt, job.last_checkpoint_at) == (JobState.PENDING, 2, None)
    # the checkpoint written in the preemption grace, reported late: the last attempt that ran takes it
    late = engine.report_artifact(job.job_id, ArtifactReport("checkpoint", written_at=at(39)), at(45), "v")
    assert late["attempt"] == 1 and job.attempts[1].last_checkpoint_at == at(39)
    with pytest.raises(ArtifactReportError, match="attempt 2 of job .* has not started") as refused:
        engine.report_artifact(job.job_id, ArtifactReport("checkpoint", attempt=2), at(45), "v")
    assert refused.value.status == 409
    engine.schedule(at(50))
    assert job.state == JobState.RUNNING and job.last_checkpoint_at is None
    engine.report_artifact(job.job_id, ArtifactReport("checkpoint"), at(80), "v")
    assert job.last_checkpoint_at == at(80) and job.attempts[1].last_checkpoint_at == at(39)
    assert [r["attempt"] for r in sink.artifacts] == [1, 1, 2]
    with pytest.raises(KeyError):
        engine.report_artifact("job-404", ArtifactReport("checkpoint"), at(80))


def test_the_day_sink_writes_the_landing_file(tmp_path):
    engine, _ = make_engine()
    with JsonlDaySink(tmp_path) as files:
        engine.sink = files
        job = engine.submit(training(), at(0), "vision-alice")
        engine.schedule(at(0))
        engine.report_artifact(job.job_id, ArtifactReport("checkpoint", training_step=10), at(5), "v")
    lines = (tmp_path / "allocator_artifacts/2026-11-02/artifacts.jsonl").read_text().splitlines()
    assert [json.loads(line)["training_step"] for line in lines] == [10]


# -- pulled and ingested -----------------------------------------------------------------------------


def test_reports_are_pulled_and_ingested_into_raw_artifact_events(allocator, tmp_path):  # noqa: F811
    headers = {"Authorization": f"Bearer {ADMIN}"}
    job_id = requests.post(f"{allocator.url}/v1/jobs", json=TRAINING, headers=headers, timeout=10).json()["job_id"]
    for step in (100, 200):
        r = requests.post(f"{allocator.url}/v1/jobs/{job_id}/artifacts", headers=headers, timeout=10,
                          json={**CHECKPOINT, "training_step": step})
        assert r.status_code == 201, r.text
    wh = Warehouse(tmp_path / "home")
    pulled = AllocatorClient(allocator.url, BOT, page_size=1).pull(wh.landing, "artifacts")
    assert (pulled.records, pulled.days) == (2, ("2026-11-02",))
    ingested = ingest_partition(wh, "allocator_artifacts", dt.date(2026, 11, 2))
    assert (ingested.records_read, ingested.records_loaded) == (2, 2), ingested
    with wh.connect(read_only=True) as con:
        rows = con.execute("select event_id, job_id, attempt, kind, status, training_step, source, reported_by "
                           "from raw.artifact_events order by event_id").fetchall()
    assert rows == [("ar-000000001", job_id, 1, "checkpoint", "ok", 100, "allocator", "alice"),
                    ("ar-000000002", job_id, 1, "checkpoint", "ok", 200, "allocator", "alice")]
