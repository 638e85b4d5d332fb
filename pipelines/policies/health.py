"""The gpu_health policy: a GPU or node with repeated hardware faults is drained, and undrained once
its health checks pass. Pure: findings from `PolicyInputs.health` (HEALTH_SCHEMA) and the rule.

- A fault minute is a minute in which a GPU had a hardware fault (`is_hardware_fault`: a
  non-application XID, an ECC double-bit error, a row-remap failure). Application XIDs (13, 31, 43,
  45: raised by user code) never count, whatever the frame says.
- A GPU is faulty from the first moment it had min_hardware_faults fault minutes within
  window_hours (detected at the end of that minute). Its episode starts at the first of those
  minutes and lasts until healthy_hours pass without a fault minute; a fault after that starts a
  new episode, and a new finding.
- A node with node_min_faulty_gpus GPUs detected faulty within window_hours of each other is
  drained whole; the findings of its GPUs detected from then on in that episode are left out
  (the node's drain covers them).

A finding is about hardware, not work: job_id is the target ("node-07/3" for GPU 3 of node-07,
"node-07" for the node), attempt 0, tenant, queue and template "platform", source the engine that
schedules the host (the frame's engine, allocator when unknown). Its evidence carries
last_fault_at (end of the last fault minute) and last_seen_at (end of the last minute with any
telemetry), from which the planner decides the undrain: healthy_hours after the later of the
drain and the last fault, and only when telemetry was seen by then (silence is not health).
is_ongoing: the target is not healthy yet at `now`.
"""
from __future__ import annotations

import datetime as dt
import json

import polars as pl

from allocator.records import rfc3339
from pipelines.contracts import PolicyKind
from pipelines.policies.catalog import PolicyCatalog
from pipelines.policies.inputs import TS, PolicyInputs, findings

# raised by user code (NVIDIA's XID catalog; models/seeds/xid_codes.csv class application)
APPLICATION_XIDS = (13, 31, 43, 45)
PLATFORM = "platform"  # tenant, queue and template of a finding about hardware
TELEMETRY_SIGNAL = "telemetry"
DEFAULT_ENGINE = "allocator"
_MINUTE = dt.timedelta(minutes=1)


def _episodes(minutes: list[dt.datetime], need: int, window: dt.timedelta,
              healthy: dt.timedelta) -> list[dict]:
    """Faulty episodes of one GPU from its sorted fault minutes: start, detection, last fault, count."""
    out: list[dict] = []
    current: dict | None = None
    for i, minute in enumerate(minutes):
        if current is not None and minute >= current["last_fault_at"] + healthy:
            current = None  # healthy for healthy_hours in between: a new episode
        if current is not None:
            current["last_fault_at"] = minute + _MINUTE
            current["faults"] += 1
            continue
        recent = [m for m in minutes[:i + 1] if m > minute + _MINUTE - window
                  and (not out or m >= out[-1]["last_fault_at"])]
        if len(recent) >= need:
            current = {"window_start_at": recent[0], "detected_at": minute + _MINUTE,
                       "last_fault_at": minute + _MINUTE, "faults": len(recent)}
            out.append(current)
    return out


def _node_episodes(gpu_episodes: list[dict], need: int, window: dt.timedelta) -> list[dict]:
    """Episodes of a node from its GPUs' (each with a `gpu`), sorted by detection."""
    out: list[dict] = []
    ordered = sorted(gpu_episodes, key=lambda e: e["detected_at"])
    for i, episode in enumerate(ordered):
        if out and episode["detected_at"] <= out[-1]["last_fault_at"]:
            continue  # within the node's current episode
        recent = [e for e in ordered[:i + 1] if e["detected_at"] > episode["detected_at"] - window
                  and (not out or e["detected_at"] > out[-1]["detected_at"])]
        gpus = {e["gpu"] for e in recent}
        if len(gpus) >= need:
            members = [e for e in ordered if e["window_start_at"] < episode["detected_at"] + window
                       and e["last_fault_at"] > min(r["window_start_at"] for r in recent)]
            out.append({"window_start_at": min(e["window_start_at"] for e in recent),
                        "detected_at": episode["detected_at"],
                        "last_fault_at": max(e["last_fault_at"] for e in members),
                        "faults": sum(e["faults"] for e in members), "gpus": sorted(gpus)})
    return out


