"""Admission: every rule a request can break is refused with an AdmissionError naming it."""
from __future__ import annotations

import dataclasses

import pytest

from allocator.model import AdmissionError, JobSpec, JobState, ShareMode, Template
from tests.allocator.conftest import T0, at, experiment, inference, make_engine, training

RESERVATION = {"name": "paper", "tenant": "vision", "hosts": ["h-03"], "start": "2026-11-02T10:00:00Z",
               "end": "2026-11-02T14:00:00Z"}


def interactive(**fields: object) -> JobSpec:
    return JobSpec("vision", "vision-train", "vision-dan", Template.INTERACTIVE, "L40S", 1, ShareMode.TIMESLICE,
                   **fields)


CASES = [
    ("request.tenant", dataclasses.replace(training(), tenant="marketing")),
    ("queue.unknown", training(queue="nope")),
    ("queue.tenant", training("nlp", queue="vision-train")),
    ("queue.template", dataclasses.replace(inference(), queue="vision-train")),
    ("pool.gpu_model", training(model="B200")),
    ("queue.gpu_model", training("nlp", model="L40S")),
    ("request.gpus", training(gpus=0)),
    ("share_mode.mig_profile", training(model="A100", share_mode=ShareMode.MIG, mig_profile="5g.50gb")),
    ("share_mode.mig_profile", training(model="A100", share_mode=ShareMode.MIG, mig_profile="4g.40gb")),
    ("share_mode.mig_profile", training(model="A100", mig_profile="1g.10gb")),
    ("pool.share_mode", training(share_mode=ShareMode.TIMESLICE)),
    ("queue.max_gpus_per_request", training(gpus=12)),
    ("template.training.expected_runtime_s", training(expected_runtime_s=None)),
    ("template.training.checkpoint_policy", training(checkpoint_policy=None)),
    ("template.training.checkpoint_policy", training(checkpoint_policy="none")),
    ("template.inference.min_replicas", inference(min_replicas=0)),
    ("template.inference.rollback", inference(rollback=" ")),
    ("template.experiment.queue", experiment("vision", queue="vision-train")),
    ("template.interactive.idle_reminder_s", interactive(idle_reminder_s=0)),
    ("request.time_limit_s", training(time_limit_s=0)),
    ("queue.max_runtime_s", training(time_limit_s=100_000)),
    ("queue.max_runtime_s", training(expected_runtime_s=90_000)),
    ("reservation.unknown", experiment("vision", reservation="nope")),
    ("reservation.tenant", experiment("research", reservation="paper")),
    ("reservation.gpu_model", experiment("vision", model="A100", reservation="paper")),
    ("reservation.capacity", experiment("vision", gpus=8, reservation="paper")),
    ("request.whole_nodes", training(gpus=6)),
    ("pool.capacity", experiment(model="A100", gpus=5, share_mode=ShareMode.MIG, mig_profile="1g.10gb")),
]


@pytest.mark.parametrize(("rule", "spec"), CASES, ids=[f"{rule}-{i}" for i, (rule, _) in enumerate(CASES)])
def test_a_request_that_breaks_a_rule_is_refused_with_the_rule_name(rule: str, spec: JobSpec) -> None:
    engine, sink = make_engine(reservations=[RESERVATION])
    with pytest.raises(AdmissionError) as error:
        engine.submit(spec, T0, "someone")
    assert error.value.rule == rule, error.value
    assert str(error.value).startswith(f"{rule}: ")
    assert engine.admission_error(spec, T0).rule == rule
    assert sink.events == [] and engine.jobs == {}


def test_every_rule_of_the_admission_docstring_is_exercised() -> None:
    import allocator.admission as module

    documented = {part.strip("` ") for line in module.__doc__.splitlines() if line.startswith("| `")
                  for part in line.split("|")[1].split("/")}
    documented = {d if d.startswith(("request.", "queue.", "pool.", "share_mode.", "template.", "reservation."))
                  else f"reservation{d}" for d in documented}
    tested = {rule for rule, _ in CASES} | {"request.job_id", "request.template", "reservation.ended"}
    assert documented == tested


def test_a_reservation_that_is_over_refuses_new_work() -> None:
    engine, _ = make_engine(reservations=[RESERVATION])
    with pytest.raises(AdmissionError, match="reservation.ended"):
        engine.submit(experiment("vision", reservation="paper"), at(6 * 60), "vision-bob")


def test_a_job_id_is_taken_once() -> None:
    engine, _ = make_engine()
    engine.submit(training(), T0, "vision-alice", job_id="j-1")
    with pytest.raises(AdmissionError, match="request.job_id"):
        engine.submit(training(), T0, "vision-alice", job_id="j-1")


def test_an_unknown_template_value_is_refused() -> None:
    engine, _ = make_engine()
    with pytest.raises(AdmissionError, match="request.template"):
        engine.submit(dataclasses.replace(training(), template="batch"), T0, "x")


def test_an_accepted_request_is_pending_with_a_submit_event() -> None:
    engine, sink = make_engine()
    spec = training(gpus=2, time_limit_s=7200, job_name="resnet")
    job = engine.submit(spec, T0, "vision-alice")
    assert job.job_id == "j-000001" and job.state == JobState.PENDING and job.priority == 50
    assert sink.events == [{
        "schema": "gpupool.event/v1", "event_id": "ev-000000001", "ts": "2026-11-02T08:00:00Z", "type": "submit",
        "job_id": "j-000001", "attempt": 1, "tenant": "vision", "queue": "vision-train", "user": "vision-alice",
        "job_name": "resnet", "template": "training", "gpu_model": "H100", "gpus": 2, "share_mode": "whole",
        "priority": 50, "spec": {"expected_runtime_s": 3600, "checkpoint_policy": "hourly", "time_limit_s": 7200},
    }]


def test_shared_queues_take_every_tenant() -> None:
    engine, _ = make_engine()
    engine.submit(inference("nlp"), T0, "nlp-carol")
    engine.submit(experiment("vision"), T0, "vision-bob")
    assert len(engine.jobs) == 2
