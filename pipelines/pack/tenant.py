"""A tenant's pack, for its team lead: the same machinery as the pool's pack (figures.collect,
render), its queries limited to one tenant (the tenant is each query's last parameter), and its own
page 1: the questions a team lead asks, answered from the pack's figures and tables."""
from __future__ import annotations

import datetime as dt

import duckdb

from pipelines.pack.answers import Answer, Decision, on_coverage
from pipelines.pack.figures import DAYS, Figure, PackSpec, Table, month_sum, next_month
from pipelines.pack.render import TEXT

TENANT_PARTS = ("usage", "quota_waits", "costs", "actions", "advice")

T = "tenant = ?"  # every query's last condition: the pack's tenant


def _sum(column: str, view: str) -> str:
    return f"{month_sum(column, view)} and {T}"


TENANT_FIGURES: tuple[Figure, ...] = (
    # usage
    Figure("allocated_gpu_hours", "usage", "allocated_gpu_hours", "tenant_daily",
           _sum("allocated_gpu_hours", "tenant_daily")),
    Figure("active_gpu_hours", "usage", "active_gpu_hours", "tenant_daily", _sum("active_gpu_hours", "tenant_daily")),
    # the view's ratio over the month's sums (tenant_daily: 100 * active / allocated)
    Figure("utilisation_of_allocated", "usage", "utilisation_of_allocated", "tenant_daily",
           f"select 100.0 * sum(active_gpu_hours) / nullif(sum(allocated_gpu_hours), 0) "
           f"from metrics.tenant_daily where {DAYS} and {T}"),
    Figure("idle_allocated_gpu_hours", "usage", "idle_allocated_gpu_hours", "tenant_daily",
           _sum("idle_allocated_gpu_hours", "tenant_daily")),
    Figure("submissions", "usage", "submissions", "task_daily", _sum("submissions", "task_daily")),
    Figure("failed_jobs", "usage", "failed_jobs", "task_daily", _sum("failed_jobs", "task_daily")),
    # quota and waits
    Figure("quota_gpu_hours", "quota_waits", "quota_gpu_hours", "tenant_quota", _sum("quota_gpu_hours", "tenant_quota")),
    # the view's ratio over the month's sums (tenant_quota: 100 * allocated / quota)
    Figure("quota_usage", "quota_waits", "quota_usage", "tenant_quota",
           f"select 100.0 * sum(allocated_gpu_hours) / nullif(sum(quota_gpu_hours), 0) "
           f"from metrics.tenant_quota where {DAYS} and {T}"),
    Figure("borrowed_gpu_hours", "quota_waits", "borrowed_gpu_hours", "tenant_quota",
           _sum("borrowed_gpu_hours", "tenant_quota")),
    Figure("unused_quota_gpu_hours", "quota_waits", "unused_quota_gpu_hours", "tenant_quota",
           _sum("unused_quota_gpu_hours", "tenant_quota")),
    # over all the tenant's jobs of the month, whatever their queue (queue_month has one row per queue)
    Figure("queue_wait_p95", "quota_waits", "queue_wait_p95", "tenant_month",
           f"select queue_wait_p95_s from metrics.tenant_month where month = ? and {T}", True),
    Figure("jobs_waiting", "quota_waits", "jobs_waiting", "tenant_month",
           f"select jobs_waiting from metrics.tenant_month where month = ? and {T}", True),
    Figure("cancelled_while_queued", "quota_waits", "cancelled_while_queued", "tenant_month",
           f"select cancelled_while_queued from metrics.tenant_month where month = ? and {T}", True),
    # costs
    Figure("total_cost", "costs", "total_cost", "cost_attribution",
           f"select total_cost_usd from metrics.cost_attribution where month = ? and {T}", True),
    Figure("cost_share", "costs", "cost_share", "cost_attribution",
           f"select cost_share_pct from metrics.cost_attribution where month = ? and {T}", True),
    # actions on the tenant's jobs
    Figure("governance_actions", "actions", "governance_actions_by_outcome", "governance_actions",
           _sum("actions", "governance_actions")),
    Figure("recovered_gpu_hours", "actions", "recovered_gpu_hours", "reclaim_ledger",
           _sum("recovered_gpu_hours", "reclaim_ledger")),
    Figure("gpu_hours_lost", "actions", "gpu_hours_lost_by_cause", "failure_causes",
           f"select gpu_hours_lost from metrics.failure_causes where month = ? and cause = 'all' and {T}", True),
    # advice
    Figure("work_lost_gpu_hours", "advice", "work_lost_gpu_hours", "work_lost",
           f"select sum(work_lost_gpu_hours) from metrics.work_lost where month = ? and {T}", True),
    Figure("failed_attempts_without_checkpoint", "advice", "failed_attempts_without_checkpoint", "work_lost",
           f"select sum(attempts_without_checkpoint) from metrics.work_lost where month = ? and {T}", True),
    Figure("checkpoint_policy_breaches", "advice", "checkpoint_policy_breaches", "checkpoint_policy_breaches",
           f"select sum(policy_breaches) from metrics.checkpoint_policy_breaches where month = ? and {T}", True),
)

