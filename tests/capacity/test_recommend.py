"""Capacity rules on a day whose answer is known by construction: the H100 node is full and work
waits for it (add a node), three A100 nodes peak at one GPU (remove one), vision's A100 quota is
full while nlp's sits idle (move quota). Every figure comes from the metric views."""
from __future__ import annotations

import copy
import datetime as dt
import json

import pytest

from pipelines.capacity.recommend import load_rules, recommend, whatif_change
from pipelines.capacity.store import write_month
from pipelines.contracts import RECOMMENDATIONS_TABLE
from tests.models.builders import at, build, event, gpu, load, placement, quota, submit

pytestmark = pytest.mark.slow  # dbt builds of constructed warehouses

MONTH = dt.date(2026, 11, 1)


def job(job_id, start, end, gpus, submitted=None, **fields):
    events = [submit(job_id, submitted or start, gpus=len(gpus), **fields)]
    placements = []
    if start is not None:
        events += [event(job_id, "admit", start), event(job_id, "start", start)]
        placements = [placement(job_id, 1, host, i, start) for host, i in gpus]
    if end is not None:
        events.append(event(job_id, "finish", end, state="COMPLETED"))
    return events, placements


@pytest.fixture
def con(warehouse):
    day_end = at("23:59")
    h100 = {"gpu_model": "H100"}
    jobs = [
        # the H100 node is full all day; a 2-GPU job waits from 06:00 and never starts
        job("h-full", at("00:00"), day_end, [("h1", i) for i in range(8)], **h100),
        job("h-wait", None, None, [("h1", 0), ("h1", 1)], submitted=at("06:00"), **h100),
        # vision holds its 2 A100 of quota all day; a third vision job waits on quota 08:00-12:00
        job("v1", at("00:00"), day_end, [("a1", 0)]),
        job("v2", at("00:00"), day_end, [("a1", 1)]),
        job("v3", at("12:00"), at("13:00"), [("a1", 2)], submitted=at("08:00")),
    ]
    load(
        warehouse,
        gpu_inventory=[gpu("h1", i, "H100") for i in range(8)]
        + [gpu(host, i, "A100") for host in ("a1", "a2", "a3") for i in range(8)],
        queue_quotas=[quota("vision-train", "vision", "H100", 8), quota("vision-train", "vision", "A100", 2),
                      quota("nlp-train", "nlp", "A100", 8)],
        job_events=[e for events, _ in jobs for e in events],
        job_gpus=[p for _, placements in jobs for p in placements],
    )
    return build(warehouse)


@pytest.fixture
def rules():
    lenient = copy.deepcopy(load_rules())
    lenient["move_quota"]["min_receiver_quota_bound_gpu_hours"] = 1
    return lenient


def by_kind(found):
    return {(r.kind, r.target): r for r in found}


def test_a_full_model_with_work_waiting_gets_a_node(con, rules):
    found = by_kind(recommend(con, MONTH, rules))
    add = found[("add_nodes", "H100")]
    assert add.quantity == 1 and add.unit == "nodes" and add.wait_cause == "capacity_bound"
    # 2 GPUs x 18 h waited (06:00 to the data's end) of 8 x 24 GPU-hours of capacity
    assert add.evidence["capacity_bound_gpu_hours"] == pytest.approx(2 * (at("23:59") - at("06:00")).seconds / 3600,
                                                                     rel=0.02)
    assert add.evidence["p95_allocated_gpus"] == pytest.approx(8)
    assert "Add 1 node of H100 (8 GPUs)" in add.recommendation and "增加 1 台 H100" in add.recommendation_zh
    assert whatif_change(con, add).add_nodes == {"H100": 1}


def test_a_model_whose_peak_leaves_a_node_free_gets_fewer_nodes(con, rules):
    found = by_kind(recommend(con, MONTH, rules))
    remove = found[("remove_nodes", "A100")]
    # 24 A100, peak 3 held, 8 kept above the peak: 13 spare -> one whole node
    assert remove.quantity == 1 and remove.evidence["peak_allocated_gpus"] == pytest.approx(3)
    assert ("remove_nodes", "H100") not in found
    assert whatif_change(con, remove).add_nodes == {"A100": -1}


def test_quota_moves_from_an_idle_donor_to_a_starved_tenant(con, rules):
    found = by_kind(recommend(con, MONTH, rules))
    move = found[("move_quota", "nlp->vision:A100")]
    assert move.tenant == "vision" and move.wait_cause == "quota_bound" and move.quantity >= 1
    change = whatif_change(con, move)
    assert change.quotas == {("nlp-train", "A100"): 8 - move.quantity, ("vision-train", "A100"): 2 + move.quantity}
    strict = by_kind(recommend(con, MONTH, load_rules()))  # 4 GPU-hours of quota waits: under the shipped 20
    assert ("move_quota", "nlp->vision:A100") not in strict


def test_recommendations_are_ranked_stored_and_replaced_per_month(con, rules, warehouse):
    found = recommend(con, MONTH, rules)
    assert [r.impact_gpu_hours for r in found] == sorted((r.impact_gpu_hours for r in found), reverse=True)
    con.close()
    with warehouse.writer() as w:
        assert write_month(w, MONTH, found, "test", dt.datetime(2026, 12, 1)) == len(found)
        assert write_month(w, MONTH, found[:1], "test", dt.datetime(2026, 12, 2)) == 1
    with warehouse.connect(read_only=True) as r:
        stored = r.execute(f"select rank, kind, target, evidence_json, confidence from {RECOMMENDATIONS_TABLE}").fetchall()
        view = r.execute("select count(*) from metrics.capacity_recommendations").fetchone()[0]
    assert len(stored) == 1 and view == 1
    assert stored[0][:3] == (1, found[0].kind, found[0].target)
    assert json.loads(stored[0][3])["views"] and stored[0][4] in {"high", "medium", "low"}