def gpu_health(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime) -> pl.DataFrame:
    """FINDING_SCHEMA rows: GPUs and nodes with repeated hardware faults before `now`."""
    rule = catalog.rule(policy, queue=PLATFORM, template=PLATFORM)
    frame = inputs.health.filter(pl.col("minute_at") < now)
    if not rule.params.get("enabled", True) or frame.is_empty():
        return findings(pl.DataFrame(), rule)
    need = int(rule.params["min_hardware_faults"])
    window = dt.timedelta(hours=float(rule.params["window_hours"]))
    healthy = dt.timedelta(hours=float(rule.params["healthy_hours"]))
    node_need = int(rule.params["node_min_faulty_gpus"])
    seen = {(h, g): at + _MINUTE for h, g, at in frame.group_by("host", "gpu").agg(pl.col("minute_at").max()).iter_rows()}
    engines = dict(frame.filter(pl.col("engine").is_not_null()).group_by("host")
                   .agg(pl.col("engine").first()).iter_rows())
    faults = (frame.filter(pl.col("is_hardware_fault") & (pl.col("signal") != TELEMETRY_SIGNAL)
                           & (pl.col("xid").is_null() | ~pl.col("xid").is_in(APPLICATION_XIDS)))
              .group_by("host", "gpu").agg(pl.col("minute_at").unique().sort()).sort("host", "gpu"))
    by_node: dict[str, list[dict]] = {}
    for host, gpu, minutes in faults.iter_rows():
        for episode in _episodes(minutes, need, window, healthy):
            by_node.setdefault(host, []).append({**episode, "gpu": gpu})
    rows = []
    for host, gpu_episodes in sorted(by_node.items()):
        node_seen = max(at for (h, _), at in seen.items() if h == host)
        nodes = _node_episodes(gpu_episodes, node_need, window)
        for episode in nodes:
            rows.append(_row(host, episode, len(episode["gpus"]), node_seen, engines, rule, healthy, now,
                             metric="faulty_gpus", observed=len(episode["gpus"]), threshold=node_need))
        for episode in gpu_episodes:
            if any(n["detected_at"] <= episode["detected_at"] <= n["last_fault_at"] for n in nodes):
                continue
            rows.append(_row(f"{host}/{episode['gpu']}", episode, 1, seen[(host, episode["gpu"])], engines, rule,
                             healthy, now, metric="hardware_fault_minutes", observed=episode["faults"],
                             threshold=need))
    if not rows:
        return findings(pl.DataFrame(), rule)
    return findings(pl.DataFrame(rows, schema_overrides={c: TS for c in
                                                         ("window_start_at", "window_end_at", "detected_at")}), rule)


def _row(target: str, episode: dict, gpus: int, last_seen_at: dt.datetime, engines: dict, rule, healthy: dt.timedelta,
         now: dt.datetime, *, metric: str, observed: float, threshold: float) -> dict:
    host = target.partition("/")[0]
    last_fault = episode["last_fault_at"]
    evidence = {"last_fault_at": rfc3339(last_fault), "last_seen_at": rfc3339(last_seen_at),
                "fault_minutes": episode["faults"], "healthy_hours": healthy.total_seconds() / 3600}
    if "gpus" in episode:
        evidence["faulty_gpus"] = episode["gpus"]
    return {
        "scope": rule.scope, "source": engines.get(host) or DEFAULT_ENGINE, "job_id": target, "attempt": 0,
        "tenant": PLATFORM, "queue": PLATFORM, "template": PLATFORM, "user_name": None, "gpu_model": None,
        "window_start_at": episode["window_start_at"], "window_end_at": last_fault,
        "detected_at": episode["detected_at"], "gpus_flagged": gpus, "gpus_held": gpus, "gpu_hours": 0.0,
        "metric": metric, "observed": float(observed), "threshold": float(threshold),
        "is_ongoing": not (now >= last_fault + healthy and last_seen_at >= last_fault + healthy),
        "recommendation": None, "evidence": json.dumps(evidence, sort_keys=True),
    }


def health_lookback(catalog: PolicyCatalog) -> dt.timedelta:
    """How much health history an evaluation needs: an episode's faults stay in view until its
    undrain is due (window_hours before the drain, healthy_hours after), plus a day for a daily run."""
    longest = dt.timedelta()
    for name in catalog.policies_of(PolicyKind.GPU_HEALTH):
        params = catalog.rule(name, queue=PLATFORM, template=PLATFORM).params
        longest = max(longest, dt.timedelta(hours=float(params["window_hours"]) + float(params["healthy_hours"])))
    return longest + dt.timedelta(days=1)