# what happened to a job after an applied action (metrics.reclaim_ledger's flags), in words
_OUTCOME = ("case when action_kind = 'remind' then "
            "case when is_released_after_reminder then 'released after the reminder' else 'not released' end "
            "when is_false_positive then 'resubmitted within 1 h' else 'GPUs freed' end")

TENANT_TABLES: tuple[Table, ...] = (
    Table("usage_by_day", "usage", "tenant_daily",
          f"select day, sum(allocated_gpu_hours) as allocated_gpu_hours, sum(active_gpu_hours) as active_gpu_hours, "
          f"sum(idle_allocated_gpu_hours) as idle_allocated_gpu_hours from metrics.tenant_daily "
          f"where {DAYS} and {T} group by day order by day",
          ("allocated_gpu_hours", "active_gpu_hours", "idle_allocated_gpu_hours"),
          chart=("day", ("allocated_gpu_hours", "active_gpu_hours", "idle_allocated_gpu_hours"), "line"),
          title={"en": "Our GPU-hours by day: held, used, idle", "zh": "每日GPU小时：占用、使用、空闲"}),
    Table("usage_by_model", "usage", "tenant_daily",
          f"select gpu_model, sum(allocated_gpu_hours) as allocated_gpu_hours, sum(active_gpu_hours) as active_gpu_hours, "
          f"sum(idle_allocated_gpu_hours) as idle_allocated_gpu_hours, "
          f"100.0 * sum(active_gpu_hours) / nullif(sum(allocated_gpu_hours), 0) as utilisation_of_allocated_pct, "
          f"max(peak_allocated_gpus) as peak_allocated_gpus from metrics.tenant_daily "
          f"where {DAYS} and {T} group by gpu_model order by allocated_gpu_hours desc, gpu_model",
          ("allocated_gpu_hours", "active_gpu_hours", "idle_allocated_gpu_hours", "utilisation_of_allocated",
           "peak_allocated_gpus"),
          title={"en": "Our usage by GPU model", "zh": "按GPU型号的使用"}),
    Table("quota", "quota_waits", "tenant_quota",
          f"select gpu_model, max(quota_gpus) as quota_gpus, sum(quota_gpu_hours) as quota_gpu_hours, "
          f"sum(allocated_gpu_hours) as allocated_gpu_hours, "
          f"100.0 * sum(allocated_gpu_hours) / nullif(sum(quota_gpu_hours), 0) as quota_usage_pct, "
          f"sum(borrowed_gpu_hours) as borrowed_gpu_hours, sum(unused_quota_gpu_hours) as unused_quota_gpu_hours "
          f"from metrics.tenant_quota where {DAYS} and {T} group by gpu_model order by gpu_model",
          ("quota_gpu_hours", "allocated_gpu_hours", "quota_usage", "borrowed_gpu_hours", "unused_quota_gpu_hours"),
          chart=("gpu_model", ("quota_gpu_hours", "allocated_gpu_hours"), "bar"),
          title={"en": "Our quota: used, borrowed above it, left unused", "zh": "配额：使用、超额借用、未用"}),
    Table("waits", "quota_waits", "queue_month",
          f"select queue, submissions, jobs_started, queue_wait_p50_s, queue_wait_p95_s, jobs_waiting, "
          f"waiting_age_max_s, cancelled_while_queued, preemptions from metrics.queue_month "
          f"where month = ? and {T} order by queue",
          ("submissions", "jobs_started", "queue_wait_p50", "queue_wait_p95", "jobs_waiting", "waiting_age_max",
           "cancelled_while_queued", "preemptions"), monthly=True,
          title={"en": "Our waits by queue (percentiles over the month's jobs)",
                 "zh": "各队列等待（按本月作业计算的分位数）"}),
    Table("wait_causes", "quota_waits", "wait_causes",
          f"select cause, sum(waited_hours) as waited_hours, sum(waited_gpu_hours) as waited_gpu_hours "
          f"from metrics.wait_causes where {DAYS} and {T} group by cause order by waited_gpu_hours desc, cause",
          ("waited_hours_by_cause", "waited_gpu_hours_by_cause"), chart=("cause", "waited_gpu_hours", "bar"),
          title={"en": "Why our jobs waited", "zh": "作业等待的原因"}),
    Table("costs", "costs", "cost_attribution",
          f"select allocated_gpu_hours, allocated_cost_usd, shared_unallocated_cost_usd, total_cost_usd, cost_share_pct "
          f"from metrics.cost_attribution where month = ? and {T}",
          ("allocated_gpu_hours", "allocated_cost", "shared_unallocated_cost", "total_cost", "cost_share"), monthly=True,
          title={"en": "Our costs", "zh": "成本"}),
    Table("actions_by_policy", "actions", "governance_actions",
          f"select policy, mode, outcome, sum(actions) as actions, sum(recovered_gpu_hours) as recovered_gpu_hours, "
          f"sum(false_positives) as false_positives "
          f"from metrics.governance_actions where {DAYS} and {T} group by policy, mode, outcome "
          f"order by actions desc, policy, mode, outcome",
          ("governance_actions_by_outcome", "recovered_gpu_hours"),
          title={"en": "What the pool's policies did to our jobs", "zh": "资源池策略对作业的处理"}),
    # every applied reclaim, preemption and reminder on the tenant's jobs, with the policy's reason: its kind
    # (a key with its labels in pipelines/labels.py) and the policy's own words as it logged them, in English
    # (the Chinese pack shows the kind only: render.ENGLISH_PROSE; the appendix keeps both)
    Table("actions_on_jobs", "actions", "reclaim_ledger",
          f"select acted_at, job_id, job_name, user_name, action_kind, policy, policy_kind, reason, {_OUTCOME} as outcome, "
          f"gpus_freed as gpus_released, recovered_gpu_hours from metrics.reclaim_ledger where {DAYS} and {T} "
          f"order by acted_at, job_id limit 60",
          ("recovered_gpu_hours",),
          title={"en": "Actions on our jobs, and why", "zh": "对作业采取的动作及原因"}),
    Table("failures", "actions", "failure_causes",
          f"select cause, attempts, failures, failure_rate_pct, gpu_hours_lost from metrics.failure_causes "
          f"where month = ? and {T} order by cause = 'all' desc, gpu_hours_lost desc, cause",
          ("attempts_by_cause", "failures_by_cause", "attempt_failure_rate_by_cause", "gpu_hours_lost_by_cause"),
          monthly=True, title={"en": "Why our attempts ended", "zh": "作业尝试结束的原因"}),
    # the month's submitted jobs per template: where GPU-hours sit idle, and which carry a checkpoint policy
    Table("templates", "advice", "job_summary",
          f"select coalesce(template, 'none') as template, count(*) as jobs, "
          f"sum(allocated_gpu_hours) as allocated_gpu_hours, sum(idle_gpu_hours) as idle_gpu_hours, "
          f"100.0 * sum(active_gpu_hours) / nullif(sum(allocated_gpu_hours), 0) as utilisation_of_allocated_pct, "
          f"quantile_cont(peak_fb_used_pct, 0.95) as peak_fb_used_pct, "
          f"count(*) filter (where has_checkpoint_policy) as jobs_with_checkpoint_policy, "
          f"sum(retry_gpu_hours) as retry_gpu_hours from metrics.job_summary "
          f"where submitted_at >= ? and submitted_at < ? and {T} group by all order by allocated_gpu_hours desc, template",
          ("allocated_gpu_hours", "idle_allocated_gpu_hours", "utilisation_of_allocated", "memory_watermark_share",
           "retry_gpu_hours"),
          title={"en": "Our templates: idle GPU-hours, memory used, checkpoint policies",
                 "zh": "模板：空闲GPU小时、显存使用、检查点策略"}),
    Table("checkpointing", "advice", "work_lost",
          f"select template, cast(sum(attempts) as bigint) as attempts, "
          f"cast(sum(attempts_without_checkpoint) as bigint) as attempts_without_checkpoint, "
          f"sum(work_lost_gpu_hours) as work_lost_gpu_hours, "
          f"sum(work_lost_without_checkpoint_gpu_hours) as work_lost_without_checkpoint_gpu_hours "
          f"from metrics.work_lost where month = ? and {T} group by template "
          f"order by work_lost_without_checkpoint_gpu_hours desc, template",
          ("work_lost_gpu_hours", "failed_attempts_without_checkpoint"), monthly=True,
          title={"en": "Work lost at interruptions, by template", "zh": "中断损失的工作（按模板）"}),
)

