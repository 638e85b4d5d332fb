"""The pipeline's policies acting on the simulated pool: what they do lands in the engine's own
records, each action takes effect once, and shadow mode changes nothing."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest

from allocator.sim.simulator import simulate
from pipelines.contracts import Mode
from pipelines.governance.simulated import SimulatedGovernance, decision_log, difference
from pipelines.policies.catalog import load_catalog
from pipelines.sources.allocator_log import parse_audit_log, parse_event_log
from pipelines.sources.dcgm_parquet import parse_dcgm_parquet

START = dt.date(2026, 11, 2)
RUN = {"days": 2, "gpus": 48, "seed": 7, "start": START}


def _table(out: Path, pattern: str, parse, table: str) -> pl.DataFrame:
    frames = []
    for path in sorted(out.glob(pattern)):
        parsed = parse(path.read_bytes(), str(path))
        assert parsed.quarantine.height == 0, parsed.quarantine
        frames.append(parsed.tables[table])
    return pl.concat(frames)


def _decisions(out: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob("governance_actions/*/*.jsonl"))
            for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def enforced(tmp_path_factory):
    out = tmp_path_factory.mktemp("enforced")
    governance = SimulatedGovernance(load_catalog(), out / ".state")
    report = simulate(out, governance=governance, **RUN)
    return out, report, governance


def test_reclaims_follow_a_reminder_and_really_end_the_work(enforced):
    out, _, _ = enforced
    audits = _table(out, "allocator_audit/*/audit.jsonl", parse_audit_log, "audit_events")
    events = _table(out, "allocator_events/*/events.jsonl", parse_event_log, "job_events")
    applied = audits.filter(pl.col("action") == "enforcement.reclaim", pl.col("decision") == "applied")
    assert applied.height >= 3
    reminded = audits.filter(pl.col("action") == "enforcement.remind", pl.col("decision") == "applied")
    first_reminder = dict(reminded.group_by("object_name").agg(pl.col("occurred_at").min()).iter_rows())
    samples = pl.concat([parse_dcgm_parquet(p.read_bytes(), str(p)).tables["dcgm_samples"]
                         for p in sorted(out.glob("dcgm_parquet/*/samples.parquet"))])
    finishes = events.filter(pl.col("event_type") == "finish")
    for job_id, at in applied.select("object_name", "occurred_at").iter_rows():
        # the grace: the shipped catalog waits at least 15 minutes after the reminder
        assert at - first_reminder[job_id] >= dt.timedelta(minutes=15), job_id
        end = finishes.filter(pl.col("job_id") == job_id).row(0, named=True)
        assert end["occurred_at"] == at and end["state"] == "CANCELLED" and end["reason"].startswith("reclaimed")
        last = samples.filter(pl.col("hpc_job") == job_id).get_column("sampled_at").max()
        assert last is not None and last <= at, job_id


def test_every_action_takes_effect_once_even_when_its_answer_is_lost(enforced):
    out, _, _ = enforced
    audits = _table(out, "allocator_audit/*/audit.jsonl", parse_audit_log, "audit_events")
    enforcement = audits.filter(pl.col("action").str.starts_with("enforcement."), pl.col("actor") == "gpupool-governance")
    applied = enforcement.filter(pl.col("decision") == "applied")
    assert applied.get_column("idempotency_key").is_unique().all()
    repeats = enforcement.filter(pl.col("decision") == "already_done")
    assert repeats.height >= 1, "no answer was lost: the retry path was not exercised"
    assert set(repeats.get_column("idempotency_key")) <= set(applied.get_column("idempotency_key"))
    # the decision log: one decision per key, and the answer it finally got
    lines = _decisions(out)
    decided = [line["idempotency_key"] for line in lines if line["record"] == "decision"]
    assert len(decided) == len(set(decided))
    answered = {line["idempotency_key"] for line in lines if line["record"] == "answer"}
    assert set(applied.get_column("idempotency_key")) <= answered


def test_shadow_mode_records_decisions_and_changes_nothing(tmp_path, enforced):
    _, enforced_report, _ = enforced
    governance = SimulatedGovernance(load_catalog().with_mode(Mode.SHADOW), tmp_path / ".state")
    report = simulate(tmp_path, governance=governance, **RUN)
    off = simulate(tmp_path / "off", **RUN)
    assert report.audit_kinds == off.audit_kinds  # the engine heard nothing from the policies
    assert report.final_states == off.final_states and report.idle_gpu_hours == off.idle_gpu_hours
    statuses = {line["status"] for line in _decisions(tmp_path) if line["record"] == "decision"}
    assert "shadow" in statuses and "queued" not in statuses
    # acting recovers idle time that shadow mode only records
    assert enforced_report.idle_gpu_hours < report.idle_gpu_hours


def test_looks_evaluated_ahead_decide_what_looks_evaluated_at_their_minute_decide(tmp_path, enforced):
    out, report, ahead = enforced
    governance = SimulatedGovernance(load_catalog(), tmp_path / ".state", ahead_by=dt.timedelta(0))
    assert simulate(tmp_path, governance=governance, **RUN).final_states == report.final_states
    assert ahead.reused > 0 and ahead.passes < governance.passes and governance.reused == 0
    assert ahead.checks == governance.checks and ahead.decisions == governance.decisions
    assert difference(decision_log(out), decision_log(tmp_path)) is None
