"""Reminders that reach a person, through the outbox, against real servers on 127.0.0.1: an SMTP
server (aiosmtpd) receives the owner's mail (recipient, subject, body, in English and Chinese) and an
HTTP server the chat webhook's JSON. A refused mail server or a webhook answering 500 is retried by the
outbox and the reminder goes out once; a webhook slower than its timeout does not hold the tick; a
shadow policy sends nothing and records what it would do; one user's many reminders are one digest,
and past the per-user limit nothing more is sent."""
from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from allocator.model import Action, ActionResult, Outcome
from pipelines.config import ConfigError
from pipelines.governance.factory import build_reminders
from pipelines.governance.outbox import Outbox
from pipelines.governance.tick import governance_tick
from pipelines.notify.config import RemindersConfig
from pipelines.notify.reminders import Reminders
from pipelines.policies.planner import plan
from tests.governance.conftest import GRACE_S, T0, at, catalog, finding, findings
from tests.notify.servers import free_port, smtp_server, webhook_server


def gpu(host: str, index: int, activity: float = 0.008, memory: float = 1234.0) -> dict:
    return {"allocation_id": f"al-{host}-{index}", "host": host, "gpu": index, "mean_activity": activity,
            "busy_minutes": 0, "spikes": 0, "missing_minutes": 0, "peak_fb_used_mib": memory,
            "idle_minutes": 42.0, "ongoing": True}


def idle(job_id: str, user: str = "vic", **fields) -> dict:
    """An idle-allocation finding of `user`'s job on node-01 GPUs 0 and 1 (2 of 2 idle, 42 min at 0.8%)."""
    evidence = {"activity_threshold": 0.05, "window_minutes": 30, "memory_floor_mib": None,
                "spike_max_minutes": 2, "min_coverage": 0.8, "spikes_ignored": 0,
                "gpus": [gpu("node-01", 1), gpu("node-01", 0)]}
    return finding(job_id, user_name=user, gpus_flagged=2, gpus_held=2, evidence=json.dumps(evidence), **fields)


class Engine:
    """An engine whose remind answers as the allocator's and Slurm's do: applied, naming the owner."""

    engine = "allocator"

    def __init__(self, outcome: Outcome = Outcome.APPLIED):
        self.outcome = outcome
        self.sent: list[str] = []

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        self.sent.append(action.idempotency_key)
        return ActionResult(action.idempotency_key, action.kind, action.target, self.outcome, "audited",
                            effects={"reminded": action.evidence.get("user_name")})


def config(smtp_port: int | None = None, webhook: str | None = None, webhook_extra: dict | None = None,
           **extra) -> RemindersConfig:
    doc: dict = {"users": {"lin": {"email": "lin.wei@lab.example", "language": "zh", "chat": "<@U0LIN>"}},
                 "exemption_contact": "#gpu-pool or platform-oncall@example.org", **extra}
    if smtp_port is not None:
        doc["email"] = {"host": "127.0.0.1", "port": smtp_port, "security": "none",
                        "from_address": "gpupool@example.org", "address_template": "{user}@example.org",
                        "timeout_s": 2}
    if webhook is not None:
        doc["webhook"] = {"url": webhook, "timeout_s": 0.5, **(webhook_extra or {})}
    return RemindersConfig.model_validate(doc)


@pytest.fixture
def outbox(tmp_path: Path):
    box = Outbox(tmp_path / "outbox.db", tmp_path / "landing")
    yield box
    box.close()


def answers(landing: Path) -> list[dict]:
    return [line for path in sorted((landing / "governance_actions").rglob("*.jsonl"))
            for line in map(json.loads, path.read_text().splitlines()) if line["record"] == "answer"]


def decide(outbox: Outbox, frame, now: dt.datetime = T0, mode: str = "enforce") -> None:
    outbox.record(plan(frame, catalog().with_mode(mode), outbox, now), now)