TENANT = PackSpec("tenant", TENANT_PARTS, TENANT_FIGURES, TENANT_TABLES, part_titles={
    "usage": {"en": "1. Our usage", "zh": "一、使用"},
    "quota_waits": {"en": "2. Quota, borrowing and waits", "zh": "二、配额、借用与等待"},
    "costs": {"en": "3. Costs", "zh": "三、成本"},
    "actions": {"en": "4. What the pool did to our jobs, and why", "zh": "四、资源池对作业的处理及原因"},
    "advice": {"en": "5. What would save us GPU-hours", "zh": "五、节省GPU小时的建议"},
})

# Status thresholds of page 1 (on track / watch / act). Why these values:
# a team's allocated GPUs doing work less than 35% of the time is mostly idle reservation (act); below 60%
# there is room to give GPUs back (watch). The pool reclaims at ~0% activity, far below both.
UTILISATION_ACT_PCT, UTILISATION_WATCH_PCT = 35.0, 60.0
# quota used below half: the quota is a candidate to move to a tenant that waits (act); below 70%: watch
QUOTA_ACT_PCT, QUOTA_WATCH_PCT = 50.0, 70.0
# a 95th-percentile wait over 2 h costs a working day's iteration (act); over 30 min users notice (watch)
WAIT_ACT_S, WAIT_WATCH_S = 2 * 3600.0, 30 * 60.0
# advice: a template is worth right-sizing when its GPUs work under this share of the time it holds them,
# over at least a GPU-day held; worth checkpointing when its interrupted attempts lost a GPU-day without a
# checkpoint (smaller amounts are noise in a month)
RIGHTSIZE_UTILISATION_PCT, RIGHTSIZE_MIN_GPU_HOURS = 35.0, 24.0
CHECKPOINT_MIN_LOST_GPU_HOURS = 24.0
# idle GPU-hours and work lost at interruptions, over this share of the GPU-hours held: act; over the smaller:
# watch (a sixth of the GPU-hours is a team's worth asking about; a third is money spent for nothing)
SAVABLE_ACT_PCT, SAVABLE_WATCH_PCT = 30.0, 15.0
# page 1 asks for a few decisions, the largest: at most this many of each kind of advice
ADVICE_PER_KIND = 2


