"""The pipeline's own metrics (pipelines/selfmetrics.py), collected from a home: ingest freshness and
records per source, the release, the outbox's backlog, drains in force and the reclaim tick; and a
home with nothing yet, which still answers."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pipelines.clock import utc_naive
from pipelines.governance.outbox import Outbox
from pipelines.policies.planner import plan
from pipelines.selfmetrics import pipeline_registry, unix
from pipelines.sources.base import empty_quarantine
from pipelines.warehouse import Warehouse
from tests.governance.conftest import T0, catalog, finding, findings

DAY = dt.date(2026, 11, 2)


def scrape(warehouse: Warehouse, outbox: Path, now: dt.datetime) -> dict[tuple[str, tuple], float]:
    text = generate_latest(pipeline_registry(warehouse, outbox, clock=lambda: now)).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def ingest_run(warehouse: Warehouse, source: str, read: int, loaded: int, quarantined: int) -> None:
    warehouse.replace_partition(source, DAY, {}, empty_quarantine(), files_read=1, records_read=read,
                                records_loaded=loaded, records_quarantined=quarantined)


def test_a_home_with_nothing_yet_answers_with_its_parts_down(tmp_path: Path) -> None:
    samples = scrape(Warehouse(tmp_path / "home"), tmp_path / "home" / "governance" / "outbox.db", utc_naive())
    assert samples == {
        ("gpupool_exporter_part_up", (("part", "warehouse"),)): 0,
        ("gpupool_exporter_part_up", (("part", "outbox"),)): 0,
    }


def test_ingest_freshness_and_records_per_source_and_the_release(tmp_path: Path) -> None:
    warehouse = Warehouse(tmp_path / "home")
    ingest_run(warehouse, "allocator_events", read=10, loaded=8, quarantined=2)
    ingest_run(warehouse, "allocator_events", read=5, loaded=5, quarantined=0)
    ingest_run(warehouse, "k8s_audit", read=3, loaded=0, quarantined=3)  # loaded nothing: no lag yet
    now = utc_naive() + dt.timedelta(hours=2)
    samples = scrape(warehouse, tmp_path / "no-outbox.db", now)

    events = (("source", "allocator_events"),)
    assert samples[("gpupool_ingest_records_loaded_total", events)] == 13
    assert samples[("gpupool_ingest_records_quarantined_total", events)] == 2
    assert samples[("gpupool_ingest_records_quarantined_total", (("source", "k8s_audit"),))] == 3
    last_run = samples[("gpupool_ingest_last_run_timestamp_seconds", events)]
    assert samples[("gpupool_ingest_lag_seconds", events)] == pytest.approx(unix(now) - last_run)
    assert ("gpupool_ingest_lag_seconds", (("source", "k8s_audit"),)) not in samples
    assert samples[("gpupool_release_id", ())] == warehouse.current_release()
    assert 2 * 3600 <= samples[("gpupool_release_age_seconds", ())] < 3 * 3600
    assert samples[("gpupool_exporter_part_up", (("part", "warehouse"),))] == 1
    assert samples[("gpupool_exporter_part_up", (("part", "outbox"),))] == 0


def accept_drain(outbox: Outbox, target: str, undrain_outcome: str | None) -> None:
    """A gpu_health finding on `target` whose drain the engine applied, then its undrain's answer (if any)."""
    rows = [("drain", 0, "applied")] + ([("undrain", 1, undrain_outcome)] if undrain_outcome else [])
    for action, index, outcome in rows:
        outbox._db.execute(
            "insert into decisions (idempotency_key, finding_id, job_id, attempt, step_index, action, engine, tenant, "
            "mode, status, decided_at, planned_json, outcome) values (?, ?, ?, 0, ?, ?, 'allocator', '', 'enforce', "
            "'answered', ?, '{}', ?)",
            [f"{target}:{action}", f"health:{target}", target, index, action, T0.isoformat(sep=" "), outcome])


def test_the_outbox_backlog_drains_in_force_and_the_ticks(tmp_path: Path) -> None:
    path = tmp_path / "outbox.db"
    outbox = Outbox(path, tmp_path / "landing")
    try:
        outbox.record(plan(findings(finding("j-1"), finding("j-2")), catalog(), outbox, T0), T0)
        accept_drain(outbox, "node-07", undrain_outcome=None)
        accept_drain(outbox, "node-08/3", undrain_outcome=None)
        accept_drain(outbox, "node-09", undrain_outcome="applied")  # undrained again
        accept_drain(outbox, "node-10", undrain_outcome="refused")  # the undrain did not take
        outbox.record_tick(T0, 1.5, [])
        outbox.record_tick(T0 + dt.timedelta(minutes=1), 2.5, ["pull events: ConnectionError"])
        outbox.record_tick(T0 + dt.timedelta(minutes=2), 0.5, ["deliver: timeout"])
    finally:
        outbox.close()
    samples = scrape(Warehouse(tmp_path / "home"), path, T0 + dt.timedelta(minutes=10))

    assert samples[("gpupool_outbox_queued_actions", ())] == 2
    assert samples[("gpupool_outbox_oldest_queued_age_seconds", ())] == 600
    assert samples[("gpupool_drains_in_force", (("target_kind", "node"),))] == 2
    assert samples[("gpupool_drains_in_force", (("target_kind", "gpu"),))] == 1
    assert samples[("gpupool_reclaim_ticks_total", ())] == 3
    assert samples[("gpupool_reclaim_tick_failures_total", ())] == 2
    assert samples[("gpupool_reclaim_tick_consecutive_failures", ())] == 2
    assert samples[("gpupool_reclaim_tick_duration_seconds", ())] == 0.5
    assert samples[("gpupool_reclaim_tick_last_run_timestamp_seconds", ())] == unix(T0 + dt.timedelta(minutes=2))
    assert samples[("gpupool_reclaim_tick_last_success_timestamp_seconds", ())] == unix(T0)
    assert samples[("gpupool_exporter_part_up", (("part", "outbox"),))] == 1


def test_an_outbox_without_ticks_yet_reports_its_backlog_only(tmp_path: Path) -> None:
    Outbox(tmp_path / "outbox.db", tmp_path / "landing").close()
    samples = scrape(Warehouse(tmp_path / "home"), tmp_path / "outbox.db", T0)
    assert samples[("gpupool_outbox_queued_actions", ())] == 0
    assert samples[("gpupool_outbox_oldest_queued_age_seconds", ())] == 0
    assert not any(name.startswith("gpupool_reclaim_tick") for name, _ in samples)


def test_a_warehouse_that_will_not_open_is_reported_not_raised(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "warehouse.duckdb").write_bytes(b"not a database")
    samples = scrape(Warehouse(home), tmp_path / "outbox.db", utc_naive())
    assert samples[("gpupool_exporter_part_up", (("part", "warehouse"),))] == 0
