"""Page 1 of the pool's pack: the five questions of a pooling review, answered from the pack's figures.

Each answer reads the pack's own figures and tables (figs.values, figs.tables) or one query on a metrics
view, names what it read (`sources`) and the table that backs it (`evidence`), and takes its status from
the thresholds below. The status functions are pure, so each threshold is tested where it flips."""
from __future__ import annotations

import duckdb
import polars as pl

from pipelines.pack.answers import Answer, Decision, on_coverage
from pipelines.pack.figures import DAYS, Figures, next_month, previous_month

# Q1: how far this month's observed pool wait p95 may be from the what-if's prediction. A replay of last
# month's demand cannot know this month's; within a quarter it guided the decision well, beyond a half it
# did not.
PREDICTION_ON_TRACK_PCT = 25.0
PREDICTION_WATCH_PCT = 50.0
# Q2: right-sizable GPU-hours as a share of the allocated ones: a few percent is the normal slack of
# estimates; beyond 15% a node's worth of GPUs sits in oversized requests.
RIGHTSIZABLE_ON_TRACK_PCT = 5.0
RIGHTSIZABLE_WATCH_PCT = 15.0
# Q3: share of reminders the owner answered by releasing the GPUs: half means reminders work as the
# first, cheap step; under a quarter they are noise and the policies end in reclaims.
SELF_RELEASE_ON_TRACK_PCT = 50.0
SELF_RELEASE_WATCH_PCT = 25.0
# Q4: share of failures whose cause is known (not 'unknown'): under 90% the review argues over guesses.
KNOWN_CAUSE_ON_TRACK_PCT = 90.0
KNOWN_CAUSE_WATCH_PCT = 70.0

Q = {
    "q1": {"en": "Was the judgement before going live accurate?", "zh": "上线前的判断准确吗？"},
    "q2": {"en": "Do resources match the work?", "zh": "资源与工作负载匹配吗？"},
    "q3": {"en": "Are the platform's rules really used?", "zh": "平台规则真正被使用了吗？"},
    "q4": {"en": "Can failures and waits be explained?", "zh": "失败和等待能被解释吗？"},
    "q5": {"en": "Does the next round of expansion rest on data?", "zh": "下一轮扩容或优化有数据支撑吗？"},
}
CONFIDENCE_ZH = {"high": "高", "medium": "中", "low": "低"}
# marts.fct_wait_causes' causes as a reader says them
WAIT_CAUSES = {
    "capacity_bound": {"en": "no free GPU of the kind asked", "zh": "所需型号无空闲GPU"},
    "fragmentation": {"en": "fragmentation (free GPUs, but not on one node or not in the MIG layout asked)",
                      "zh": "碎片化（有空闲GPU，但不在同一节点或MIG布局不符）"},
    "quota_bound": {"en": "the queue's quota", "zh": "队列配额已满"},
    "policy": {"en": "queue policy (priority, limits)", "zh": "队列策略（优先级、限制）"},
}
# the capacity advice's kinds (pipelines/capacity/recommend.py) as the answers say them
KINDS = {
    "add_nodes": {"en": "add nodes", "zh": "增加节点"}, "remove_nodes": {"en": "remove nodes", "zh": "减少节点"},
    "resplit_mig": {"en": "re-split MIG", "zh": "重新划分MIG"}, "move_quota": {"en": "move quota", "zh": "调整配额"},
    "move_to_backfill": {"en": "move to backfill", "zh": "转为回填"},
    "change_queue_limit": {"en": "change a queue limit", "zh": "调整队列限制"},
}


# Q1 with the fair judge (pipelines/capacity/review.py): this month's demand replayed with and without last
# month's advice. Credited is on track; advice that would have helped but was not taken, or a replay that
# did not reproduce the month, is a watch; advice that did not help on this month's demand is an act.
REVIEW_STATUS = {"credited": "on_track", "would_have_helped": "watch", "not_credited": "act", "not_relied_on": "watch"}
REVIEW_SAID = {
    "credited": {"en": "the advice is credited", "zh": "建议有效"},
    "would_have_helped": {"en": "it was not taken, and it would have helped", "zh": "建议未执行，但执行了本会有效"},
    "not_credited": {"en": "it did not help on this month's demand", "zh": "按本月需求它并无帮助"},
    "not_relied_on": {"en": "the replay is not relied on: it missed the observed month beyond tolerance",
                      "zh": "回放与实际月份的偏差超出容差，不作依据"},
}