def _status(value: float | None, act: float, watch: float, high_is_bad: bool) -> str:
    """on_track / watch / act for a value against its thresholds (no value: watch, the data is missing)."""
    if value is None:
        return "watch"
    if high_is_bad:
        return "act" if value >= act else "watch" if value >= watch else "on_track"
    return "act" if value < act else "watch" if value < watch else "on_track"


def _duration(seconds: float | None) -> dict[str, str]:
    """A wait in words: minutes below two hours, else hours."""
    if seconds is None:
        return dict(NO_DATA)
    if seconds < 7200:
        return {"en": f"{seconds / 60:,.0f} minutes", "zh": f"{seconds / 60:,.0f}分钟"}
    return {"en": f"{seconds / 3600:,.1f} hours", "zh": f"{seconds / 3600:,.1f}小时"}


NO_DATA = TEXT["no_data"]  # a figure the month lacks, in the pack's language


def _n(value: float | None, digits: int = 0, lang: str = "en") -> str:
    return NO_DATA[lang] if value is None else f"{value:,.{digits}f}"


def _zh(value: float | None, digits: int = 0) -> str:
    """_n for the Chinese sentences."""
    return _n(value, digits, "zh")


def _last(figs, key: str, text: dict[str, str] | None = None) -> dict[str, str]:
    """The previous month's value of a figure, to follow an answer's number ('' when it has none)."""
    before = figs.previous.get(key)
    if before is None:
        return {"en": "", "zh": ""}
    shown = text or {"en": _n(before, 1), "zh": _zh(before, 1)}
    return {"en": f" (last month {shown['en']})", "zh": f"（上月{shown['zh']}）"}