def test_the_owner_gets_a_mail_naming_the_gpus_the_evidence_the_next_step_and_the_exemption(outbox, tmp_path):
    decide(outbox, findings(idle("j-1", "vic"), idle("j-2", "lin")))
    with smtp_server() as (port, inbox):
        reminders = Reminders(config(port), tmp_path / "reminders.db")
        report = outbox.deliver({"allocator": Engine()}, at(1), reminders=reminders)
    assert report.answered == {"applied": 2} and not report.retried
    mails = {to[0]: msg for to, msg in inbox.messages}
    assert set(mails) == {"vic@example.org", "lin.wei@lab.example"}

    en = mails["vic@example.org"]
    assert en["Subject"] == "[gpupool] Idle GPUs: job j-1 holds 2 idle GPU(s) on node-01"
    assert en["From"] == "gpupool@example.org" and en["Message-ID"].endswith(".gpupool@example.org>")
    body = en.get_content()
    for words in ("Hello vic,", "Job j-1 (attempt 1; tenant vision, queue vision-train, scheduler allocator)",
                  "GPUs: node-01/0, node-01/1 (2 of the 2 GPUs the job holds)",
                  "Idle for 42 min, since 2026-11-02 08:18 UTC (policy idle-allocation v1)",
                  "Evidence: mean GPU activity 0.8% (threshold 5%, window 30 min)",
                  "  node-01/0: activity 0.8%, idle 42 min, memory used at most 1,234 MiB",
                  f"Next: the job is stopped and its GPUs reclaimed at 2026-11-02 09:15 UTC (in {GRACE_S // 60} min)",
                  "Ask the platform team for an exemption", "Exemptions: #gpu-pool or platform-oncall@example.org"):
        assert words in body, words

    zh = mails["lin.wei@lab.example"]
    assert zh["Subject"] == "[gpupool] GPU空闲提醒：作业j-2在node-01上有2块GPU空闲"
    body = zh.get_content()
    for words in ("lin，您好：", "GPU：node-01/0, node-01/1（作业共占用2块，其中2块空闲）", "已空闲42分钟",
                  "依据：GPU平均活跃度0.8%（阈值5%，窗口30分钟）", "将于2026-11-02 09:15（UTC，15分钟后）终止作业并回收GPU",
                  "请向平台团队申请豁免", "申请豁免：#gpu-pool or platform-oncall@example.org"):
        assert words in body, words

    [first, second] = answers(tmp_path / "landing")
    assert {first["effects"]["notified"]["email"], second["effects"]["notified"]["email"]} == set(mails)
    # delivered and answered: a later delivery sends nothing again
    with smtp_server() as (port, inbox):
        assert outbox.deliver({"allocator": Engine()}, at(600), reminders=Reminders(config(port), tmp_path / "reminders.db")).sent == 0
        assert inbox.messages == []


def test_the_webhook_gets_one_json_post_slack_shaped_or_from_a_template(outbox, tmp_path):
    decide(outbox, findings(idle("j-1", "lin")))
    with webhook_server() as hook:
        reminders = Reminders(config(webhook=hook.url), tmp_path / "reminders.db")
        assert outbox.deliver({"allocator": Engine()}, at(1), reminders=reminders).answered == {"applied": 1}
    [body] = hook.bodies
    assert set(body) == {"text"}
    assert body["text"].startswith("<@U0LIN> [gpupool] GPU空闲提醒：作业j-1")
    assert "<@U0LIN>，您好：" in body["text"] and "node-01/0" in body["text"]
    assert answers(tmp_path / "landing")[0]["effects"]["notified"] == {"webhook": "HTTP 200"}

    decide(outbox, findings(idle("j-9", "vic")), at(60))
    with webhook_server() as hook:
        hook.answer = {"code": 0, "msg": "success"}
        feishu = config(webhook=hook.url, webhook_extra={"format": "feishu"})
        outbox.deliver({"allocator": Engine()}, at(61), reminders=Reminders(feishu, tmp_path / "reminders.db"))
    [body] = hook.bodies
    assert body["msg_type"] == "text" and "Job j-9" in body["content"]["text"]


def test_a_refused_mail_and_a_failing_webhook_are_retried_and_each_sent_once(outbox, tmp_path):
    decide(outbox, findings(idle("j-1", "vic")))
    with smtp_server() as (port, inbox), webhook_server() as hook:
        inbox.refuse = 1
        hook.script = [(500, 0.0), (500, 0.0)]
        reminders = Reminders(config(port, hook.url), tmp_path / "reminders.db")
        engine = Engine()
        first = outbox.deliver({"allocator": engine}, at(1), reminders=reminders)
        assert first.answered == {} and len(first.retried) == 1
        assert "451" in first.retried[0].error and "HTTP 500" in first.retried[0].error
        assert inbox.messages == [] and hook.bodies == []
        # the mail server is back, the webhook still fails: the mail goes, the step stays queued
        second = outbox.deliver({"allocator": engine}, first.retried[0].next_attempt_at, reminders=reminders)
        assert len(second.retried) == 1 and len(inbox.messages) == 1 and hook.bodies == []
        # both back: only the webhook is sent; the step is answered
        third = outbox.deliver({"allocator": engine}, second.retried[0].next_attempt_at, reminders=reminders)
        assert third.answered == {"applied": 1}
        assert len(inbox.messages) == 1 and len(hook.bodies) == 1 and hook.requests == 3
    [answer] = answers(tmp_path / "landing")
    assert answer["effects"]["notified"] == {"email": "sent before", "webhook": "HTTP 200"}
    assert answer["delivery_attempts"] == 3 and outbox.rows()[0]["status"] == "answered"


