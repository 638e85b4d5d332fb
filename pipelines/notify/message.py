"""A reminder's words, in English or Chinese: pure composition, no transport.

`Reminder.of` reads one delivered remind step (a `PlannedAction` and when it was decided): the job,
its GPUs (host/index, from the finding's per-GPU evidence), how long they have been idle and the
figures (mean activity, window, memory), and the step the policy takes next with its due time (the
planner's `next_step`). `compose` turns one user's reminders into one `Message`: a single reminder,
or a digest listing them all. Chinese follows pipelines/labels.py: no space between Chinese and
Latin letters or numbers.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from pipelines.clock import duration_text, parse_utc
from pipelines.policies.model import PlannedAction

LANGUAGES = ("en", "zh")

TEXT: dict[str, dict[str, str]] = {
    "subject": {"en": "[gpupool] Idle GPUs: job {job} holds {gpus} idle GPU(s) on {hosts}",
                "zh": "[gpupool] GPU空闲提醒：作业{job}在{hosts}上有{gpus}块GPU空闲"},
    "digest_subject": {"en": "[gpupool] Idle GPUs: {n} of your jobs hold idle GPUs",
                       "zh": "[gpupool] GPU空闲提醒：您有{n}个作业的GPU空闲"},
    "flag_subject": {"en": "[gpupool] Job {job}: flagged by policy {policy}",
                     "zh": "[gpupool] 作业{job}：触发策略{policy}"},
    "flag_digest_subject": {"en": "[gpupool] {n} of your jobs need attention",
                            "zh": "[gpupool] 您有{n}个作业需要处理"},
    "flag_intro": {"en": "your job was flagged by a GPU pool policy.", "zh": "您的作业触发了GPU资源池的治理策略。"},
    "digest_flag_intro": {"en": "{n} of your jobs were flagged by GPU pool policies.",
                          "zh": "您有{n}个作业触发了GPU资源池的治理策略。"},
    "seen": {"en": "Seen from {since} to {until} UTC (policy {policy} v{version})",
             "zh": "发现于{since}至{until}（UTC）（策略{policy} v{version}）"},
    "greeting": {"en": "Hello {user},", "zh": "{user}，您好："},
    "intro": {"en": "the GPUs below are held by your job and have been idle.",
              "zh": "您的作业占用的以下GPU一直处于空闲状态。"},
    "digest_intro": {"en": "{n} of your jobs hold GPUs that have been idle.",
                     "zh": "您有{n}个作业占用的GPU一直处于空闲状态。"},
    "job": {"en": "Job {job} (attempt {attempt}; tenant {tenant}, queue {queue}, scheduler {engine})",
            "zh": "作业{job}（第{attempt}次尝试；租户{tenant}，队列{queue}，调度器{engine}）"},
    "gpus": {"en": "GPUs: {slots} ({flagged} of the {held} GPUs the job holds)",
             "zh": "GPU：{slots}（作业共占用{held}块，其中{flagged}块空闲）"},
    "idle": {"en": "Idle for {duration}, since {since} UTC (policy {policy} v{version})",
             "zh": "已空闲{duration}，自{since}（UTC）起（策略{policy} v{version}）"},
    "activity": {"en": "Evidence: mean GPU activity {observed} (threshold {threshold}{window})",
                 "zh": "依据：GPU平均活跃度{observed}（阈值{threshold}{window}）"},
    "window": {"en": ", window {window}", "zh": "，窗口{window}"},
    "figure": {"en": "Evidence: {metric} {observed} (threshold {threshold})",
               "zh": "依据：{metric}{observed}（阈值{threshold}）"},
    "gpu_line": {"en": "  {slot}: activity {activity}, idle {idle}, memory used at most {memory}",
                 "zh": "  {slot}：活跃度{activity}，空闲{idle}，显存最多使用{memory}"},
    "next": {"en": "Next: {what} at {due} UTC (in {delay}) unless the GPUs are used again.",
             "zh": "下一步：若GPU仍未使用，将于{due}（UTC，{delay}后）{what}。"},
    "next_flag": {"en": "Next: {what} at {due} UTC (in {delay}) unless the condition has ended by then.",
                  "zh": "下一步：若情况未解除，将于{due}（UTC，{delay}后）{what}。"},
    "next_none": {"en": "Next: nothing is done automatically; this is a reminder.",
                  "zh": "下一步：不会自动执行任何操作，仅作提醒。"},
    "next_instead": {"en": "Next: no automatic {what}: {why}.", "zh": "下一步：不会自动{what}：{why}。"},
    "exemption": {"en": "Need the GPUs kept? Ask the platform team for an exemption: an entry naming your tenant "
                        "(and, if you like, the policy, queue or job), a reason and an expiry date; while it "
                        "lasts nothing is reclaimed. Done with the job? End it to free the GPUs.",
                  "zh": "需要保留这些GPU？请向平台团队申请豁免：写明租户（可细化到策略、队列或作业）、原因和到期时间，"
                        "豁免有效期内不会回收。作业已完成？请结束作业以释放GPU。"},
    "contact": {"en": "Exemptions: {contact}", "zh": "申请豁免：{contact}"},
    "footer": {"en": "Sent by gpupool governance; reminder {key}.", "zh": "由gpupool资源治理发送；提醒编号{key}。"},
}

NEXT_WORDS: dict[str, dict[str, str]] = {
    "reclaim": {"en": "the job is stopped and its GPUs reclaimed", "zh": "终止作业并回收GPU"},
    "preempt": {"en": "the job is preempted (requeued) and its GPUs freed", "zh": "抢占作业（重新排队）并释放GPU"},
    "cap_runtime": {"en": "the job's run time is capped", "zh": "限制作业运行时长"},
    "remind": {"en": "another reminder is sent", "zh": "再次发送提醒"},
    "recommend": {"en": "a right-size recommendation is recorded", "zh": "记录资源调整建议"},
}
ACTION_WORDS: dict[str, dict[str, str]] = {
    "reclaim": {"en": "reclaim", "zh": "回收"},
    "preempt": {"en": "preemption", "zh": "抢占"},
    "cap_runtime": {"en": "run-time cap", "zh": "限时"},
}
INSTEAD_WORDS: dict[str, dict[str, str]] = {
    "partial": {"en": "some of the job's GPUs are busy, so a right-size recommendation is recorded instead",
                "zh": "作业的部分GPU仍在使用，将改为记录资源调整建议"},
    "protected": {"en": "production inference is never stopped automatically",
                  "zh": "生产推理任务不会被自动终止"},
    "exempt": {"en": "your tenant has an exemption until {until} UTC", "zh": "您的租户有豁免，有效期至{until}（UTC）"},
}
METRIC_WORDS: dict[str, dict[str, str]] = {
    "idle_minutes": {"en": "idle minutes", "zh": "空闲分钟数"},
    "minutes_without_progress": {"en": "minutes without progress", "zh": "无进展分钟数"},
    "minutes_since_checkpoint": {"en": "minutes since the last checkpoint", "zh": "距上次检查点分钟数"},
    "runtime_s": {"en": "run time", "zh": "运行时长"},
    "gpus_used": {"en": "GPUs used", "zh": "使用GPU数"},
    "failed_attempts": {"en": "failed attempts", "zh": "失败尝试次数"},
    "missing_fields": {"en": "missing template fields", "zh": "缺失模板字段数"},
}
# The policy kinds about idle GPUs; a reminder of another kind (an overrun, a retry storm) is worded as a flag.
IDLE_KINDS = frozenset({"idle_allocation", "zombie", "idle_interactive"})


@dataclass(frozen=True)
class Gpu:
    slot: str  # host/index, as the allocator names slots
    mean_activity: float | None
    idle_minutes: float | None
    peak_fb_used_mib: float | None


@dataclass(frozen=True)
class Reminder:
    """One delivered remind step, as its message needs it."""

    key: str  # the step's idempotency key
    kind: str  # the policy kind (PolicyKind's value)
    user: str | None
    engine: str
    job_id: str
    attempt: int
    tenant: str
    queue: str
    policy: str
    policy_version: str
    metric: str
    observed: float | None
    threshold: float | None
    window_start_at: dt.datetime
    window_end_at: dt.datetime
    gpus_flagged: int
    gpus_held: int
    gpus: tuple[Gpu, ...]
    window_minutes: float | None
    next_step: dict | None
    sent_at: dt.datetime

    @classmethod
    def of(cls, planned: PlannedAction, sent_at: dt.datetime, user: str | None = None) -> Reminder:
        """From the step's evidence (the finding's fields and evidence object, pipelines/policies/planner.py);
        `user`: the owner when the finding has none (the engine's answer names it)."""
        ev = planned.evidence
        gpus = tuple(Gpu(f"{g.get('host')}/{g.get('gpu')}", g.get("mean_activity"), g.get("idle_minutes"),
                         g.get("peak_fb_used_mib"))
                     for g in sorted(ev.get("gpus") or [], key=lambda g: (str(g.get("host")), str(g.get("gpu"))))
                     if isinstance(g, dict))
        window = ev.get("window_minutes", ev.get("remind_after_minutes", ev.get("limit_minutes")))
        return cls(
            key=planned.idempotency_key, kind=planned.kind.value, user=ev.get("user_name") or user, engine=planned.engine,
            job_id=planned.job_id, attempt=planned.attempt, tenant=planned.tenant, queue=planned.queue,
            policy=planned.policy, policy_version=planned.policy_version, metric=str(ev.get("metric") or ""),
            observed=ev.get("observed"), threshold=ev.get("threshold"),
            window_start_at=_time(ev.get("window_start_at"), sent_at),
            window_end_at=_time(ev.get("window_end_at"), sent_at),
            gpus_flagged=int(ev.get("gpus_flagged") or len(gpus)), gpus_held=int(ev.get("gpus_held") or len(gpus)),
            gpus=gpus, window_minutes=window if isinstance(window, int | float) else None,
            next_step=ev.get("next_step"), sent_at=sent_at,
        )

    @property
    def hosts(self) -> list[str]:
        return sorted({g.slot.split("/")[0] for g in self.gpus})


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    keys: tuple[str, ...]  # the reminders it carries


def compose(reminders: list[Reminder], lang: str = "en", *, contact: str | None = None,
            greet: str | None = None) -> Message:
    """One message for one user: a reminder, or a digest of several. `greet`: how the user is named
    (a chat mention, else the user name); `contact`: where to ask for an exemption."""
    lang = lang if lang in LANGUAGES else "en"
    first = reminders[0]
    who = greet or first.user or first.tenant
    idle = all(r.kind in IDLE_KINDS for r in reminders)
    if len(reminders) == 1 and idle:
        subject = _t("subject", lang, job=first.job_id, gpus=first.gpus_flagged,
                     hosts=", ".join(first.hosts) or first.engine)
        intro = _t("intro", lang)
    elif len(reminders) == 1:
        subject = _t("flag_subject", lang, job=first.job_id, policy=first.policy)
        intro = _t("flag_intro", lang)
    elif idle:
        subject = _t("digest_subject", lang, n=len(reminders))
        intro = _t("digest_intro", lang, n=len(reminders))
    else:
        subject = _t("flag_digest_subject", lang, n=len(reminders))
        intro = _t("digest_flag_intro", lang, n=len(reminders))
    lines = [_t("greeting", lang, user=who), intro]
    for reminder in reminders:
        lines += ["", *_job_lines(reminder, lang)]
    lines += ["", _t("exemption", lang)]
    if contact:
        lines.append(_t("contact", lang, contact=contact))
    lines += ["", _t("footer", lang, key=", ".join(r.key for r in reminders))]
    return Message(subject, "\n".join(lines), tuple(r.key for r in reminders))


def _job_lines(r: Reminder, lang: str) -> list[str]:
    idle_s = (r.window_end_at - r.window_start_at).total_seconds()
    lines = [
        _t("job", lang, job=r.job_id, attempt=r.attempt, tenant=r.tenant, queue=r.queue, engine=r.engine),
        _t("gpus", lang, slots=", ".join(g.slot for g in r.gpus) or "-", flagged=r.gpus_flagged, held=r.gpus_held),
        _t("idle", lang, duration=_duration(idle_s, lang), since=f"{r.window_start_at:%Y-%m-%d %H:%M}",
           policy=r.policy, version=r.policy_version) if r.kind in IDLE_KINDS else
        _t("seen", lang, since=f"{r.window_start_at:%Y-%m-%d %H:%M}", until=f"{r.window_end_at:%Y-%m-%d %H:%M}",
           policy=r.policy, version=r.policy_version),
    ]
    if r.metric == "activity" and r.observed is not None:
        window = _t("window", lang, window=_duration(r.window_minutes * 60, lang)) if r.window_minutes else ""
        lines.append(_t("activity", lang, observed=_percent(r.observed), threshold=_percent(r.threshold or 0),
                        window=window))
    elif r.metric:
        words = METRIC_WORDS.get(r.metric, {"en": r.metric.replace("_", " "), "zh": r.metric})[lang]
        figure = (_duration(r.observed or 0, lang), _duration(r.threshold or 0, lang)) if r.metric.endswith("_s") \
            else (_number(r.observed), _number(r.threshold))
        lines.append(_t("figure", lang, metric=words, observed=figure[0], threshold=figure[1]))
    for g in r.gpus:
        lines.append(_t("gpu_line", lang, slot=g.slot,
                        activity="-" if g.mean_activity is None else _percent(g.mean_activity),
                        idle="-" if g.idle_minutes is None else _duration(g.idle_minutes * 60, lang),
                        memory="-" if g.peak_fb_used_mib is None else f"{_number(g.peak_fb_used_mib)} MiB"))
    lines.append(_next_line(r, lang))
    return lines


def _next_line(r: Reminder, lang: str) -> str:
    step = r.next_step
    if not step:
        return _t("next_none", lang)
    action = str(step.get("action"))
    if step.get("instead"):
        why = INSTEAD_WORDS[step["instead"]][lang].format(until=_short(step.get("exempt_until")))
        return _t("next_instead", lang, what=ACTION_WORDS.get(action, {}).get(lang, action), why=why)
    after = float(step.get("after_s") or 0)
    due = r.sent_at + dt.timedelta(seconds=after)
    what = NEXT_WORDS.get(action, {"en": action, "zh": action})[lang]
    return _t("next" if r.kind in IDLE_KINDS else "next_flag", lang, what=what, due=f"{due:%Y-%m-%d %H:%M}",
              delay=_duration(after, lang))


def _t(name: str, lang: str, **values: Any) -> str:
    return TEXT[name][lang].format(**values)


def _duration(seconds: float, lang: str) -> str:
    text = duration_text(seconds)
    if lang == "zh":  # "1 h 30 min" -> "1小时30分钟", no spaces between Chinese and numbers
        for unit, word in ((" min", "分钟"), (" h", "小时"), (" d", "天"), (" s", "秒")):
            text = text.replace(unit, word)
        text = text.replace(" ", "")
    return text


def _percent(ratio: float) -> str:
    return f"{ratio * 100:.1f}".removesuffix(".0") + "%"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}".removesuffix(".0")


def _short(value: object) -> str:
    return str(value or "").replace("T", " ").removesuffix("Z")[:16]


def _time(value: object, default: dt.datetime) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    try:
        return parse_utc(str(value))
    except ValueError:
        return default