def tenant_answers(con: duckdb.DuckDBPyConnection, figs) -> tuple[list[Answer], list[Decision]]:
    """Page 1 of a tenant pack: (answers, decisions), every number one of the pack's figures or table
    cells (`con` is unused: all it needs was collected)."""
    v, tables = figs.values, figs.tables
    answers = []

    util, idle, held = v["utilisation_of_allocated"], v["idle_allocated_gpu_hours"], v["allocated_gpu_hours"]
    was = _last(figs, "utilisation_of_allocated", {
        "en": f"{_n(figs.previous['utilisation_of_allocated'], 1)}%",
        "zh": f"{_zh(figs.previous['utilisation_of_allocated'], 1)}%"})
    answers.append(Answer(
        "used", {"en": "Did we use the GPUs we held?", "zh": "我们占用的GPU用上了吗？"},
        {"en": f"Our GPUs did work {_n(util, 1)}% of the {_n(held)} GPU-hours we held{was['en']}; "
               f"{_n(idle)} GPU-hours sat idle.",
         "zh": f"占用的{_zh(held)} GPU小时中有{_zh(util, 1)}%在工作{was['zh']}；{_zh(idle)} GPU小时空闲。"},
        _status(util, UTILISATION_ACT_PCT, UTILISATION_WATCH_PCT, high_is_bad=False), "usage_by_model", util,
        ("utilisation_of_allocated", "allocated_gpu_hours", "idle_allocated_gpu_hours")))

    quota, borrowed = v["quota_usage"], v["borrowed_gpu_hours"]
    if quota is None:  # no quota: every GPU-hour was borrowed from the shared pool
        said = {"en": f"We hold no quota: all {_n(held)} GPU-hours we used were borrowed from the pool.",
                "zh": f"我们没有配额：使用的{_zh(held)} GPU小时全部借自资源池。"}
    else:
        # per GPU model: a team can borrow above its quota of one model and leave another's unused
        said = {"en": f"We used {_n(quota, 1)}% of our quota's {_n(v['quota_gpu_hours'])} GPU-hours: we borrowed "
                      f"{_n(borrowed)} GPU-hours above it where it was short and left {_n(v['unused_quota_gpu_hours'])} "
                      f"unused where it was not.",
                "zh": f"配额{_zh(v['quota_gpu_hours'])} GPU小时用了{_zh(quota, 1)}%：不足处超额借用{_zh(borrowed)} GPU小时，"
                      f"其余处未用{_zh(v['unused_quota_gpu_hours'])} GPU小时。"}
    answers.append(Answer(
        "quota", {"en": "Did we use our quota, and did we borrow?", "zh": "配额用了多少？是否借用？"}, said,
        _status(quota, QUOTA_ACT_PCT, QUOTA_WATCH_PCT, high_is_bad=False), "quota", quota,
        ("quota_usage", "quota_gpu_hours", "borrowed_gpu_hours", "unused_quota_gpu_hours")))

    wait = v["queue_wait_p95"]
    was = _last(figs, "queue_wait_p95", _duration(figs.previous["queue_wait_p95"]))
    answers.append(Answer(
        "waits", {"en": "Are our jobs waiting?", "zh": "作业在排队等待吗？"},
        {"en": f"95% of the jobs we started this month waited under {_duration(wait)['en']}{was['en']}; "
               f"{_n(v['jobs_waiting'])} were still waiting at the month's end and "
               f"{_n(v['cancelled_while_queued'])} were cancelled while queued.",
         "zh": f"本月启动的作业95%等待少于{_duration(wait)['zh']}{was['zh']}；"
               f"月末仍有{_zh(v['jobs_waiting'])}个在等待，{_zh(v['cancelled_while_queued'])}个在排队时被取消。"},
        _status(wait, WAIT_ACT_S, WAIT_WATCH_S, high_is_bad=True), "waits", wait,
        ("queue_wait_p95", "jobs_waiting", "cancelled_while_queued")))

    actions = v["governance_actions"]
    top = tables["actions_by_policy"]
    top_policy = top["policy"][0] if top.height else None
    # reclaims whose job was resubmitted within the hour (the view's false positives)
    false_pos = int(top["false_positives"].sum() or 0)
    answers.append(Answer(
        "actions", {"en": "What did the pool do to our jobs, and why?", "zh": "资源池对我们的作业做了什么？为什么？"},
        {"en": f"The pool's policies took {_n(actions)} actions on our jobs (most of them by the {top_policy or 'no'} policy), "
               f"recovering {_n(v['recovered_gpu_hours'])} GPU-hours; "
               + (f"{false_pos} reclaimed jobs were resubmitted within the hour (still wanted)." if false_pos
                  else "no reclaimed job was resubmitted within the hour."),
         "zh": f"资源池策略对作业采取了{_zh(actions)}次动作（最多的是策略{top_policy or '无'}），回收{_zh(v['recovered_gpu_hours'])} "
               f"GPU小时；" + (f"{false_pos}个被回收的作业在1小时内重新提交（仍有需要）。" if false_pos
                             else "没有被回收的作业在1小时内重新提交。")},
        # a resubmission within the hour means the job was still wanted: a reclaim to look at with the operators
        "act" if false_pos else "watch" if actions else "on_track", "actions_by_policy", actions,
        ("governance_actions", "recovered_gpu_hours", "actions_by_policy")))

    lost = v["work_lost_gpu_hours"]
    # the share of the held GPU-hours only places the status; the sentence shows the figures themselves
    savable_pct = None if not held or idle is None or lost is None else 100.0 * (idle + lost) / held
    answers.append(Answer(
        "savings", {"en": "What would save us GPU-hours and money?", "zh": "怎样节省GPU小时和成本？"},
        {"en": f"{_n(idle)} idle GPU-hours and {_n(lost)} GPU-hours of work lost at interruptions "
               f"(our month cost {_n(v['total_cost'])} USD).",
         "zh": f"空闲{_zh(idle)} GPU小时，中断损失{_zh(lost)} GPU小时（本月成本{_zh(v['total_cost'])}美元）。"},
        _status(savable_pct, SAVABLE_ACT_PCT, SAVABLE_WATCH_PCT, high_is_bad=True), "templates", idle,
        ("idle_allocated_gpu_hours", "work_lost_gpu_hours", "total_cost")))
    return on_coverage(answers, figs.coverage), _decisions(figs)  # partial month: said, capped at "watch"