def test_a_reminder_that_goes_out_late_pushes_back_the_reclaim_it_announces(outbox, tmp_path):
    decide(outbox, findings(idle("j-1", "vic")))
    with smtp_server() as (port, inbox):
        inbox.refuse = 1_000  # the mail server is down for the first 20 minutes
        reminders = Reminders(config(port), tmp_path / "reminders.db")
        assert outbox.deliver({"allocator": Engine()}, at(1), reminders=reminders).retried
        # the grace has passed since the remind was decided, but its owner was never told: no reclaim
        decide(outbox, findings(idle("j-1", "vic")), at(GRACE_S + 60))
        assert [r["action"] for r in outbox.rows()] == ["remind"]
        inbox.refuse = 0
        assert outbox.deliver({"allocator": Engine()}, at(1200), reminders=reminders).answered == {"applied": 1}
    [(_, mail)] = inbox.messages
    # told at 09:20, the owner is promised the reclaim at 09:35, and it is decided then, not before
    assert "reclaimed at 2026-11-02 09:35 UTC" in mail.get_content()
    decide(outbox, findings(idle("j-1", "vic")), at(1200 + GRACE_S - 1))
    assert [r["action"] for r in outbox.rows()] == ["remind"]
    decide(outbox, findings(idle("j-1", "vic")), at(1200 + GRACE_S))
    assert [r["action"] for r in outbox.rows()] == ["remind", "reclaim"]


def test_an_unreachable_webhook_is_retried_and_its_token_never_shows(outbox, tmp_path):
    decide(outbox, findings(idle("j-1", "vic")))
    url = f"http://127.0.0.1:{free_port()}/services/T000/B000/secret-token?key=also-secret"
    report = outbox.deliver({"allocator": Engine()}, at(1), reminders=Reminders(config(webhook=url), tmp_path / "r.db"))
    [retry] = report.retried
    assert "ConnectionError" in retry.error and "secret" not in retry.error
    assert "secret" not in outbox.rows()[0]["last_error"] and outbox.rows()[0]["status"] == "queued"


def test_a_webhook_slower_than_its_timeout_does_not_hold_the_tick(outbox, tmp_path):
    """Three reminders, a webhook that sleeps 3 s: the tick waits one 0.5 s timeout, not three, and the
    steps stay queued; with the webhook back they go out."""
    decide(outbox, findings(idle("j-1", "vic"), idle("j-2", "lin"), idle("j-3", "ada")))
    with webhook_server() as hook:
        hook.script = [(200, 3.0)]
        reminders = Reminders(config(webhook=hook.url), tmp_path / "reminders.db")
        started = time.monotonic()
        report = governance_tick(at(1), landing=tmp_path / "landing", catalog=catalog(), outbox=outbox,
                                 client=None, enforcers={"allocator": Engine()}, work=[], reminders=reminders)
        assert time.monotonic() - started < 2.0
        assert len(report.delivery.retried) == 3 and hook.requests == 1
        assert "ReadTimeout" in report.delivery.retried[0].error or "timed out" in report.delivery.retried[0].error
        later = report.delivery.retried[0].next_attempt_at
        report = governance_tick(later, landing=tmp_path / "landing", catalog=catalog(), outbox=outbox,
                                 client=None, enforcers={"allocator": Engine()}, work=[], reminders=reminders)
    assert report.delivery.answered == {"applied": 3}
    assert {row["status"] for row in outbox.rows()} == {"answered"}