def _kind(kind: str, lang: str) -> str:
    return KINDS.get(kind, {}).get(lang, kind)


def banded(value: float, on_track: float, watch: float, higher_is_better: bool = True) -> str:
    """on_track / watch / act of a value against its two thresholds (each inclusive on the better side)."""
    if higher_is_better:
        return "on_track" if value >= on_track else "watch" if value >= watch else "act"
    return "on_track" if value <= on_track else "watch" if value <= watch else "act"


def prediction_status(error_pct: float | None) -> str:
    """Q1: no what-if prediction to compare is a watch (the advice was taken on trust)."""
    if error_pct is None:
        return "watch"
    return banded(error_pct, PREDICTION_ON_TRACK_PCT, PREDICTION_WATCH_PCT, higher_is_better=False)


def advice_status(rows: int, confirms: bool | None, within_tolerance: bool | None = None) -> str:
    """Q5: the top advice confirmed by its what-if replay rests on data; contradicted by it, it does not. A
    replay whose baseline missed the observed month beyond tolerance does neither: a watch."""
    if rows == 0 or confirms is None or within_tolerance is False:
        return "watch"
    return "on_track" if confirms else "act"


def _change_pct(value: float | None, previous: float | None) -> float | None:
    return None if value is None or not previous else 100 * (value - previous) / previous


def _ym(month) -> str:
    return month.strftime("%Y-%m")


def _q1(figs: Figures) -> Answer:
    prev = _ym(previous_month(figs.month))
    t = figs.tables["advice_outcome"]
    if t.height == 0:
        return Answer("q1", Q["q1"], {
            "en": f"Not measurable yet: the warehouse holds no capacity advice for {prev}; record it with "
                  f"`gpupool recommend --month {prev}` at the month's end (the monthly schedule does it).",
            "zh": f"暂无法衡量：数据仓库中没有 {prev} 的容量建议；请在月末运行 `gpupool recommend --month {prev}` "
                  f"记录（月度调度会自动执行）。"}, "watch", "advice_outcome", None, ("advice_outcome",))
    top = t.row(0, named=True)
    before, now = top["physical_gpus_previous_month"], top["physical_gpus"]
    # applied: visible only for node advice, and only when both months have the model's inventory
    applied = None if before is None or now is None else \
        {"add_nodes": now > before, "remove_nodes": now < before}.get(top["kind"])
    # the prediction that matches what was done: with the change if it was applied, else without it
    predicted = top["predicted_wait_p95_s"] if applied else top["predicted_baseline_wait_p95_s"]
    observed = top["queue_wait_p95_s"]
    error = None if predicted is None or observed is None or predicted == 0 else \
        100 * abs(observed - predicted) / predicted
    done_en = {True: "applied", False: "not applied"}.get(applied, "not visible in the GPU counts")
    done_zh = {True: "已执行", False: "未执行"}.get(applied, "无法从GPU数量判断是否执行")
    if top.get("review_verdict") in REVIEW_STATUS:
        return _q1_reviewed(top)
    if error is None:
        en = (f"Last month's top advice ({_kind(top['kind'], 'en')}: {top['target']}, {done_en}) has no what-if prediction to "
              f"compare; run `gpupool recommend --month {prev} --whatif-top 1` so next month can check it.")
        zh = (f"上月首要建议（{_kind(top['kind'], 'zh')}：{top['target']}，{done_zh}）没有模拟预测可对比；请运行 "
              f"`gpupool recommend --month {prev} --whatif-top 1`，以便下月核对。")
    else:
        # a replay of last month's demand cannot foresee this month's: the change in demand says how much of
        # the gap is demand rather than the model
        demand = _change_pct(figs.values["allocated_gpu_hours"], figs.previous["allocated_gpu_hours"])
        demand_en = "" if demand is None else f" (allocated GPU-hours {demand:+.1f}% on last month)"
        demand_zh = "" if demand is None else f"（已分配GPU小时较上月 {demand:+.1f}%）"
        en = (f"Last month's top advice ({_kind(top['kind'], 'en')}: {top['target']}, {done_en}) predicted a pool wait p95 of "
              f"{predicted / 60:,.0f} min; this month's was {observed / 60:,.0f} min{demand_en}, {error:.0f}% off.")
        zh = (f"上月首要建议（{_kind(top['kind'], 'zh')}：{top['target']}，{done_zh}）预测资源池P95等待为 {predicted / 60:,.0f} 分钟；"
              f"本月实际为 {observed / 60:,.0f} 分钟{demand_zh}，偏差 {error:.0f}%。")
    return Answer("q1", Q["q1"], {"en": en, "zh": zh}, prediction_status(error), "advice_outcome", error,
                  ("advice_outcome",))