def _decisions(figs) -> list[Decision]:
    """The advice for the team: right-size the templates whose GPUs mostly do no work, add checkpointing where
    interruptions lost work, and move jobs without a template onto the template most of the work uses."""
    rightsize, checkpoint = [], []
    templates, checkpoints = figs.tables["templates"], figs.tables["checkpointing"]
    with_policy = {r["template"]: r["jobs_with_checkpoint_policy"] >= r["jobs"] / 2 for r in templates.iter_rows(named=True)}
    for row in templates.iter_rows(named=True):  # largest first (the table's order)
        util = row["utilisation_of_allocated_pct"]
        if row["template"] != "none" and util is not None and util < RIGHTSIZE_UTILISATION_PCT \
                and (row["allocated_gpu_hours"] or 0) >= RIGHTSIZE_MIN_GPU_HOURS:
            rightsize.append(Decision(
                {"en": f"Right-size {row['template']} jobs: their GPUs did work {util:.0f}% of the "
                       f"{row['allocated_gpu_hours']:,.0f} GPU-hours they held (ask for fewer GPUs or a MIG slice, "
                       f"or release them sooner).",
                 "zh": f"调整{row['template']}作业的规格：占用的{row['allocated_gpu_hours']:,.0f} GPU小时中GPU只有"
                       f"{util:.0f}%在工作（申请更少GPU或MIG切片，或及早释放）。"},
                "templates", ("templates",)))
    for row in checkpoints.iter_rows(named=True):  # most work lost first
        lost = row["work_lost_without_checkpoint_gpu_hours"] or 0
        if lost < CHECKPOINT_MIN_LOST_GPU_HOURS:
            continue
        lost_by = (f"{row['attempts_without_checkpoint']:,} interrupted attempts without a checkpoint lost "
                   f"{lost:,.0f} GPU-hours")
        lost_zh = f"{row['attempts_without_checkpoint']:,}次无检查点的中断尝试损失了{lost:,.0f} GPU小时"
        # a template whose jobs already declare a checkpoint policy needs checkpoints more often, not a policy
        text = ({"en": f"Checkpoint template {row['template']}'s jobs more often: {lost_by}.",
                 "zh": f"模板{row['template']}的作业需更频繁地保存检查点：{lost_zh}。"}
                if with_policy.get(row["template"]) else
                {"en": f"Add a checkpoint policy to template {row['template']}: {lost_by}.",
                 "zh": f"为模板{row['template']}加上检查点策略：{lost_zh}。"})
        checkpoint.append(Decision(text, "checkpointing", ("checkpointing",)))
    out = rightsize[:ADVICE_PER_KIND] + checkpoint[:ADVICE_PER_KIND]
    untemplated = templates.filter(templates["template"] == "none")
    named = templates.filter(templates["template"] != "none")
    if untemplated.height and named.height:
        jobs, target = untemplated["jobs"][0], named["template"][0]
        out.append(Decision(
            {"en": f"Submit the {jobs} jobs without a template through template {target} (the one most of our "
                   f"GPU-hours use), so that its limits and checkpoint policy apply.",
             "zh": f"没有模板的{jobs}个作业改用模板{target}（我们大部分GPU小时所用的模板），以适用其限制与检查点策略。"},
            "templates", ("templates",)))
    return out


def tenants_of_month(con: duckdb.DuckDBPyConnection, month: dt.date) -> list[str]:
    """The tenants with allocations in the month, the ones a tenant pack is built for."""
    rows = con.sql(f"select distinct tenant from metrics.tenant_daily where {DAYS} and tenant is not null "
                   "order by tenant", params=[month, next_month(month)]).fetchall()
    return [r[0] for r in rows]
