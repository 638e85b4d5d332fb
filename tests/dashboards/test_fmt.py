"""Values as the dashboards write them (dashboards/fmt.py): by unit, in English and Chinese, never "None"."""
from __future__ import annotations

import datetime as dt

import pytest

from dashboards.fmt import count, duration, headline, quantity, unit_name, unit_of, value


@pytest.mark.parametrize(("seconds", "en", "zh"), [
    (0, "0 s", "0秒"), (45, "45 s", "45秒"), (453.67, "7 min 34 s", "7分34秒"), (600, "10 min", "10分"),
    (7500, "2 h 5 min", "2小时5分"), (7200, "2 h", "2小时"), (3 * 86400 + 4 * 3600 + 59, "3 d 4 h", "3天4小时"),
    (-90, "-1 min 30 s", "-1分30秒"),
])
def test_durations(seconds, en, zh):
    assert duration(seconds, "en") == en and duration(seconds, "zh") == zh


@pytest.mark.parametrize(("v", "unit", "en", "zh"), [
    (453.6733387790009, "seconds", "7 min 34 s", "7分34秒"),
    (12.5, "minutes", "12 min 30 s", "12分30秒"),
    (1.5, "hours", "1 h 30 min", "1小时30分"),
    (30.0, "days", "30 d", "30天"),
    (12.345, "percent", "12.3 %", "12.3%"),
    (0.5389, "fraction", "53.9 %", "53.9%"),
    (67211.44, "gpu_hours", "67,211.4 GPU-h", "67,211.4 GPU小时"),
    (1234.5, "usd", "$1,234.50", "$1,234.50"),
    (-12.0, "usd", "-$12.00", "-$12.00"),
    (1536 * 2**20, "bytes", "1.5 GiB", "1.5 GiB"),
    (40960, "mib", "40.0 GiB", "40.0 GiB"),
    (12_300_000, "bytes per second", "12.3 MB/s", "12.3 MB/s"),
    (24, "gpus", "24", "24"), (5.667, "gpus", "5.7", "5.7"), (1_611_677, "records", "1,611,677", "1,611,677"),
    (9.968014, None, "9.97", "9.97"), (0.0042, None, "0.0042", "0.0042"),
    (True, "flag", "✓", "✓"), (False, "flag", "–", "–"), (True, None, "✓", "✓"),
    (None, "percent", "–", "–"), (None, None, "–", "–"), (float("nan"), "gpu_hours", "–", "–"),
    (dt.datetime(2026, 11, 2, 14, 3, 9), "timestamp", "2026-11-02 14:03", "2026-11-02 14:03"),
    (dt.datetime(2026, 11, 2, 14, 3, 9), "timestamp_s", "2026-11-02 14:03:09", "2026-11-02 14:03:09"),
    (dt.date(2026, 11, 1), "month", "2026-11", "2026-11"), (dt.date(2026, 11, 2), None, "2026-11-02", "2026-11-02"),
    (["a", "b"], None, "a, b", "a, b"), ([], None, "–", "–"), ("text", None, "text", "text"),
])
def test_values_by_unit(v, unit, en, zh):
    assert value(v, unit, "en") == en and value(v, unit, "zh") == zh


def test_units_from_the_catalog_else_the_name_else_the_type():
    assert unit_of("anything", "gpu_hours") == "gpu_hours"
    assert unit_of("replay_seconds") == unit_of("run_time_s") == "seconds"
    assert unit_of("queue_wait_p95_min") == "minutes" and unit_of("checkpoint_age_h") == "hours"
    assert unit_of("quota_used_pct") == "percent" and unit_of("total_cost_usd") == "usd"
    assert unit_of("idle_gpu_hours") == "gpu_hours" and unit_of("last_fb_used_mib") == "mib"
    assert unit_of("is_starved") == unit_of("has_checkpoint") == unit_of("passed", dtype="Boolean") == "flag"
    assert unit_of("held_since_at") == "timestamp" and unit_of("month") == "month"
    assert unit_of("day", dtype="Date") == "date" and unit_of("tenant", dtype="String") is None


def test_headline_figures_are_short_and_keep_their_unit_for_the_help():
    assert headline(67211.44, "gpu_hours") == "67,211"  # the unit is in the tile's help, not its figure
    assert headline(80.66, "gpu_hours") == "80.7"
    assert headline(9562.4, "usd") == "$9,562" and headline(12.5, "usd") == "$12.50"
    assert headline(10_553, "seconds") == "2 h 55 min" and headline(33.66, "percent", "zh") == "33.7%"
    assert headline(None, "percent") == "–"
    assert unit_name("gpu_hours") == "GPU-hours" and unit_name("gpu_hours", "zh") == "GPU小时"
    assert unit_name("flag") is None and unit_name(None) is None


def test_plurals_in_english_and_none_in_chinese():
    assert quantity(1, "nodes") == "1 node" and quantity(2, "nodes") == "2 nodes"
    assert quantity(1, "quota GPUs") == "1 quota GPU" and quantity(3, "GPUs") == "3 GPUs"
    assert quantity(1, "nodes", "zh") == quantity(1.0, "nodes", "zh") == "1 个节点"
    assert quantity(2, "nodes", "zh") == "2 个节点"
    assert quantity(1, "furlongs") == "1 furlongs"  # an unknown unit as it is
    assert count(1, "node") == "1 node" and count(2, "node") == "2 nodes" and count(0, "GPU") == "0 GPUs"
    assert count(2, "node", "zh", "个节点") == "2 个节点"
