"""The gpu-health drain loop on the real Slurm: hardware faults on the cluster's node -> finding ->
plan -> outbox -> SlurmEnforcer. Shadow sends nothing; enforced, `scontrol show node` shows DRAIN
(once, however often planned); healthy for 24 h with telemetry, the undrain resumes it."""
from __future__ import annotations

import dataclasses
import datetime as dt

import polars as pl
import pytest

from pipelines.contracts import DecisionStatus, Mode, PolicyKind, StepAction
from pipelines.governance.outbox import Outbox
from pipelines.policies.catalog import load_catalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.inputs import PolicyInputs
from pipelines.policies.planner import plan
from tests.slurm.conftest import NODE, node_state

pytestmark = pytest.mark.slow
HOUR = dt.timedelta(hours=1)


def catalog(mode: Mode, version: str):
    cat = load_catalog()
    return dataclasses.replace(cat, policies={"gpu-health": dataclasses.replace(
        cat.policies["gpu-health"], mode=mode, version=version)})


def health(t0: dt.datetime, until: dt.datetime) -> PolicyInputs:
    """XID 79 on GPU 0 of the node 2 h and 1 h before t0, then hourly telemetry until `until`."""
    rows = [{"host": NODE, "gpu": 0, "minute_at": t0 - h * HOUR, "signal": "xid", "xid": 79,
             "is_hardware_fault": True, "engine": "slurm"} for h in (2, 1)]
    t = t0
    while t < until:
        rows.append({"host": NODE, "gpu": 0, "minute_at": t, "signal": "telemetry", "is_hardware_fault": False,
                     "engine": "slurm"})
        t += HOUR
    return PolicyInputs(allocations=None, minutes=None, health=pl.from_dicts(rows, infer_schema_length=None))


def test_drain_through_the_outbox_then_undrain(cluster, enforcer, tmp_path):
    t0 = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    outbox = Outbox(tmp_path / "outbox.db", tmp_path / "landing")

    def step(cat, now):
        found = evaluate(health(t0, now), cat, now, kinds=[PolicyKind.GPU_HEALTH])
        recorded = outbox.record(plan(found, cat, outbox, now), now)
        return recorded, outbox.deliver({"slurm": enforcer}, now)

    try:
        [shadow], delivery = step(catalog(Mode.SHADOW, "1"), t0)
        assert (shadow.status, shadow.engine, shadow.job_id) == (DecisionStatus.SHADOW, "slurm", f"{NODE}/0")
        assert delivery.sent == 0 and "DRAIN" not in node_state()[0]

        enforce = catalog(Mode.ENFORCE, "2")
        [drain], delivery = step(enforce, t0)
        assert drain.action == StepAction.DRAIN and delivery.answered == {"applied": 1}, delivery.summary()
        state, reason = node_state()
        assert "DRAIN" in state.split("+") and reason.startswith("gpupool: ")
        again, delivery = step(enforce, t0 + dt.timedelta(minutes=5))
        assert again == [] and delivery.sent == 0  # the same plan twice: sent once

        [undrain], delivery = step(enforce, t0 + 24 * HOUR)
        assert undrain.action == StepAction.UNDRAIN and delivery.answered == {"applied": 1}, delivery.summary()
        assert "DRAIN" not in node_state()[0]
    finally:
        outbox.close()
