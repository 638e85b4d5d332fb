"""Capacity recommendations: rules over one month of the metric views, each advice with its numbers
and a confidence. Thresholds are data (models/capacity/rules.yml); every figure is read from a
`metrics` view (wait_causes, spec_gaps, capacity_headroom, capacity_trend, quota_fit_pairs,
job_summary, queue_rules, gpu_inventory), never recomputed here.

Rules (docs/capacity.md explains each with the default month's figures):
- add_nodes: a model whose work waited for lack of any free GPU of it (capacity_bound) while the
  pool ran near full at its hourly p95; how many: the GPUs short on an average day, in whole nodes.
- remove_nodes: a model nobody waited for, whose hourly peak left more than a node free above the
  rules' headroom.
- resplit_mig: MIG asks that waited on fragmentation, or whole-GPU attempts that fit a MIG slice.
- move_quota: a starved tenant paired with a donor whose quota of the same model sat idle.
- move_to_backfill: experiments holding quota in a quota-holding queue while others waited on quota.
- change_queue_limit: a queue whose waits are mostly "policy", or whose jobs end at its run-time cap.
Confidence (0..1): how steadily the evidence shows up (the share of the days with data it shows up in,
or of the whole weeks), the trend's direction, weighed by how much data there is (weeks of data = days
with data / 7: thin evidence weighs less and is never "high"); for the advice the what-if replays,
whether the replay confirms the effect, and whether its baseline reproduced the observed month.

The what-if of an advice that adds nodes or moves quota also searches the smallest sufficient
change (`smallest_change`): smaller sizes replayed side by side, the curve of what each achieves
kept with the advice; "sufficient" is data (rules.yml `smallest_change`). Advice whose smallest
sufficient size is below the advised one names it first and the full change beside it.
"""
from __future__ import annotations

import datetime as dt
import functools
import math
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import yaml
from pydantic import BaseModel, ConfigDict

from pipelines.capacity.rounds import side_by_side, sizes_to_probe
from pipelines.capacity.store import HIGH_CONFIDENCE_FROM, Recommendation
from pipelines.config import config_relative, section
from pipelines.paths import REPO_ROOT
from pipelines.yamlfile import load_yaml

if TYPE_CHECKING:
    from pipelines.capacity.demand import Demand
    from pipelines.capacity.replay import Change, Figures, WhatIfResult
    from pipelines.capacity.replay_cache import ReplayCache

RULES_PATH = REPO_ROOT / "models" / "capacity" / "rules.yml"


class RulesError(ValueError):
    """The capacity rules file is missing, unreadable, or lacks a rule or a threshold."""


class CapacityConfig(BaseModel):
    """The `capacity` section of gpupool.yml."""

    model_config = ConfigDict(extra="forbid")
    rules: Path | None = None


def rules_path() -> Path:
    """The rules in force: gpupool.yml's capacity.rules (relative to its folder), else the packaged file."""
    cfg = section("capacity", CapacityConfig)
    return config_relative(cfg.rules) if cfg is not None and cfg.rules is not None else RULES_PATH