def _q1_reviewed(top: dict) -> Answer:
    """Q1 by the fair judge: this month's demand replayed with and without last month's top advice."""
    verdict, applied = top["review_verdict"], top["review_applied"]
    done_en = {True: "applied", False: "not applied"}.get(applied, "not visible in the pool")
    done_zh = {True: "已执行", False: "未执行"}.get(applied, "无法从资源池判断是否执行")
    with_s, without_s = top["replayed_wait_p95_with_change_s"], top["replayed_wait_p95_without_change_s"]
    cut = None if not without_s else 100 * (without_s - with_s) / without_s
    model = top.get("gpu_model") or "pool"
    en = (f"Last month's top advice ({_kind(top['kind'], 'en')}: {top['target']}, {done_en}), replayed on this month's "
          f"demand: {model} wait p95 {with_s / 60:,.0f} min with it, {without_s / 60:,.0f} min without; "
          f"{REVIEW_SAID[verdict]['en']}.")
    zh = (f"上月首要建议（{_kind(top['kind'], 'zh')}：{top['target']}，{done_zh}）按本月需求回放：执行时{model} P95等待 "
          f"{with_s / 60:,.0f} 分钟，不执行时 {without_s / 60:,.0f} 分钟；{REVIEW_SAID[verdict]['zh']}。")
    return Answer("q1", Q["q1"], {"en": en, "zh": zh}, REVIEW_STATUS[verdict], "advice_outcome", cut,
                  ("advice_outcome",))


def rightsizable_gpu_hours(con: duckdb.DuckDBPyConnection, figs: Figures) -> float:
    """The month's right-sizable GPU-hours, all of them (the spec_gaps table shows the 15 largest gaps)."""
    row = con.sql(f"select coalesce(sum(rightsizable_gpu_hours), 0) from metrics.spec_gaps where {DAYS}",
                  params=[figs.month, next_month(figs.month)]).fetchall()[0]
    return float(row[0])


def _q2(con: duckdb.DuckDBPyConnection, figs: Figures) -> Answer:
    hours, allocated = rightsizable_gpu_hours(con, figs), figs.values["allocated_gpu_hours"] or 0
    share = 100 * hours / allocated if allocated else 0.0
    gap = figs.values["spec_gap_gpus_peak_hour"] or 0
    return Answer("q2", Q["q2"], {
        "en": f"{hours:,.0f} GPU-hours ({share:.1f}% of those allocated) went to requests larger than the work "
              f"used; at the peak hour {gap:,.0f} GPUs were asked in a shape the pool could not offer.",
        "zh": f"{hours:,.0f} GPU小时（占已分配的 {share:.1f}%）用于超出实际需要的申请；高峰时段有 {gap:,.0f} 块GPU的"
              f"申请规格资源池无法提供。"},
        banded(share, RIGHTSIZABLE_ON_TRACK_PCT, RIGHTSIZABLE_WATCH_PCT, higher_is_better=False), "spec_gaps",
        share, ("metrics.spec_gaps.rightsizable_gpu_hours", "allocated_gpu_hours", "spec_gap_gpus_peak_hour"))


