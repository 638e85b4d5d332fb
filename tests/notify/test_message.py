"""A reminder's words without any transport: a reminder that is not about idle GPUs (an overrun) is
worded as a flag with its figure, a last step says nothing follows, durations read naturally in both
languages."""
from __future__ import annotations

import datetime as dt

from pipelines.contracts import Mode, PolicyKind, StepAction
from pipelines.notify.message import Message, Reminder, compose
from pipelines.policies.model import PlannedAction

AT = dt.datetime(2026, 11, 2, 9, 0)


def overrun(next_step: dict | None) -> PlannedAction:
    evidence = {"metric": "runtime_s", "observed": 5400 * 1.6, "threshold": 5400 * 1.5, "gpus_flagged": 4,
                "gpus_held": 4, "window_start_at": "2026-11-02T06:00:00Z", "window_end_at": "2026-11-02T09:00:00Z",
                "user_name": "kim"}
    if next_step is not None:
        evidence["next_step"] = next_step
    return PlannedAction(
        idempotency_key="gp-remind-0-abc", finding_id="f", policy="overrun", policy_version="1",
        kind=PolicyKind.OVERRUN, mode=Mode.ENFORCE, step_index=0, action=StepAction.REMIND, engine="slurm",
        job_id="4242", attempt=1, tenant="nlp", queue="batch", reason="", evidence=evidence)


def test_an_overrun_is_a_flag_with_its_run_time_and_the_cap_to_come():
    reminder = Reminder.of(overrun({"action": "cap_runtime", "after_s": 5400}), AT)
    en = compose([reminder], "en")
    assert en.subject == "[gpupool] Job 4242: flagged by policy overrun"
    assert "Seen from 2026-11-02 06:00 to 2026-11-02 09:00 UTC (policy overrun v1)" in en.text
    assert "Evidence: run time 2 h 24 min (threshold 2 h 15 min)" in en.text
    assert ("Next: the job's run time is capped at 2026-11-02 10:30 UTC (in 1 h 30 min) unless the condition "
            "has ended by then.") in en.text
    zh = compose([reminder], "zh")
    assert zh.subject == "[gpupool] 作业4242：触发策略overrun"
    assert "依据：运行时长2小时24分钟（阈值2小时15分钟）" in zh.text
    assert "将于2026-11-02 10:30（UTC，1小时30分钟后）限制作业运行时长" in zh.text


def test_a_last_step_says_nothing_follows_and_a_digest_lists_every_job():
    last = Reminder.of(overrun(None), AT)
    assert "Next: nothing is done automatically; this is a reminder." in compose([last]).text
    digest = compose([last, last], "zh")
    assert digest.subject == "[gpupool] 您有2个作业需要处理" and digest.text.count("作业4242") == 2
    assert compose([last], "fr").subject.startswith("[gpupool] Job 4242")  # an unknown language: English


def test_a_webhook_template_fills_each_placeholder_once_and_keeps_its_shape():
    from pipelines.notify.config import WebhookConfig
    from pipelines.notify.transports import WebhookTransport

    template = {"msgtype": "markdown", "markdown": {"title": "{subject}", "text": "{mention}\n{body}"},
                "at": ["{user}", 3, None], "note": "{unknown} stays"}
    hook = WebhookTransport(WebhookConfig(url="http://127.0.0.1:9/hook", body=template))
    # a job named like a placeholder is text, never filled in again
    message = Message(subject="Job {user} idle", text="GPUs of job {keys} idle", keys=("k1", "k2"))
    body = hook.body(message, user="ada", mention="@ada")
    assert body == {"msgtype": "markdown", "markdown": {"title": "Job {user} idle", "text": "@ada\nGPUs of job {keys} idle"},
                    "at": ["ada", 3, None], "note": "{unknown} stays"}
    assert template["markdown"]["title"] == "{subject}"  # the configured template is not changed
