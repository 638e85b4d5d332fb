"""One pass over looks taken at different moments (each attempt's evaluated_at) finds what each look
finds on its own, evaluated at its moment, also when it looks at one attempt at several moments (each
look under its alias): the simulator batches its looks on this."""
from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.contracts import PolicyKind
from pipelines.governance.simulated import alias, aliased_ids, difference, unaliased_texts
from pipelines.policies.catalog import load_catalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.inputs import InputError, PolicyInputs
from pipelines.policies.model import LIVE_KINDS
from tests.policies.frames import T0, activity, alloc, at, idle, inputs

CATALOG = load_catalog()
# a minute's activity: busy, idle, a short spike, or no telemetry
LEVELS = st.sampled_from([0.9, 0.0, 0.0, 0.0, 0.01, 0.3, None])
SEGMENT = st.tuples(LEVELS, st.integers(1, 90))


@st.composite
def looks(draw) -> list[dict]:
    """Attempts with 1 or 2 GPUs, activity over 4 hours in runs, progress signals, and a moment each is looked at."""
    out = []
    for n in range(draw(st.integers(1, 4))):
        template = draw(st.sampled_from(["training", "interactive", "experiment", "inference"]))
        started = draw(st.integers(0, 30))
        gpus = draw(st.integers(1, 2))
        fields = {"expected_runtime_s": draw(st.sampled_from([None, 1800, 5400])),
                  "checkpoint_policy": draw(st.sampled_from([None, "every 30 min", "hourly"])),
                  "idle_reminder_s": draw(st.sampled_from([None, 1200])) if template == "interactive" else None}
        hangs = draw(st.booleans())  # its GPUs stop working for good at some point (a zombie's pattern)
        rows, minutes = [], []
        for g in range(gpus):
            aid = f"j{n}-g{g}"
            rows.append(alloc(aid, f"j{n}", 1, template=template, started_at=at(started), gpu=g, **fields))
            values = [v for level, length in draw(st.lists(SEGMENT, min_size=1, max_size=8)) for v in [level] * length]
            if hangs:
                values = values[:draw(st.integers(0, 120))] + [0.0] * 240
            minutes += activity(aid, values[:240], start=at(started))
        checkpoints = draw(st.lists(st.integers(started, 240), max_size=3))
        progress = [{"job_id": f"j{n}", "attempt": 1, "at": at(started), "is_checkpoint": False}]
        progress += [{"job_id": f"j{n}", "attempt": 1, "at": at(m), "is_checkpoint": True} for m in checkpoints]
        out.append({"allocations": rows, "minutes": minutes, "progress": progress,
                    "evaluated_at": at(draw(st.integers(started + 1, 260)))})
    return out


def _rows(found: pl.DataFrame) -> list[dict]:
    return [r | {"evidence": json.loads(r["evidence"])} for r in found.sort("finding_id").to_dicts()]


@settings(max_examples=40)
@given(looks())
def test_one_pass_over_looks_at_different_moments_equals_each_look_alone(attempts: list[dict]):
    alone = [
        evaluate(inputs(a["allocations"], a["minutes"], a["progress"]), CATALOG, a["evaluated_at"], kinds=LIVE_KINDS)
        for a in attempts
    ]
    together = evaluate(
        inputs([r | {"evaluated_at": a["evaluated_at"]} for a in attempts for r in a["allocations"]],
               [m for a in attempts for m in a["minutes"]], [p for a in attempts for p in a["progress"]]),
        CATALOG, max(a["evaluated_at"] for a in attempts) + dt.timedelta(minutes=30), kinds=LIVE_KINDS,
    )
    assert difference(_rows(together), _rows(pl.concat(alone))) is None


@settings(max_examples=40)
@given(looks(), st.data())
def test_one_pass_over_an_attempt_at_several_moments_equals_each_look_alone(attempts: list[dict], data):
    looked, allocations, minutes, progress = [], [], [], []
    for a in attempts:
        job_id, started = a["allocations"][0]["job_id"], a["allocations"][0]["started_at"]
        first = int((started - T0).total_seconds() // 60) + 1
        for n, moment in enumerate(data.draw(st.lists(st.integers(first, 260), min_size=1, max_size=3, unique=True))):
            name = alias(job_id, n)
            frame = pl.from_dicts(a["allocations"], infer_schema_length=None)
            rows = frame.with_columns(job_id=pl.lit(name, pl.String), allocation_id=pl.Series(
                aliased_ids(frame.get_column("allocation_id").to_list(), job_id, name), dtype=pl.String))
            renamed = dict(zip((r["allocation_id"] for r in a["allocations"]), rows.get_column("allocation_id")))
            allocations.append(rows.with_columns(evaluated_at=pl.lit(at(moment))))
            minutes += [m | {"allocation_id": renamed[m["allocation_id"]]} for m in a["minutes"]]
            progress += [p | {"job_id": name} for p in a["progress"]]
            looked.append((a, at(moment), job_id, name))
    together = evaluate(PolicyInputs(allocations=pl.concat(allocations, how="diagonal_relaxed"),
                                     minutes=pl.from_dicts(minutes, infer_schema_length=None) if minutes else None,
                                     progress=pl.from_dicts(progress, infer_schema_length=None)),
                        CATALOG, at(300), kinds=LIVE_KINDS)
    for a, moment, job_id, name in looked:
        alone = evaluate(inputs(a["allocations"], a["minutes"], a["progress"]), CATALOG, moment, kinds=LIVE_KINDS)
        mine = together.filter(pl.col("job_id") == name).with_columns(unaliased_texts())
        assert difference(_rows(mine), _rows(alone)) is None, (job_id, name, moment)


def test_a_look_ignores_the_minutes_after_its_moment():
    data = inputs([alloc("a0", evaluated_at=at(45))], activity("a0", idle(120)))
    found = evaluate(data, CATALOG, at(120), kinds=[PolicyKind.IDLE_ALLOCATION]).to_dicts()
    assert [(f["window_start_at"], f["window_end_at"], f["is_ongoing"]) for f in found] == [(T0, at(45), True)]


def test_a_daily_kind_refuses_a_moment_per_attempt():
    data = inputs([alloc("a0", evaluated_at=at(45))], activity("a0", idle(60)))
    with pytest.raises(InputError, match="live kinds only"):
        evaluate(data, CATALOG, at(60), kinds=[PolicyKind.OVERSIZED])