def _q3(figs: Figures) -> Answer:
    rate = figs.values["self_release_rate"]
    reminders = int(figs.tables["reminders"]["reminders_applied"].sum() or 0)
    borrowed = float(figs.tables["quotas"]["borrowed_gpu_hours"].sum() or 0)
    approvals = int(figs.values["approvals"] or 0)
    templates = figs.tables["templates"].height
    if rate is None:
        return Answer("q3", Q["q3"], {
            "en": f"No reminder was sent this month, so self-release cannot be judged; {borrowed:,.0f} GPU-hours were "
                  f"borrowed beyond quotas, {approvals} requests approved, {templates} job templates in use.",
            "zh": f"本月未发送提醒，无法评估自行释放；超出配额借用 {borrowed:,.0f} GPU小时，审批 {approvals} 次，"
                  f"使用中的作业模板 {templates} 个。"}, "watch", "reminders", None,
            ("self_release_rate", "reminders", "quotas", "approvals", "templates"))
    return Answer("q3", Q["q3"], {
        "en": f"{rate:.0f}% of {reminders:,} reminders were followed by the owner releasing the GPUs; "
              f"{borrowed:,.0f} GPU-hours were borrowed beyond quotas, {approvals} requests approved, "
              f"{templates} job templates in use.",
        "zh": f"{reminders:,} 次提醒中 {rate:.0f}% 之后由用户自行释放GPU；超出配额借用 {borrowed:,.0f} GPU小时，"
              f"审批 {approvals} 次，使用中的作业模板 {templates} 个。"},
        banded(rate, SELF_RELEASE_ON_TRACK_PCT, SELF_RELEASE_WATCH_PCT), "reminders", rate,
        ("self_release_rate", "reminders", "quotas", "approvals", "templates"))


def _q4(figs: Figures) -> Answer:
    causes = figs.tables["failures_by_cause"]
    total = causes.filter(pl.col("cause") == "all")["failures"].sum()
    unknown = causes.filter(pl.col("cause") == "unknown")["failures"].sum()
    known = 100 * (total - unknown) / total if total else None  # of no failure, no share: never "100 %"
    waits = figs.tables["wait_causes"]
    if waits.height:
        top = waits.row(0, named=True)
        cause = WAIT_CAUSES.get(top["cause"], {"en": top["cause"], "zh": top["cause"]})
        wait_en = f"the largest wait cause was {cause['en']} ({top['cause_share_pct']:.0f}% of waited GPU-hours)"
        wait_zh = f"最主要的等待原因是{cause['zh']}（占等待GPU小时的 {top['cause_share_pct']:.0f}%）"
    else:
        wait_en, wait_zh = "no job waited", "没有作业等待"
    if known is None:
        return Answer("q4", Q["q4"], {"en": f"No attempt failed in the month: no cause to find; {wait_en}.",
                                      "zh": f"本月没有失败的作业尝试，无需查明原因；{wait_zh}。"},
                      "on_track", "failures_by_cause", None, ("failures_by_cause", "wait_causes"))
    return Answer("q4", Q["q4"], {
        "en": f"{known:.0f}% of the month's {total:,} failures have a known cause; {wait_en}.",
        "zh": f"本月 {total:,} 次失败中 {known:.0f}% 原因明确；{wait_zh}。"},
        banded(known, KNOWN_CAUSE_ON_TRACK_PCT, KNOWN_CAUSE_WATCH_PCT), "failures_by_cause", known,
        ("failures_by_cause", "wait_causes"))


