"""The Queues and waiting page: wait p50/p95 per queue, pending demand by GPU model, waiting by
cause, preemptions and requeues; for an operator and a tenant member, with URL filters and in Chinese."""
from __future__ import annotations

import datetime as dt

from dashboards.i18n import STRINGS
from tests.dashboards.conftest import errors, frames, shown_day, signed_in


def shown(at, column: str) -> set:
    seen: set = set()
    for df in frames(at):
        if column in df.columns:
            seen |= set(df[column].dropna().unique()) - {"–"}
    return seen


def subheaders(at) -> list[str]:
    return [s.value for s in at.subheader]


def test_operator_sees_every_queue(dashboard_env):
    at = signed_in("ops", "queues")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_queues"]["en"]
    assert len(at.metric) == 6  # wait p50, wait p95, jobs waiting, cancelled while queued, preemptions, requeues
    for key in ("wait_per_queue", "pending_by_model", "wait_by_cause", "preemptions_requeues"):
        assert STRINGS[key]["en"] in subheaders(at)
    assert len(at.get("vega_lite_chart")) >= 2  # waits per queue (p95 and p50 tabs) at least
    assert len(shown(at, "tenant")) > 1
    assert len(shown(at, "queue")) > 1
    # the waits are durations ("7 min 33 s", "2 h 5 min"), their unit in the help
    assert all(m.value == "–" or m.value.endswith((" s", " min", " h")) for m in at.metric[:2])
    assert all("Unit: time" in m.help for m in at.metric[:2])


def test_tenant_member_sees_only_their_queues(dashboard_env):
    at = signed_in("vic", "queues", tenant="speech")  # the URL cannot widen a member's scope
    assert errors(at) == []
    assert shown(at, "tenant") == {"vision"}
    assert len(at.metric) == 6  # the pool's wait percentiles and waiting work are pool-level figures


def test_filters_in_the_url(dashboard_env):
    at = signed_in("ops", "queues", queue="vision-train", model="H100", **{"from": "2026-11-02", "to": "2026-11-02"})
    assert errors(at) == []
    assert shown(at, "queue") <= {"vision-train"}
    assert shown(at, "gpu_model") <= {"H100"}
    for df in frames(at):
        if "day" in df.columns and len(df):
            assert {shown_day(d) for d in df["day"]} <= {dt.date(2026, 11, 2)}


def test_chinese(dashboard_env):
    at = signed_in("ops", "queues", lang="zh")
    assert errors(at) == []
    assert at.title[0].value == STRINGS["page_queues"]["zh"]
    assert STRINGS["wait_by_cause"]["zh"] in subheaders(at)
