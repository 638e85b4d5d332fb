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
Confidence (0..1): the share of the month's weeks the evidence shows up in, the trend's direction
and, for the advice the what-if replays, whether the replay confirms the effect.
"""
from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import duckdb
import yaml

from pipelines.capacity.store import Recommendation
from pipelines.paths import REPO_ROOT

RULES_PATH = REPO_ROOT / "models" / "capacity" / "rules.yml"


class RulesError(ValueError):
    """models/capacity/rules.yml is missing a rule or a threshold."""


def load_rules(path: Path | None = None) -> dict:
    path = Path(path or RULES_PATH)
    rules = yaml.safe_load(path.read_text())
    needed = ("version", "add_nodes", "remove_nodes", "resplit_mig", "move_quota", "move_to_backfill",
              "change_queue_limit")
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


def _weeks_share(con, first: dt.date, following: dt.date, cause: str, field: str, value: str) -> tuple[int, int]:
    """(weeks of the month with this cause's waits for the field's value, weeks with data)."""
    row = con.execute(
        f"""select count(distinct case when cause = ? and {field} = ? and waited_gpu_hours > 0
                                   then date_trunc('week', day) end),
                   count(distinct date_trunc('week', day))
            from metrics.wait_causes where day >= ? and day < ?""",
        [cause, value, first, following]).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


def _confidence(weeks_seen: int, weeks: int, rules: dict, *, trend_agrees: bool | None = None) -> float:
    """Half from how steadily the evidence shows up across the weeks, a fifth from the trend."""
    steady = weeks_seen / weeks if weeks else 0.0
    score = 0.3 + 0.4 * steady
    if weeks_seen >= rules.get("min_weeks_for_high_confidence", 3):
        score += 0.1
    if trend_agrees is True:
        score += 0.15
    elif trend_agrees is False:
        score -= 0.15
    return max(0.0, min(score, 0.95))


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
    for m in models:
        share = m["capacity_bound_gpu_hours"] / m["capacity_gpu_hours"] if m["capacity_gpu_hours"] else 0.0
        p95_share = m["p95_allocated_gpus"] / m["capacity_gpus"] if m["capacity_gpus"] else 0.0
        if share < r["min_capacity_bound_share"] or p95_share < r["min_p95_allocated_share"]:
            continue
        per_node = m["gpus_per_node"] or 8
        short = m["short_gpus_avg_day"] or m["capacity_bound_gpu_hours"] / max(_hours(first, following), 1)
        nodes = max(1, min(r["max_nodes"], math.ceil(short / per_node)))
        seen, weeks = _weeks_share(con, first, following, "capacity_bound", "gpu_model", m["gpu_model"])
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
            confidence_score=_confidence(seen, weeks, rules,
                                         trend_agrees=None if m["demand_slope"] is None else m["demand_slope"] >= 0),
            impact_gpu_hours=float(m["capacity_bound_gpu_hours"]),
            evidence={"capacity_bound_gpu_hours": m["capacity_bound_gpu_hours"], "capacity_bound_share": share,
                      "capacity_gpus": m["capacity_gpus"], "p95_allocated_gpus": m["p95_allocated_gpus"],
                      "peak_allocated_gpus": m["peak_allocated_gpus"], "short_gpus_avg_day": short,
                      "short_gpus_max_day": m["short_gpus_max_day"], "gpus_per_node": per_node,
                      "weeks_with_waits": seen, "weeks": weeks, "demand_slope_gpu_hours_per_week": m["demand_slope"],
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
        idle_hours = nodes * per_node * _hours(first, following)
        out.append(Recommendation(
            kind="remove_nodes", target=model, gpu_model=model, quantity=nodes, unit="nodes",
            recommendation=(f"Remove or lend {nodes} node{'s' if nodes > 1 else ''} of {model}: the busiest hour held "
                            f"{m['peak_allocated_gpus']:.0f} of {m['capacity_gpus']:.0f} GPUs and nobody waited for a "
                            f"{model}; {r['headroom_gpus_above_peak']} GPUs of headroom stay above the peak."),
            recommendation_zh=(f"减少或出借 {nodes} 台 {model} 节点：最忙的一小时只占用 {m['peak_allocated_gpus']:.0f}/"
                               f"{m['capacity_gpus']:.0f} 块，且没有作业因缺少 {model} 而等待；峰值之上仍保留 "
                               f"{r['headroom_gpus_above_peak']} 块余量。"),
            confidence_score=_confidence(int(weeks["fitting"] or 0), int(weeks["weeks"] or 0), rules,
                                         trend_agrees=None if m["p95_slope"] is None else m["p95_slope"] <= 0),
            impact_gpu_hours=float(idle_hours),
            evidence={"capacity_gpus": m["capacity_gpus"], "peak_allocated_gpus": m["peak_allocated_gpus"],
                      "p95_allocated_gpus": m["p95_allocated_gpus"], "capacity_bound_share": share,
                      "gpus_per_node": per_node, "weeks_fitting": weeks["fitting"], "weeks": weeks["weeks"],
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
    """Every rule over the month, most GPU-hours addressed first."""
    rules = rules or load_rules()
    first, following = month_bounds(month)
    found = [rec for rule in RULES for rec in rule(con, first, following, rules)]
    return sorted(found, key=lambda rec: (-rec.impact_gpu_hours, rec.kind, rec.target))


def with_whatif(rec: Recommendation, result: dict) -> Recommendation:
    """The replay's predicted effect attached; confidence up when it confirms the advice, down when not."""
    confirms = result.get("confirms")
    score = rec.confidence_score + (0.15 if confirms else -0.2 if confirms is False else 0.0)
    return replace(rec, whatif=result, confidence_score=max(0.0, min(score, 0.95)))