def _q5(figs: Figures, track_record: str | None = None) -> Answer:
    """`track_record`: question 1's status. Last month's advice that did not hold up on this month's demand
    ("act") leaves this month's no better than "watch", whatever its own replay says."""
    recs = figs.tables["capacity_recommendations"]
    month = _ym(figs.month)
    if recs.height == 0:
        return Answer("q5", Q["q5"], {
            "en": f"No capacity advice is recorded for {month}: run `gpupool recommend --month {month} --whatif-top 1` "
                  f"(the monthly schedule does it) before deciding on expansion.",
            "zh": f"{month} 没有容量建议记录：请先运行 `gpupool recommend --month {month} --whatif-top 1`"
                  f"（月度调度会自动执行）再决定扩容。"}, "watch", "capacity_recommendations", 0.0,
            ("capacity_recommendations",))
    top = recs.row(0, named=True)
    confirms, within = top["whatif_confirms"], top["whatif_within_tolerance"]
    check_en = {True: "its what-if replay confirms it", False: "its what-if replay does not confirm it"}.get(
        confirms, "no what-if replay was run for it")
    check_zh = {True: "模拟回放验证了该建议", False: "模拟回放未能验证该建议"}.get(confirms, "尚未对其做模拟回放")
    if confirms is not None and within is False:
        check_en = "its what-if replay is not relied on: the replay's baseline missed the observed month beyond tolerance"
        check_zh = "其模拟回放不作依据：回放基线与实际月份的偏差超出容差"
    status = advice_status(recs.height, confirms, within)
    record_en = record_zh = ""
    if track_record == "act":
        status = "watch" if status == "on_track" else status
        record_en = "; but last month's advice did not hold up on this month's demand (question 1)"
        record_zh = "；但上月的建议按本月需求并未奏效（见问题1）"
    return Answer("q5", Q["q5"], {
        "en": f"{recs.height} pieces of advice this month; the top one ({_kind(top['kind'], 'en')}, {top['confidence']} "
              f"confidence, {top['impact_gpu_hours']:,.0f} GPU-hours addressed): {check_en}{record_en}.",
        "zh": f"本月共 {recs.height} 条建议；首要建议（{_kind(top['kind'], 'zh')}，置信度{CONFIDENCE_ZH.get(top['confidence'], top['confidence'])}，"
              f"涉及 {top['impact_gpu_hours']:,.0f} GPU小时）：{check_zh}{record_zh}。"},
        status, "capacity_recommendations", float(recs.height),
        ("capacity_recommendations", "advice_outcome") if record_en else ("capacity_recommendations",))


# the decisions page 1 asks for: advice worth deciding on (not low confidence), at most this many
MAX_ADVICE_DECISIONS = 4


def decisions(figs: Figures) -> list[Decision]:
    """This month's capacity advice of medium or high confidence (approve +N nodes, move quota, change a
    queue limit) and the policies still in shadow mode (enforce them or not). The advice is asked for as
    recorded: where the what-if search found a smaller change sufficient, the record names it first and the
    full change beside it (pipelines/capacity/recommend.py `smallest_first`), so the smallest is asked for."""
    out = []
    recs = figs.tables["capacity_recommendations"].filter(pl.col("confidence") != "low")
    for r in recs.head(MAX_ADVICE_DECISIONS).iter_rows(named=True):
        out.append(Decision({"en": f"Approve: {r['recommendation']}", "zh": f"批准：{r['recommendation_zh']}"},
                            "capacity_recommendations", ("capacity_recommendations",)))
    shadow = (figs.tables["governance_findings"].filter(pl.col("mode") == "shadow")
              .group_by("policy").agg(pl.col("actions").sum(), pl.col("recovered_gpu_hours").sum()).sort("policy"))
    for p in shadow.iter_rows(named=True):
        out.append(Decision({
            "en": f"Enforce policy {p['policy']} or keep it in shadow: it would have taken {p['actions']:,.0f} "
                  f"actions this month.",
            "zh": f"策略 {p['policy']} 是否转为强制执行：本月在影子模式下会执行 {p['actions']:,.0f} 次动作。"},
            "governance_findings", ("governance_findings",)))
    return out


def pool_answers(con: duckdb.DuckDBPyConnection, figs: Figures) -> tuple[list[Answer], list[Decision]]:
    """(answers, decisions) of the pool's pack: the five questions, then the decisions requested. On a partial
    month each answer says so and no status is better than "watch" (answers.on_coverage)."""
    q1 = _q1(figs)
    answers = [q1, _q2(con, figs), _q3(figs), _q4(figs), _q5(figs, q1.status)]
    return on_coverage(answers, figs.coverage), decisions(figs)
