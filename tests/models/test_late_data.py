"""Late data is right: on a small simulated pool (allocations crossing midnight, host counters, faults),
days ingested in order with a build after each, then day 2's allocator events and host telemetry
arriving after day 3 was built, then a build, give exactly what a full refresh of the same landing
files gives: every relation of marts and metrics, compared by scripts/compare_metrics.py. So do days
loaded newest first with a build after each, then a day re-ingested unchanged."""
from __future__ import annotations

import datetime as dt
import importlib.util
import shutil
from pathlib import Path

import pytest

from allocator.sim.simulator import simulate
from pipelines.build import build
from pipelines.ingest import ingest_days
from pipelines.paths import REPO_ROOT
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse

START = dt.date(2026, 11, 1)
DAYS = [START + dt.timedelta(days=n) for n in range(3)]
LATE = ("allocator_events", "node_exporter_parquet")  # day 2's, landed after day 3 was built


def _compare_homes():
    spec = importlib.util.spec_from_file_location("compare_metrics", REPO_ROOT / "scripts" / "compare_metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compare_homes


def _ingest(wh: Warehouse, sources: list[str], day: dt.date) -> None:
    for name in sources:
        ingest_days(wh, name, [day], validate=False)


def _full_refresh(wh: Warehouse, home: Path, sources: list[str]) -> Warehouse:
    """A fresh home with the same landing files, every day loaded, one full refresh."""
    full = Warehouse(home)
    shutil.copytree(wh.landing, full.landing)
    for day in DAYS:
        _ingest(full, sources, day)
    build(full, full_refresh=True)
    return full


def _assert_equal(wh: Warehouse, full: Warehouse) -> None:
    compared, problems = _compare_homes()(wh.home, full.home, ["marts", "metrics"])
    assert compared > 50
    assert problems == [], f"{len(problems)} differences:\n" + "\n".join(problems[:30])


@pytest.mark.slow
def test_a_late_file_then_a_build_equals_a_full_refresh(tmp_path: Path):
    wh = Warehouse(tmp_path / "incremental")
    simulate(wh.landing, days=len(DAYS), gpus=16, seed=7, start=START, fault_scale=50.0)
    sources = [name for name in SOURCES if (wh.landing / name).is_dir()]
    assert set(LATE) <= set(sources)
    for day in DAYS:
        _ingest(wh, [s for s in sources if day != DAYS[1] or s not in LATE], day)
        build(wh)
    _ingest(wh, list(LATE), DAYS[1])
    build(wh)

    full = _full_refresh(wh, tmp_path / "full", sources)

    with full.connect() as con:  # the late file matters beyond its own day
        crossing = con.execute(
            "select count(*) from marts.fct_allocations where cast(started_at as date) = ? "
            "and cast(ended_at as date) = ?", [DAYS[0], DAYS[1]]).fetchone()[0]
        first_rates = con.execute(
            "select count(cpu_busy_fraction) from marts.fct_host_activity where minute_at = ?",
            [dt.datetime.combine(DAYS[2], dt.time())]).fetchone()[0]
    assert crossing > 0, "an allocation from day 1 that ends in day 2's late events"
    assert first_rates > 0, "day 3's first host rates, from day 2's last samples"

    _assert_equal(wh, full)


@pytest.mark.slow
def test_days_newest_first_then_a_reingest_equal_a_full_refresh(tmp_path: Path):
    wh = Warehouse(tmp_path / "incremental")
    simulate(wh.landing, days=len(DAYS), gpus=16, seed=7, start=START, fault_scale=50.0)
    sources = [name for name in SOURCES if (wh.landing / name).is_dir()]
    for day in reversed(DAYS):
        _ingest(wh, sources, day)
        build(wh)
    _ingest(wh, sources, DAYS[1])  # re-ingested unchanged: the partition is replaced
    build(wh)
    _assert_equal(wh, _full_refresh(wh, tmp_path / "full", sources))