def test_a_shadow_policy_sends_nothing_and_records_the_reminder_it_would_send(outbox, tmp_path):
    decide(outbox, findings(idle("j-1", "vic")), mode="shadow")
    with smtp_server() as (port, inbox), webhook_server() as hook:
        report = outbox.deliver({"allocator": Engine()}, at(1),
                                reminders=Reminders(config(port, hook.url), tmp_path / "reminders.db"))
        assert report.sent == 0 and inbox.messages == [] and hook.requests == 0
    [row] = outbox.rows()
    assert (row["action"], row["status"]) == ("remind", "shadow")
    [line] = [json.loads(x) for p in (tmp_path / "landing/governance_actions").rglob("*.jsonl") for x in p.read_text().splitlines()]
    assert line["status"] == "shadow" and line["evidence"]["user_name"] == "vic"
    assert line["evidence"]["next_step"] == {"action": "reclaim", "after_s": GRACE_S}


def test_one_users_many_reminders_are_one_digest_and_the_hourly_limit_holds(outbox, tmp_path):
    decide(outbox, findings(idle("j-1", "vic"), idle("j-2", "vic"), idle("j-3", "vic"), idle("j-4", "ada")))
    with smtp_server() as (port, inbox):
        reminders = Reminders(config(port, per_user_per_hour=1), tmp_path / "reminders.db")
        report = outbox.deliver({"allocator": Engine()}, at(1), reminders=reminders)
        assert report.answered == {"applied": 4}
        mails = {to[0]: msg for to, msg in inbox.messages}
        assert len(inbox.messages) == 2
        digest = mails["vic@example.org"]
        assert digest["Subject"] == "[gpupool] Idle GPUs: 3 of your jobs hold idle GPUs"
        assert all(f"Job j-{n} " in digest.get_content() for n in (1, 2, 3))
        # a new finding of vic's in the same hour: over the limit, not sent, the step closed
        decide(outbox, findings(idle("j-5", "vic", window_start_at=T0)), at(120))
        report = outbox.deliver({"allocator": Engine()}, at(121), reminders=reminders)
        assert report.answered == {"applied": 1} and len(inbox.messages) == 2
    notified = answers(tmp_path / "landing")[-1]["effects"]["notified"]
    assert notified == {"not_sent": "vic had 1 reminder messages in the last hour (limit 1/h)"}


def test_a_remind_the_engine_refuses_reaches_no_one_and_an_exempt_reclaim_is_not_announced(outbox, tmp_path):
    decide(outbox, findings(idle("j-1", "vic")))
    with smtp_server() as (port, inbox):
        reminders = Reminders(config(port), tmp_path / "reminders.db")
        assert outbox.deliver({"allocator": Engine(Outcome.REFUSED)}, at(1), reminders=reminders).answered == {
            "refused": 1}
        assert inbox.messages == []
        decide(outbox, findings(idle("j-2", "ada", template="inference")), at(2))
        outbox.deliver({"allocator": Engine()}, at(3), reminders=reminders)
    [(to, mail)] = inbox.messages
    assert to == ["ada@example.org"]
    assert "Next: no automatic reclaim: production inference is never stopped automatically." in mail.get_content()


def test_gpupool_yml_names_the_reminders_and_keeps_secrets_out(tmp_path, monkeypatch):
    path = tmp_path / "gpupool.yml"
    path.write_text("reminders:\n  email:\n    host: smtp.internal\n    from_address: gpupool@example.org\n"
                    "    address_template: '{user}@example.org'\n    username: gpupool\n"
                    "  webhook:\n    url: ${HOOK_URL}\n    format: dingtalk\n")
    monkeypatch.setenv("HOOK_URL", "https://oapi.dingtalk.com/robot/send?access_token=secret")
    reminders = build_reminders(path, tmp_path)
    assert reminders is not None and reminders.config.email.smtp_port == 587
    assert reminders.config.address("kim") == "kim@example.org" and reminders.config.language_of("kim") == "en"
    assert reminders.config.webhook.url.endswith("access_token=secret")
    reminders.close()
    path.write_text("reminders:\n  email:\n    host: h\n    from_address: a@b.c\n    password: hunter2\n")
    with pytest.raises(ConfigError, match="password: remove it from the file"):
        build_reminders(path, tmp_path)
    path.write_text("reminders:\n  language: zh\n")
    with pytest.raises(ConfigError, match="name email, webhook or both"):
        build_reminders(path, tmp_path)
    path.write_text("allocator:\n  url: http://a\n")
    assert build_reminders(path, tmp_path) is None