# -- the what-if of a recommendation -------------------------------------------------------------


def _queue_quota(con, tenant: str, model: str) -> tuple[str, float] | None:
    """The tenant's queue holding most quota of the model, and that quota (metrics.queue_rules)."""
    row = con.execute("""select queue, quota_gpus from metrics.queue_rules
                         where tenant = ? and gpu_model = ? and quota_gpus > 0
                         order by quota_gpus desc, queue limit 1""", [tenant, model]).fetchone()
    return None if row is None else (row[0], float(row[1]))


def whatif_change(con, rec: Recommendation):
    """The replay change that tests this advice, or None when the replay cannot express it."""
    from pipelines.capacity.replay import Change

    if rec.kind == "add_nodes":
        return Change(add_nodes={rec.gpu_model: int(rec.quantity)})
    if rec.kind == "remove_nodes":
        return Change(add_nodes={rec.gpu_model: -int(rec.quantity)})
    if rec.kind == "move_quota":
        donor_tenant = rec.target.split("->")[0]
        donor, receiver = _queue_quota(con, donor_tenant, rec.gpu_model), _queue_quota(con, rec.tenant, rec.gpu_model)
        if donor is None or receiver is None:
            return None
        return Change(quotas={(donor[0], rec.gpu_model): max(donor[1] - rec.quantity, 0.0),
                              (receiver[0], rec.gpu_model): receiver[1] + rec.quantity})
    return None


def whatif_summary(rec: Recommendation, result) -> dict:
    """What the replay predicts for the advice's model (or the pool), and whether it confirms it."""
    b, c = result.baseline, result.changed
    model = rec.gpu_model
    key_b = b.wait_p95_by_model_s.get(model, b.wait_p95_s) if model else b.wait_p95_s
    key_c = c.wait_p95_by_model_s.get(model, c.wait_p95_s) if model else c.wait_p95_s
    if rec.kind == "remove_nodes":  # fewer GPUs must not make anyone wait longer
        confirms = key_c <= key_b * 1.05 + 60
    else:
        confirms = key_c < key_b * 0.95
    return {
        "change": result.change.describe(), "policies": result.policies,
        "baseline_within_tolerance": result.within_tolerance,
        "wait_p95_min": {"observed": result.observed.wait_p95_s / 60, "baseline": b.wait_p95_s / 60,
                         "changed": c.wait_p95_s / 60},
        "wait_p50_min": {"baseline": b.wait_p50_s / 60, "changed": c.wait_p50_s / 60},
        f"wait_p95_{model or 'pool'}_min": {"baseline": key_b / 60, "changed": key_c / 60},
        "pool_utilisation_pct": {"baseline": b.pool_utilisation_pct, "changed": c.pool_utilisation_pct},
        "idle_gpu_hours": {"baseline": b.idle_gpu_hours, "changed": c.idle_gpu_hours},
        "confirms": confirms,
        "replay_seconds": b.seconds + c.seconds,
    }
