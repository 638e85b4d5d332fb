"""Hand-made policy inputs: allocations and per-minute activity, on 2026-11-01 from 10:00."""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from pipelines.contracts import PolicyKind
from pipelines.policies.catalog import DEFAULT_POLICIES, PolicyCatalog, load_catalog
from pipelines.policies.evaluate import evaluate
from pipelines.policies.inputs import PolicyInputs

T0 = dt.datetime(2026, 11, 1, 10, 0)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def alloc(aid: str = "a0", job_id: str = "j1", attempt: int = 1, *, template: str = "training", queue: str = "q",
          tenant: str = "vision", gpu_model: str = "A100", fraction: float = 1.0, started_at: dt.datetime = T0,
          ended_at: dt.datetime | None = None, **fields: Any) -> dict:
    row = {
        "allocation_id": aid, "source": "allocator", "job_id": job_id, "attempt": attempt, "tenant": tenant,
        "queue": queue, "template": template, "user_name": "ana", "gpu_model": gpu_model, "fraction": fraction,
        "started_at": started_at, "ended_at": ended_at, "is_running": ended_at is None, "host": "n1", "gpu": 0,
    }
    return row | fields


def activity(aid: str, values: list[float | None], start: dt.datetime = T0,
             fb: float | list[float | None] | None = None) -> list[dict]:
    """One row per minute from `start`; None = no telemetry that minute (no row)."""
    fbs = fb if isinstance(fb, list) else [fb] * len(values)
    return [
        {"allocation_id": aid, "minute_at": start + dt.timedelta(minutes=i), "activity": v, "fb_used_mib": f}
        for i, (v, f) in enumerate(zip(values, fbs, strict=True))
        if v is not None
    ]


def idle(n: int) -> list[float]:
    return [0.0] * n


def busy(n: int) -> list[float]:
    return [0.9] * n


def inputs(allocations: list[dict], minutes: list[dict], progress: list[dict] | None = None,
           attempts: list[dict] | None = None) -> PolicyInputs:
    return PolicyInputs(
        allocations=pl.from_dicts(allocations, infer_schema_length=None),
        minutes=pl.from_dicts(minutes, infer_schema_length=None) if minutes else None,
        progress=pl.from_dicts(progress, infer_schema_length=None) if progress else None,
        attempts=pl.from_dicts(attempts, infer_schema_length=None) if attempts else None,
    )


def find(data: PolicyInputs, now: dt.datetime, kind: PolicyKind, catalog: PolicyCatalog | None = None) -> list[dict]:
    out = evaluate(data, catalog or load_catalog(), now, kinds=[kind])
    return [r | {"evidence": json.loads(r["evidence"])} for r in out.to_dicts()]


def catalog_with(tmp_path: Path, edit: Callable[[dict], None], exemptions: list[dict] | None = None) -> PolicyCatalog:
    """The shipped catalog with `edit` applied to its YAML, written under tmp_path."""
    doc = yaml.safe_load(DEFAULT_POLICIES.read_text())
    edit(doc)
    path = tmp_path / "policies.yml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    ex = tmp_path / "exemptions.yml"
    ex.write_text(yaml.safe_dump({"exemptions": exemptions or []}))
    return load_catalog(path, ex)