def load_rules(path: Path | None = None) -> dict:
    path = Path(path or rules_path())
    try:
        rules = load_yaml(path.read_text())
    except OSError as err:
        raise RulesError(f"{path}: cannot read the capacity rules: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise RulesError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(rules, dict):
        raise RulesError(f"{path}: expected a mapping of rules at the top level")
    needed = ("version", "min_weeks_for_high_confidence", "add_nodes", "remove_nodes", "resplit_mig", "move_quota",
              "move_to_backfill", "change_queue_limit", "smallest_change")
    missing = [k for k in needed if k not in (rules or {})]
    if missing:
        raise RulesError(f"{path}: missing {', '.join(missing)}; every rule needs its thresholds (see docs/capacity.md)")
    return rules


def month_bounds(month: dt.date) -> tuple[dt.date, dt.date]:
    first = month.replace(day=1)
    following = (first + dt.timedelta(days=32)).replace(day=1)
    return first, following


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    cursor = con.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _days_with_data(con, first: dt.date, following: dt.date) -> int:
    """Days of the month the pool's daily figures hold (metrics.pool_daily): the extent of every rule's evidence."""
    return int(con.execute("select count(distinct day) from metrics.pool_daily where day >= ? and day < ?",
                           [first, following]).fetchone()[0] or 0)


def _days_seen(con, first: dt.date, following: dt.date, cause: str, field: str, value: str) -> int:
    """Days of the month with this cause's waits for the field's value (metrics.wait_causes)."""
    return int(con.execute(
        f"""select count(distinct day) from metrics.wait_causes
            where cause = ? and {field} = ? and waited_gpu_hours > 0 and day >= ? and day < ?""",
        [cause, value, first, following]).fetchone()[0] or 0)


# The score of a pattern with no steady evidence: what thin data shrinks every score toward.
NO_PATTERN_SCORE = 0.3
# The most any advice earns: a replay of the past is never certainty about the future.
MAX_CONFIDENCE = 0.95
# Below the rules' min_weeks_for_high_confidence weeks of data, advice is at most medium, a confirming
# replay included: a pattern seen on a few days may be those days' (a release, a deadline).
THIN_EVIDENCE_CEILING = HIGH_CONFIDENCE_FROM - 0.05
# What the what-if's verdict adds (confirms) or takes away (contradicts)...
WHATIF_CONFIRMS = 0.15
WHATIF_CONTRADICTS = 0.2
# ...and what a baseline replay that misses the observed month beyond tolerance takes away instead: the
# replay does not reproduce the month it replays, so its verdict on the change is not evidence either way.
WHATIF_OFF_BASELINE = 0.2


def _confidence(steady: float, weeks_seen: float, rules: dict, *, trend_agrees: bool | None = None) -> float:
    """The pattern's score, before weighing by the weeks of data: up to 0.4 from how steadily the evidence
    shows up (the share of days, or of whole weeks, it shows up in), 0.1 more once it was seen over the
    rules' min_weeks_for_high_confidence weeks, +/- 0.15 from the trend."""
    score = NO_PATTERN_SCORE + 0.4 * steady
    if weeks_seen >= rules["min_weeks_for_high_confidence"]:
        score += 0.1
    if trend_agrees is True:
        score += 0.15
    elif trend_agrees is False:
        score -= 0.15
    return score


def weighed(score: float, weeks_of_data: float, rules: dict) -> float:
    """A score weighed by the evidence's extent: with fewer than the rules' min_weeks_for_high_confidence
    weeks of data it is shrunk toward NO_PATTERN_SCORE in proportion (3 days of a pattern weigh a seventh of
    3 weeks of it; thin data never raises a score) and capped under "high"."""
    need = rules["min_weeks_for_high_confidence"]
    shrunk = NO_PATTERN_SCORE + (score - NO_PATTERN_SCORE) * min(weeks_of_data / need, 1.0)
    return max(0.0, min(score, shrunk, ceiling(weeks_of_data, rules)))


def ceiling(weeks_of_data: float, rules: dict) -> float:
    """The most confidence this many weeks of data allow."""
    return MAX_CONFIDENCE if weeks_of_data >= rules["min_weeks_for_high_confidence"] else THIN_EVIDENCE_CEILING


def on_evidence(rec: Recommendation, days_with_data: int, days_in_month: int, rules: dict,
                coverage: dict | None = None) -> Recommendation:
    """The advice with its confidence weighed by the month's days with data, which its evidence records, with
    the month's coverage per kind of source (pipelines.coverage.Coverage.as_dict) when given."""
    weeks = days_with_data / 7
    evidence = {**rec.evidence, "days_with_data": days_with_data, "days_in_month": days_in_month,
                "weeks_of_data": round(weeks, 2), **({} if coverage is None else {"coverage": coverage})}
    return replace(rec, confidence_score=weighed(rec.confidence_score, weeks, rules), evidence=evidence)


# -- the rules ---------------------------------------------------------------------------------


def add_nodes(con, first: dt.date, following: dt.date, rules: dict) -> list[Recommendation]:
    r = rules["add_nodes"]
    out = []
    models = _rows(con, """
        with waits as (
          select gpu_model, sum(waited_gpu_hours) as capacity_bound_gpu_hours
          from metrics.wait_causes where cause = 'capacity_bound' and day >= ? and day < ?
          group by gpu_model
        ), gaps as (
          select gpu_model, avg(gap) as short_gpus_avg_day, max(gap) as short_gpus_max_day
          from (select day, gpu_model, sum(gap_gpus_avg) as gap from metrics.spec_gaps
                where share_mode = 'whole' and day >= ? and day < ? group by all)
          group by gpu_model
        ), nodes as (
          select gpu_model, max(gpus) as gpus_per_node, count(*) as nodes
          from (select host, gpu_model, count(distinct gpu) as gpus from metrics.gpu_inventory group by all)
          group by gpu_model
        ), headroom as (
          select gpu_model, capacity_gpus, capacity_gpu_hours, p95_allocated_gpus, peak_allocated_gpus
          from metrics.capacity_headroom where window_kind = 'period' and queue = 'all'
        ), trend as (
          select gpu_model, any_value(demand_slope_gpu_hours_per_week) as demand_slope,
                 any_value(demand_trend_r2) as demand_r2
          from metrics.capacity_trend group by gpu_model
        )
        select h.*, w.capacity_bound_gpu_hours, g.short_gpus_avg_day, g.short_gpus_max_day, n.gpus_per_node,
               n.nodes, t.demand_slope, t.demand_r2
        from headroom h join waits w using (gpu_model) left join gaps g using (gpu_model)
        left join nodes n using (gpu_model) left join trend t using (gpu_model)
        order by w.capacity_bound_gpu_hours desc""", [first, following, first, following])
    days = _days_with_data(con, first, following)
    for m in models:
        share = m["capacity_bound_gpu_hours"] / m["capacity_gpu_hours"] if m["capacity_gpu_hours"] else 0.0
        p95_share = m["p95_allocated_gpus"] / m["capacity_gpus"] if m["capacity_gpus"] else 0.0
        if share < r["min_capacity_bound_share"] or p95_share < r["min_p95_allocated_share"]:
            continue
        per_node = m["gpus_per_node"] or 8
        short = m["short_gpus_avg_day"] or m["capacity_bound_gpu_hours"] / max(_hours(first, following), 1)
        nodes = max(1, min(r["max_nodes"], math.ceil(short / per_node)))
        seen = _days_seen(con, first, following, "capacity_bound", "gpu_model", m["gpu_model"])
        model = m["gpu_model"]
        out.append(Recommendation(
            kind="add_nodes", target=model, gpu_model=model, wait_cause="capacity_bound",
            quantity=nodes, unit="nodes",
            recommendation=(f"Add {nodes} node{'s' if nodes > 1 else ''} of {model} ({nodes * per_node} GPUs): work "
                            f"waited {m['capacity_bound_gpu_hours']:,.0f} GPU-hours for lack of a free {model} "
                            f"({share:.1%} of its capacity), the hourly p95 held {m['p95_allocated_gpus']:.0f} of "
                            f"{m['capacity_gpus']:.0f} GPUs, and on an average day {short:.1f} GPUs were short."),
            recommendation_zh=(f"增加 {nodes} 台 {model} 节点（{nodes * per_node} 块 GPU）：因没有空闲的 {model}，作业共等待了 "
                               f"{m['capacity_bound_gpu_hours']:,.0f} GPU 小时（占其容量的 {share:.1%}），每小时 p95 占用 "
                               f"{m['p95_allocated_gpus']:.0f}/{m['capacity_gpus']:.0f} 块，平均每天缺 {short:.1f} 块。"),
            confidence_score=_confidence(seen / days if days else 0.0, seen / 7, rules,
                                         trend_agrees=None if m["demand_slope"] is None else m["demand_slope"] >= 0),
            impact_gpu_hours=float(m["capacity_bound_gpu_hours"]),
            evidence={"capacity_bound_gpu_hours": m["capacity_bound_gpu_hours"], "capacity_bound_share": share,
                      "capacity_gpus": m["capacity_gpus"], "p95_allocated_gpus": m["p95_allocated_gpus"],
                      "peak_allocated_gpus": m["peak_allocated_gpus"], "short_gpus_avg_day": short,
                      "short_gpus_max_day": m["short_gpus_max_day"], "gpus_per_node": per_node,
                      "days_with_waits": seen, "demand_slope_gpu_hours_per_week": m["demand_slope"],
                      "views": ["metrics.wait_causes", "metrics.spec_gaps", "metrics.capacity_headroom",
                                "metrics.capacity_trend", "metrics.gpu_inventory"]},
        ))
    return out


def remove_nodes(con, first: dt.date, following: dt.date, rules: dict) -> list[Recommendation]:
    r = rules["remove_nodes"]
    out = []
    models = _rows(con, """
        with waits as (
          select gpu_model, sum(waited_gpu_hours) filter (where cause = 'capacity_bound') as capacity_bound_gpu_hours
          from metrics.wait_causes where day >= ? and day < ? group by gpu_model
        ), nodes as (
          select gpu_model, max(gpus) as gpus_per_node, count(*) as nodes
          from (select host, gpu_model, count(distinct gpu) as gpus from metrics.gpu_inventory group by all)
          group by gpu_model
        ), trend as (
          select gpu_model, any_value(p95_slope_gpus_per_week) as p95_slope from metrics.capacity_trend group by gpu_model
        )
        select h.gpu_model, h.capacity_gpus, h.capacity_gpu_hours, h.peak_allocated_gpus, h.p95_allocated_gpus,
               coalesce(w.capacity_bound_gpu_hours, 0) as capacity_bound_gpu_hours, n.gpus_per_node, n.nodes,
               t.p95_slope
        from metrics.capacity_headroom h left join waits w using (gpu_model) left join nodes n using (gpu_model)
        left join trend t using (gpu_model)
        where h.window_kind = 'period' and h.queue = 'all'""", [first, following])
    for m in models:
        share = m["capacity_bound_gpu_hours"] / m["capacity_gpu_hours"] if m["capacity_gpu_hours"] else 0.0
        per_node = m["gpus_per_node"] or 8
        spare = m["capacity_gpus"] - m["peak_allocated_gpus"] - r["headroom_gpus_above_peak"]
        nodes = math.floor(spare / per_node)
        if share > r["max_capacity_bound_share"] or nodes < 1 or nodes >= (m["nodes"] or 0):
            continue
        model = m["gpu_model"]
        weeks = _rows(con, """select count(*) as weeks, count(*) filter (where peak_allocated_gpus + ? <= capacity_gpus - ?)
                                as fitting from metrics.capacity_headroom
                              where window_kind = 'week' and queue = 'all' and gpu_model = ? and is_complete_week""",
                      [r["headroom_gpus_above_peak"], nodes * per_node, model])[0]
        # steadiness over whole weeks: a week's peak is the figure that must fit, not a day's
        fitting, complete = int(weeks["fitting"] or 0), int(weeks["weeks"] or 0)
        idle_hours = nodes * per_node * _hours(first, following)
        out.append(Recommendation(
            kind="remove_nodes", target=model, gpu_model=model, quantity=nodes, unit="nodes",
            recommendation=(f"Remove or lend {nodes} node{'s' if nodes > 1 else ''} of {model}: the busiest hour held "
                            f"{m['peak_allocated_gpus']:.0f} of {m['capacity_gpus']:.0f} GPUs and nobody waited for a "
                            f"{model}; {r['headroom_gpus_above_peak']} GPUs of headroom stay above the peak."),
            recommendation_zh=(f"减少或出借 {nodes} 台 {model} 节点：最忙的一小时只占用 {m['peak_allocated_gpus']:.0f}/"
                               f"{m['capacity_gpus']:.0f} 块，且没有作业因缺少 {model} 而等待；峰值之上仍保留 "
                               f"{r['headroom_gpus_above_peak']} 块余量。"),
            confidence_score=_confidence(fitting / complete if complete else 0.0, fitting, rules,
                                         trend_agrees=None if m["p95_slope"] is None else m["p95_slope"] <= 0),
            impact_gpu_hours=float(idle_hours),
            evidence={"capacity_gpus": m["capacity_gpus"], "peak_allocated_gpus": m["peak_allocated_gpus"],
                      "p95_allocated_gpus": m["p95_allocated_gpus"], "capacity_bound_share": share,
                      "gpus_per_node": per_node, "complete_weeks_fitting": fitting, "complete_weeks": complete,
                      "p95_slope_gpus_per_week": m["p95_slope"],
                      "views": ["metrics.capacity_headroom", "metrics.wait_causes", "metrics.capacity_trend"]},
        ))
    return out


def resplit_mig(con, first: dt.date, following: dt.date, rules: dict) -> list[Recommendation]:
    r = rules["resplit_mig"]
    out = []
    hours = max(_hours(first, following), 1)
    for m in _rows(con, """
        select gpu_model, mig_profile, sum(fragmentation_gpu_hours) as fragmentation_gpu_hours,
               sum(waited_gpu_hours) as waited_gpu_hours, max(pending_gpus_peak_hour) as pending_gpus_peak
        from metrics.spec_gaps where share_mode = 'mig' and day >= ? and day < ?
        group by all having sum(fragmentation_gpu_hours) >= ? order by 3 desc""",
                   [first, following, r["min_fragmentation_gpu_hours"]]):
        gpus = max(1, math.ceil(m["fragmentation_gpu_hours"] / hours))
        out.append(Recommendation(
            kind="resplit_mig", target=f"{m['gpu_model']}:{m['mig_profile']}", gpu_model=m["gpu_model"],
            wait_cause="fragmentation", quantity=gpus, unit="GPUs",
            recommendation=(f"Re-split {gpus} {m['gpu_model']} GPU{'s' if gpus > 1 else ''} to offer more "
                            f"{m['mig_profile']} instances: {m['mig_profile']} asks waited "
                            f"{m['fragmentation_gpu_hours']:,.1f} GPU-hours with slices free in other layouts."),
            recommendation_zh=(f"将 {gpus} 块 {m['gpu_model']} 重新划分以提供更多 {m['mig_profile']} 实例：在其他布局有空闲切片时，"
                               f"{m['mig_profile']} 请求仍等待了 {m['fragmentation_gpu_hours']:,.1f} GPU 小时。"),
            confidence_score=0.5, impact_gpu_hours=float(m["fragmentation_gpu_hours"]),
            evidence={**m, "views": ["metrics.spec_gaps"]},
        ))
    for m in _rows(con, """
        select gpu_model, sum(rightsizable_to_mig_slice) as attempts, sum(attempts_measured) as measured,
               sum(rightsizable_gpu_hours * rightsizable_to_mig_slice / nullif(rightsizable_attempts, 0))
                 as mig_gpu_hours
        from metrics.spec_gaps where share_mode = 'whole' and day >= ? and day < ?
        group by gpu_model having sum(rightsizable_to_mig_slice) > 0 order by 4 desc""", [first, following]):
        mig_capable = con.execute("select count(*) from metrics.gpu_inventory where gpu_model = ? and share_mode = 'mig'",
                                  [m["gpu_model"]]).fetchone()[0]
        gpus = math.ceil((m["mig_gpu_hours"] or 0) / hours)
        if not mig_capable or gpus < 1 or (m["mig_gpu_hours"] or 0) < r["min_fragmentation_gpu_hours"]:
            continue
        share = m["attempts"] / m["measured"] if m["measured"] else 0.0
        out.append(Recommendation(
            kind="resplit_mig", target=f"{m['gpu_model']}:whole-to-mig", gpu_model=m["gpu_model"], quantity=gpus,
            unit="GPUs",
            recommendation=(f"Split {gpus} whole {m['gpu_model']} GPU{'s' if gpus > 1 else ''} into MIG slices and steer "
                            f"small work there: {m['attempts']:,} attempts ({share:.0%} of those measured) used no more "
                            f"than a slice's compute and memory, holding {m['mig_gpu_hours']:,.0f} GPU-hours of whole GPUs."),
            recommendation_zh=(f"将 {gpus} 块整卡 {m['gpu_model']} 划分为 MIG 切片并引导小作业使用：{m['attempts']:,} 次运行"
                               f"（占已测量的 {share:.0%}）的算力和显存用量都不超过一个切片，却占用了 {m['mig_gpu_hours']:,.0f} "
                               "GPU 小时的整卡。"),
            confidence_score=0.4 + 0.4 * min(share * 2, 1.0), impact_gpu_hours=float(m["mig_gpu_hours"]),
            evidence={**m, "views": ["metrics.spec_gaps", "metrics.gpu_inventory"]},
        ))
    return out


def move_quota(con, first: dt.date, following: dt.date, rules: dict) -> list[Recommendation]:
    r = rules["move_quota"]
    out = []
    # one move per starved tenant and model: from the donor whose idle quota matched most of its need
    for p in _rows(con, """
        select p.*, f.quota_bound_gpu_hours as receiver_quota_bound_gpu_hours, d.idle_quota_share_pct as donor_idle_pct,
               d.quota_gpus as donor_quota
        from metrics.quota_fit_pairs p
        join metrics.quota_fit f on f.tenant = p.starved_tenant and f.gpu_model = p.gpu_model
        join metrics.quota_fit d on d.tenant = p.donor_tenant and d.gpu_model = p.gpu_model
        where d.idle_quota_share_pct >= ? and f.quota_bound_gpu_hours >= ?
        qualify row_number() over (partition by p.starved_tenant, p.gpu_model order by p.movable_gpu_hours desc) = 1
        order by p.movable_gpu_hours desc""", [r["min_donor_idle_share"] * 100, r["min_receiver_quota_bound_gpu_hours"]]):
        gpus = max(1, min(math.floor(p["mean_movable_gpus"] or 0), int(p["donor_quota"] or 0)))
        target = f"{p['donor_tenant']}->{p['starved_tenant']}:{p['gpu_model']}"
        out.append(Recommendation(
            kind="move_quota", target=target, gpu_model=p["gpu_model"], tenant=p["starved_tenant"],
            wait_cause="quota_bound", quantity=gpus, unit="quota GPUs",
            recommendation=(f"Move {gpus} {p['gpu_model']} GPU{'s' if gpus > 1 else ''} of quota from {p['donor_tenant']} to "
                            f"{p['starved_tenant']}: {p['starved_tenant']} waited {p['receiver_quota_bound_gpu_hours']:,.0f} "
                            f"GPU-hours on its quota while {p['donor_tenant']} left {p['donor_idle_pct']:.0f}% of its "
                            f"{p['donor_quota']:.0f}-GPU quota idle; {p['movable_gpu_hours']:,.0f} GPU-hours could have moved."),
            recommendation_zh=(f"将 {p['donor_tenant']} 的 {gpus} 块 {p['gpu_model']} 配额调给 {p['starved_tenant']}："
                               f"{p['starved_tenant']} 因配额不足等待了 {p['receiver_quota_bound_gpu_hours']:,.0f} GPU 小时，"
                               f"而 {p['donor_tenant']} 的 {p['donor_quota']:.0f} 块配额有 {p['donor_idle_pct']:.0f}% 闲置；"
                               f"本可调剂 {p['movable_gpu_hours']:,.0f} GPU 小时。"),
            confidence_score=0.4 + 0.4 * min((p["matched_hours"] or 0) / max(_hours(first, following), 1) * 2, 1.0),
            impact_gpu_hours=float(p["movable_gpu_hours"] or 0),
            evidence={**p, "views": ["metrics.quota_fit_pairs", "metrics.quota_fit"]},
        ))
    return out


def move_to_backfill(con, first: dt.date, following: dt.date, rules: dict) -> list[Recommendation]:
    r = rules["move_to_backfill"]
    out = []
    for q in _rows(con, """
        with experiments as (
          select queue, gpu_model, count(*) as jobs, sum(allocated_gpu_hours) as gpu_hours
          from metrics.job_summary
          where template = 'experiment' and submitted_at >= ? and submitted_at < ?
          group by all
        ), holding as (
          select distinct queue, gpu_model from metrics.queue_rules where quota_gpus > 0
        ), quota_waits as (
          select gpu_model, sum(waited_gpu_hours) as quota_bound_gpu_hours
          from metrics.wait_causes where cause = 'quota_bound' and day >= ? and day < ? group by all
        )
        select e.*, w.quota_bound_gpu_hours
        from experiments e join holding h using (queue, gpu_model) join quota_waits w using (gpu_model)
        where e.gpu_hours >= ? and w.quota_bound_gpu_hours >= ?
        order by e.gpu_hours desc""",
                   [first, following, first, following, r["min_experiment_gpu_hours"], r["min_quota_bound_gpu_hours"]]):
        out.append(Recommendation(
            kind="move_to_backfill", target=f"{q['queue']}:{q['gpu_model']}", queue=q["queue"], gpu_model=q["gpu_model"],
            wait_cause="quota_bound", quantity=q["jobs"], unit="jobs",
            recommendation=(f"Move experiments from {q['queue']} to the backfill queue: {q['jobs']:,} experiments held "
                            f"{q['gpu_hours']:,.0f} {q['gpu_model']} GPU-hours of quota while other work waited "
                            f"{q['quota_bound_gpu_hours']:,.0f} GPU-hours on quota."),
            recommendation_zh=(f"将 {q['queue']} 中的实验作业移到 backfill 队列：{q['jobs']:,} 个实验占用了 {q['gpu_hours']:,.0f} "
                               f"{q['gpu_model']} GPU 小时的配额，而其他作业因配额等待了 {q['quota_bound_gpu_hours']:,.0f} GPU 小时。"),
            confidence_score=0.6, impact_gpu_hours=float(q["gpu_hours"]),
            evidence={**q, "views": ["metrics.job_summary", "metrics.queue_rules", "metrics.wait_causes"]},
        ))
    return out


def change_queue_limit(con, first: dt.date, following: dt.date, rules: dict) -> list[Recommendation]:
    r = rules["change_queue_limit"]
    out = []
    for q in _rows(con, """
        with waits as (
          select queue, sum(waited_gpu_hours) as waited_gpu_hours,
                 sum(waited_gpu_hours) filter (where cause = 'policy') as policy_gpu_hours
          from metrics.wait_causes where day >= ? and day < ? group by queue
        ), backfill as (
          select queue, bool_and(coalesce(quota_gpus, 0) = 0) as is_backfill from metrics.queue_rules group by queue
        )
        select w.*, b.is_backfill from waits w left join backfill b using (queue)
        where w.policy_gpu_hours >= ? order by w.policy_gpu_hours desc""", [first, following, r["min_policy_gpu_hours"]]):
        share = q["policy_gpu_hours"] / q["waited_gpu_hours"] if q["waited_gpu_hours"] else 0.0
        if share < r["min_policy_share"] or q["is_backfill"]:
            continue  # a backfill queue waits on purpose: it only gets what others leave idle
        out.append(Recommendation(
            kind="change_queue_limit", target=f"queue {q['queue']}", queue=q["queue"], wait_cause="policy",
            quantity=q["policy_gpu_hours"], unit="GPU-hours",
            recommendation=(f"Review the rules of queue {q['queue']}: {share:.0%} of its waiting "
                            f"({q['policy_gpu_hours']:,.0f} GPU-hours) happened with GPUs free, fitting and within "
                            "quota — a head-of-line job or a backfill rule held the rest back."),
            recommendation_zh=(f"检查队列 {q['queue']} 的规则：其等待中有 {share:.0%}（{q['policy_gpu_hours']:,.0f} GPU 小时）"
                               "发生在 GPU 空闲、规格合适且未超配额时——被队首作业或回填规则挡住了。"),
            confidence_score=0.45, impact_gpu_hours=float(q["policy_gpu_hours"]),
            evidence={**q, "policy_share": share, "views": ["metrics.wait_causes", "metrics.queue_rules"]},
        ))
    for q in _rows(con, """
        select s.queue, count(*) filter (where s.final_state is not null) as finished,
               count(*) filter (where s.final_state = 'TIMEOUT') as timeouts,
               any_value(r.max_runtime_s) as max_runtime_s,
               quantile_cont(s.expected_runtime_s, 0.9) as declared_p90_s
        from metrics.job_summary s join (select queue, max(max_runtime_s) as max_runtime_s from metrics.queue_rules
                                         group by queue) r using (queue)
        where s.submitted_at >= ? and s.submitted_at < ? and r.max_runtime_s is not null
        group by s.queue""", [first, following]):
        share = q["timeouts"] / q["finished"] if q["finished"] else 0.0
        if share < r["min_timeout_share"]:
            continue
        cap_h = q["max_runtime_s"] / 3600
        declared_h = (q["declared_p90_s"] or 0) / 3600
        proposal = (f"raise its maximum run time from {cap_h:g} h to {math.ceil(declared_h):g} h (the p90 of declared "
                    "run times)" if declared_h > cap_h else "check the run-time estimates its users declare")
        out.append(Recommendation(
            kind="change_queue_limit", target=f"queue {q['queue']} max_runtime", queue=q["queue"],
            quantity=math.ceil(declared_h) if declared_h > cap_h else cap_h, unit="hours",
            recommendation=f"Queue {q['queue']}: {share:.0%} of its finished jobs hit the {cap_h:g} h cap (TIMEOUT); {proposal}.",
            recommendation_zh=f"队列 {q['queue']}：已结束作业中有 {share:.0%} 达到 {cap_h:g} 小时上限（TIMEOUT）；建议"
                              + (f"将最长运行时间从 {cap_h:g} 小时提高到 {math.ceil(declared_h):g} 小时。" if declared_h > cap_h
                                 else "检查用户声明的运行时间。"),
            confidence_score=0.5, impact_gpu_hours=0.0,
            evidence={**q, "timeout_share": share, "views": ["metrics.job_summary", "metrics.queue_rules"]},
        ))
    return out


RULES: tuple[Callable, ...] = (add_nodes, remove_nodes, resplit_mig, move_quota, move_to_backfill, change_queue_limit)


def _hours(first: dt.date, following: dt.date) -> float:
    return (following - first).days * 24.0


def recommend(con: duckdb.DuckDBPyConnection, month: dt.date, rules: dict | None = None) -> list[Recommendation]:
    """Every rule over the month, its confidence weighed by the month's days with data, most GPU-hours
    addressed first; each carries the month's coverage per kind of source in its evidence."""
    from pipelines.coverage import read_coverage

    rules = rules or load_rules()
    first, following = month_bounds(month)
    days = _days_with_data(con, first, following)
    coverage = read_coverage(con, first, following).as_dict()
    found = [on_evidence(rec, days, (following - first).days, rules, coverage)
             for rule in RULES for rec in rule(con, first, following, rules)]
    return sorted(found, key=lambda rec: (-rec.impact_gpu_hours, rec.kind, rec.target))


def with_whatif(rec: Recommendation, result: dict, rules: dict) -> Recommendation:
    """The replay's predicted effect attached; confidence up when it confirms the advice, down when not, and
    down, with the reason in the advice's text, when its baseline missed the observed month beyond tolerance.
    Never above what the advice's weeks of data allow (its evidence's `weeks_of_data`; none recorded: none)."""
    confirms = result.get("confirms")
    text, text_zh = rec.recommendation, rec.recommendation_zh
    if result.get("baseline_within_tolerance") is False:
        delta = -WHATIF_OFF_BASELINE
        wait = result["wait_p95_min"]
        text += (f" Confidence lowered: the what-if's baseline replay missed the observed month beyond tolerance "
                 f"(pool wait p95 {wait['observed']:,.0f} min observed, {wait['baseline']:,.0f} min replayed), so "
                 "its prediction is not relied on.")
        text_zh += (f"置信度已下调：模拟的基线回放与实际月份的偏差超出容差（资源池 P95 等待实际 {wait['observed']:,.0f} 分钟，"
                    f"回放 {wait['baseline']:,.0f} 分钟），其预测不作依据。")
    else:
        delta = WHATIF_CONFIRMS if confirms else -WHATIF_CONTRADICTS if confirms is False else 0.0
    # the replay's verdict is added, not weighed again: the score is already weighed by the same weeks
    score = max(0.0, min(rec.confidence_score + delta, ceiling(rec.evidence.get("weeks_of_data", 0.0), rules)))
    return replace(rec, whatif=result, confidence_score=score, recommendation=text, recommendation_zh=text_zh)


# -- the what-if of a recommendation -------------------------------------------------------------


def _queue_quota(con, tenant: str, model: str) -> tuple[str, float] | None:
    """The tenant's queue holding most quota of the model, and that quota (metrics.queue_rules)."""
    row = con.execute("""select queue, quota_gpus from metrics.queue_rules
                         where tenant = ? and gpu_model = ? and quota_gpus > 0
                         order by quota_gpus desc, queue limit 1""", [tenant, model]).fetchone()
    return None if row is None else (row[0], float(row[1]))


def whatif_change(con, rec: Recommendation) -> Change | None:
    """The replay change that tests this advice, or None when the replay cannot express it."""
    sized = _sized_change(con, rec)
    return None if sized is None else sized(int(rec.quantity))


def whatif_sizes(con, rec: Recommendation) -> dict[int, Change]:
    """The replay change at every size from 1 to the advised quantity (nodes added, GPUs of quota moved):
    what the smallest-change search may try. Empty for advice it does not search (remove_nodes: fewer
    nodes is the advice's own direction; the others have no replay)."""
    sized = _sized_change(con, rec) if rec.kind in SEARCHED else None
    return {} if sized is None else {n: sized(n) for n in range(1, int(rec.quantity) + 1)}


SEARCHED = ("add_nodes", "move_quota")


def _sized_change(con, rec: Recommendation) -> Callable[[int], Change] | None:
    from pipelines.capacity.replay import Change

    if rec.kind == "add_nodes":
        return lambda n: Change(add_nodes={rec.gpu_model: n})
    if rec.kind == "remove_nodes":
        return lambda n: Change(add_nodes={rec.gpu_model: -n})
    if rec.kind == "move_quota":
        donor_tenant = rec.target.split("->")[0]
        donor, receiver = _queue_quota(con, donor_tenant, rec.gpu_model), _queue_quota(con, rec.tenant, rec.gpu_model)
        if donor is None or receiver is None:
            return None
        return lambda n: Change(quotas={(donor[0], rec.gpu_model): max(donor[1] - n, 0.0),
                                        (receiver[0], rec.gpu_model): receiver[1] + n})
    return None


def _key_wait_s(rec: Recommendation, figures: Figures) -> float:
    """The wait p95 the advice is judged by: its model's jobs' (the pool's when it names no model)."""
    model = rec.gpu_model
    return figures.wait_p95_by_model_s.get(model, figures.wait_p95_s) if model else figures.wait_p95_s


def _confirms(rec: Recommendation, baseline_s: float, changed_s: float) -> bool:
    if rec.kind == "remove_nodes":  # fewer GPUs must not make anyone wait longer
        return changed_s <= baseline_s * 1.05 + 60
    return changed_s < baseline_s * 0.95


def whatif_summary(rec: Recommendation, result: WhatIfResult) -> dict:
    """What the replay predicts for the advice's model (or the pool), and whether it confirms it."""
    b, c = result.baseline, result.changed
    model = rec.gpu_model
    key_b, key_c = _key_wait_s(rec, b), _key_wait_s(rec, c)
    return {
        "change": result.change.describe(), "policies": result.policies,
        "baseline_within_tolerance": result.within_tolerance,
        "wait_p95_min": {"observed": result.observed.wait_p95_s / 60, "baseline": b.wait_p95_s / 60,
                         "changed": c.wait_p95_s / 60},
        "wait_p50_min": {"baseline": b.wait_p50_s / 60, "changed": c.wait_p50_s / 60},
        f"wait_p95_{model or 'pool'}_min": {"baseline": key_b / 60, "changed": key_c / 60},
        "pool_utilisation_pct": {"baseline": b.pool_utilisation_pct, "changed": c.pool_utilisation_pct},
        "idle_gpu_hours": {"baseline": b.idle_gpu_hours, "changed": c.idle_gpu_hours},
        "confirms": _confirms(rec, key_b, key_c),
        "replay_seconds": b.seconds + c.seconds,
    }


# -- the smallest sufficient change --------------------------------------------------------------

@dataclass(frozen=True)
class Search:
    """The sizes replayed (0: the baseline, the advised size: the advice as written) and what each achieved."""

    advised: int
    figures: Mapping[int, Figures]
    enough: Mapping[int, bool]  # size -> sufficient (the baseline never is)
    share_of_full: Mapping[int, float]  # size -> its cut of the key wait p95 over the advised size's cut

    @property
    def smallest(self) -> int | None:
        """The smallest sufficient size; None when the advised change itself is not sufficient."""
        return min((n for n, ok in self.enough.items() if ok), default=None)


def sufficient(rec: Recommendation, rules: dict, baseline: Figures, full: Figures, point: Figures) -> tuple[bool, float]:
    """(Whether a size is enough, its share of the full change's effect). Enough: it confirms the advice (as
    the what-if of the advice does) and either takes the key wait p95 to the target or achieves at least
    the rules' share of what the advised change achieves (models/capacity/rules.yml `smallest_change`)."""
    r = rules["smallest_change"]
    key_b, key_full, key = _key_wait_s(rec, baseline), _key_wait_s(rec, full), _key_wait_s(rec, point)
    share = (key_b - key) / (key_b - key_full) if key_b > key_full else 0.0
    ok = _confirms(rec, key_b, key) and (key <= r["target_wait_p95_minutes"] * 60 or share >= r["min_share_of_full_effect"])
    return ok, share


_DEMAND: list = []  # a replay worker's copy of the month's demand: sent once per process, not once per size


def _hold_demand(demand: Demand) -> None:
    _DEMAND[:] = [demand]


def _replay_size(change: Change | None, policies: bool) -> Figures:
    from pipelines.capacity.replay import replay

    return replay(_DEMAND[0], change, policies=policies)[0]


def search(demand: Demand, rec: Recommendation, sizes: Mapping[int, Change], rules: dict, *, policies: bool,
           workers: int | None = None, on_step: Callable[[str], None] = lambda _m: None,
           cache: ReplayCache | None = None) -> Search:
    """Replay the baseline and the advised size (the largest in `sizes`), then smaller sizes in rounds of
    replays side by side on `workers` cores (sizes_to_probe), until the smallest sufficient one is found;
    the baseline is replayed once for all. Stops after the first round when the advised change is not
    sufficient. `cache`: replays kept from earlier runs are taken from it (a round that needs fewer replays
    may probe more sizes), and each replay run is kept."""
    from pipelines.capacity.replay import kept_figures, kept_replay_key
    from pipelines.capacity.replay_cache import demand_digest

    advised = max(sizes)
    workers = workers or side_by_side()
    figures: dict[int, Figures] = {}
    enough: dict[int, bool] = {0: False}
    share: dict[int, float] = {0: 0.0}
    demand_key = demand_digest(demand) if cache is not None else ""

    def label(n: int) -> str:
        return "baseline" if n == 0 else sizes[n].describe()

    @functools.cache  # a key reads the catalog: once per size, not at every look-up and keep
    def key(n: int) -> str:
        return kept_replay_key(demand_key, demand, sizes.get(n), policies)

    def take_kept(todo: list[int]) -> list[int]:
        """The sizes of `todo` still to replay; the others' figures taken from the cache."""
        left = []
        for n in todo:
            kept = kept_figures(cache, key(n)) if cache is not None else None
            if kept is None:
                left.append(n)
            else:
                figures[n] = kept
                on_step(f"{label(n)}: kept from an earlier replay, {rec.gpu_model or 'pool'} wait p95 "
                        f"{_key_wait_s(rec, kept) / 60:,.0f} min")
        return left

    def replay_round(todo: list[int], pool: ProcessPoolExecutor | None) -> None:
        todo = take_kept(todo)
        if not todo:
            return
        on_step(f"replaying {', '.join(label(n) for n in todo)}" + (" side by side" if pool and len(todo) > 1 else ""))
        if pool is None:
            done = ((n, _replay_size(sizes.get(n), policies)) for n in todo)
        else:
            futures = {pool.submit(_replay_size, sizes.get(n), policies): n for n in todo}
            done = ((futures[f], f.result()) for f in as_completed(futures))
        for n, f in done:
            figures[n] = f
            if cache is not None:
                cache.put(key(n), f)
            on_step(f"{label(n)}: {rec.gpu_model or 'pool'} wait p95 {_key_wait_s(rec, f) / 60:,.0f} min, "
                    f"pool utilisation {f.pool_utilisation_pct:.1f}% ({f.seconds:.0f} s)")

    _hold_demand(demand)  # for the replays run here (one worker, or a 1-CPU machine)
    # a round runs up to one replay more than the cores (sizes_to_probe), each in a worker of its own
    pool = ProcessPoolExecutor(workers + 1, initializer=_hold_demand, initargs=(demand,)) if workers > 1 else None
    try:
        first = take_kept([0, advised])  # kept ones leave their workers to the sizes between
        replay_round([*first, *sizes_to_probe(enough, advised, workers, fixed=len(first))], pool)
        while True:
            for n in sorted(figures.keys() - enough.keys()):
                enough[n], share[n] = sufficient(rec, rules, figures[0], figures[advised], figures[n])
            todo = sizes_to_probe(enough, advised, workers) if enough[advised] else []
            if not todo:
                break
            replay_round(todo, pool)
    finally:
        if pool is not None:
            pool.shutdown()
        _DEMAND.clear()
    return Search(advised, figures, enough, share)


def search_summary(rec: Recommendation, found: Search, sizes: Mapping[int, Change], rules: dict) -> dict:
    """The search as stored with the advice (whatif_json's `search`): the rule, the smallest sufficient size
    and the curve, one point per size replayed."""
    model = rec.gpu_model or "pool"
    curve = []
    for n in sorted(found.figures):
        f = found.figures[n]
        curve.append({"size": n, "change": "baseline" if n == 0 else sizes[n].describe(),
                      "wait_p95_min": f.wait_p95_s / 60, f"wait_p95_{model}_min": _key_wait_s(rec, f) / 60,
                      "pool_utilisation_pct": f.pool_utilisation_pct, "allocation_rate_pct": f.allocation_rate_pct,
                      "idle_gpu_hours": f.idle_gpu_hours, "share_of_full_effect": found.share_of_full[n],
                      "sufficient": found.enough[n], "replay_seconds": f.seconds})
    smallest = found.smallest
    return {"unit": "nodes" if rec.kind == "add_nodes" else "quota GPUs", "advised": found.advised,
            "smallest_sufficient": smallest,
            "smallest_change": None if smallest is None else sizes[smallest].describe(),
            "decided_by": f"wait_p95_{model}_min", "rule": dict(rules["smallest_change"]), "curve": curve,
            "replays": len(curve), "replay_seconds": sum(p["replay_seconds"] for p in curve),
            "kept_replays": sum(found.figures[n].kept for n in found.figures)}


def smallest_change(home: Path | str, rec: Recommendation, sizes: Mapping[int, Change], *, month: str,
                    rules: dict, on_step: Callable[[str], None] = lambda _m: None) -> Recommendation:
    """The advice with its what-if (the advised change against the baseline, as `whatif` reports it) and the
    search for the smallest sufficient change, on the month's demand read once from the warehouse."""
    from pipelines.capacity.demand import load_demand
    from pipelines.capacity.replay import WhatIfResult, observed
    from pipelines.capacity.replay_cache import ReplayCache, kept_text
    from pipelines.warehouse import Warehouse

    con = Warehouse(Path(home)).connect(read_only=True)
    try:
        on_step("reading the month's demand from the warehouse")
        demand = load_demand(con, month)
        seen = observed(con, demand.start, demand.days)
    finally:
        con.close()
    on_step(f"{len(demand.workload.jobs):,} jobs from {demand.start:%Y-%m-%d}, {demand.days} days; searching the "
            f"smallest sufficient change up to {sizes[max(sizes)].describe()}, idle-reclaim policies "
            f"{'on' if demand.governed else 'off'}")
    began = time.monotonic()
    found = search(demand, rec, sizes, rules, policies=demand.governed, on_step=on_step, cache=ReplayCache(home))
    advised = found.advised
    result = WhatIfResult(demand.start.date(), demand.days, sizes[advised], demand.governed, seen, found.figures[0],
                          found.figures[advised], demand.notes)
    summary = search_summary(rec, found, sizes, rules)
    on_step(f"smallest sufficient change: {summary['smallest_change'] or 'none (the advised change is not enough)'}; "
            f"{summary['replays']} replays ({kept_text(summary)}) in {time.monotonic() - began:.0f} s")
    return with_whatif(smallest_first(rec, summary), {**whatif_summary(rec, result),
                                                      "smallest_change": summary["smallest_change"], "search": summary},
                       rules)


def _sized_text(rec: Recommendation, n: int) -> tuple[str, str]:
    """The advice's action at size n, in English and Chinese (add_nodes and move_quota: what the search sizes)."""
    model = rec.gpu_model
    if rec.kind == "add_nodes":
        gpus = n * rec.evidence.get("gpus_per_node", 8)
        return (f"Add {n} node{'s' if n > 1 else ''} of {model} ({gpus} GPUs)", f"增加 {n} 台 {model} 节点（{gpus} 块 GPU）")
    donor = rec.target.split("->")[0]
    return (f"Move {n} {model} GPU{'s' if n > 1 else ''} of quota from {donor} to {rec.tenant}",
            f"将 {donor} 的 {n} 块 {model} 配额调给 {rec.tenant}")


def smallest_first(rec: Recommendation, summary: dict) -> Recommendation:
    """The advice naming the smallest sufficient change first and the full change beside it, with the replayed
    waits of both (from the search's curve); as it was when the advised size is the smallest or none is."""
    n, advised = summary["smallest_sufficient"], summary["advised"]
    if n is None or n >= advised:
        return rec
    wait = {p["size"]: p[summary["decided_by"]] for p in summary["curve"]}
    model = rec.gpu_model or "pool"
    en, zh = _sized_text(rec, n)
    return replace(
        rec,
        recommendation=(f"{en} first: the smallest change the what-if replay found sufficient ({model} wait p95 "
                        f"{wait[0]:,.0f} -> {wait[n]:,.0f} min; {wait[advised]:,.0f} min with the full change). "
                        f"Full change: {rec.recommendation}"),
        recommendation_zh=(f"先{zh}：模拟回放表明这是足够的最小变更（{model} P95 等待 {wait[0]:,.0f} -> "
                           f"{wait[n]:,.0f} 分钟；完整变更为 {wait[advised]:,.0f} 分钟）。完整变更：{rec.recommendation_zh}"),
    )
