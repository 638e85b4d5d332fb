"""Every page says what it reads: the data's end (the latest telemetry in the release, from
metrics.gpu_status), the release and when it was published; and warns when the data are stale."""
from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from dashboards import data
from dashboards.data import AsOf
from pipelines.lake.reader import search_config
from tests.dashboards.conftest import errors, signed_in

NOW = dt.datetime(2026, 12, 3, 12, 0)


@pytest.mark.parametrize(("telemetry_at", "stale"), [
    (NOW - data.STALE_AFTER, None),  # exactly the limit: still fresh
    (NOW - data.STALE_AFTER - dt.timedelta(seconds=1), data.STALE_AFTER + dt.timedelta(seconds=1)),
    (NOW - dt.timedelta(minutes=1), None),
    (None, dt.timedelta(hours=2)),  # no telemetry at all is stale, aged from the publish
])
def test_stale_past_the_limit(telemetry_at, stale):
    seen = AsOf(release=7, published_at=NOW - dt.timedelta(hours=2), telemetry_at=telemetry_at)
    assert seen.stale_by(NOW) == stale


def published(home) -> tuple[int, dt.datetime]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True, config=search_config(home)) as con:
        (release,) = con.execute("select release_id from lake.release").fetchone()
        (end,) = con.execute("select max(last_telemetry_at) from metrics.gpu_status").fetchone()
    return release, end


@pytest.mark.parametrize("page", ["pool", "quality", "catalog"])
def test_every_page_shows_the_data_as_of_and_that_the_demo_month_is_stale(dashboard_env, page):
    release, end = published(dashboard_env)
    at = signed_in("vic", page)
    assert not errors(at)
    captions = [c.value for c in at.sidebar.caption]
    assert any(f"Data as of {end:%Y-%m-%d %H:%M} UTC · release {release}," in c for c in captions), captions
    (warning,) = [w.value for w in at.sidebar.warning]
    assert f"The data are {(dt.datetime.now(dt.UTC).replace(tzinfo=None) - end).days} d " in warning


def test_fresh_data_carry_no_warning_and_chinese_says_it_too(dashboard_env, monkeypatch):
    monkeypatch.setattr(data, "STALE_AFTER", dt.timedelta(days=3650))
    release, end = published(dashboard_env)
    at = signed_in("ops", "pool", lang="zh")
    assert not errors(at) and not at.sidebar.warning
    assert any(f"数据截至 {end:%Y-%m-%d %H:%M} UTC · 发布版本 {release}" in c.value for c in at.sidebar.caption)
