"""The Slurm connector and enforcer on recorded outputs of the real cluster (no Slurm needed).

fixtures/ holds what Slurm 22.05 (Debian 12) answered in scripts/slurm-up.sh's cluster:
- squeue.json: jobs 5 (2 GPUs) and 6 (3 GPUs, --comment=gpupool:inference) running, 7 pending;
- squeue-requeued.json: job 8 running its second attempt (preempted once) on 6 GPUs;
- sacct.txt / sacct.json / slurmrestd-jobs.json: job 8 preempted by 9 (urgent), requeued, run
  again and cancelled; 9 cancelled; 10 completed;
- slurmrestd-nothing-found.json: slurmrestd's answer for a day without jobs.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import polars as pl
import pytest
import yaml

from allocator.model import Action, ActionKind, Outcome
from pipelines.config import ConfigError
from pipelines.connectors.http import HttpStatusError
from pipelines.connectors.slurm import (
    SACCT_FIELDS,
    CommandResult,
    LiveAccounting,
    OfflineAccounting,
    SlurmCommandError,
    SlurmConfig,
    SlurmRestError,
    checked,
    land,
    load_slurm_config,
    run_command,
    sacct_command,
    snapshot_running_jobs,
)
from pipelines.enforcement.base import ActionLedger
from pipelines.enforcement.slurm import MARK_LIMIT, SlurmEnforcer
from pipelines.ingest import ingest_partition
from pipelines.paths import REPO_ROOT
from pipelines.resources.slurm import SlurmAccounting
from pipelines.sources.jsonl import RecordError
from pipelines.sources.slurm_sacct import REQUIRED_FIELDS, parse_sacct_json
from pipelines.sources.slurm_squeue import gres_gpu_indices, parse_squeue_job_gpus
from tests.concurrency import race

FIXTURES = Path(__file__).parent / "fixtures"
DAY = dt.date(2026, 11, 29)
NOW = dt.datetime(2026, 11, 29, 15, 54)


class FakeSlurm:
    """Answers commands from recorded outputs: {command name: CommandResult or callable}."""

    def __init__(self, answers: dict, delay_s: float = 0.0):
        self.answers = answers
        self.delay_s = delay_s
        self.calls: list[tuple[str, ...]] = []
        self._lock = threading.Lock()

    def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        with self._lock:
            self.calls.append(tuple(argv))
        time.sleep(self.delay_s)
        answer = self.answers[argv[0]]
        return answer(argv) if callable(answer) else dataclasses.replace(answer, argv=tuple(argv))

    def count(self, name: str) -> int:
        return sum(1 for call in self.calls if call[0] == name)


def ok(data: bytes = b"") -> CommandResult:
    return CommandResult((), 0, data, "")


def fail(message: str, code: int = 1) -> CommandResult:
    return CommandResult((), code, b"", message)


def recorded(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


# --- accounting -----------------------------------------------------------------------------


def test_sacct_is_asked_for_the_utc_day_every_attempt_and_the_fields_the_parser_reads():
    text = sacct_command(SlurmConfig(), DAY, as_json=False)
    assert text == ["sacct", "--duplicates", "--allusers", "-S", "2026-11-29T00:00:00", "-E", "2026-11-30T00:00:00",
                    "--parsable2", f"--format={','.join(SACCT_FIELDS)}"]
    assert set(REQUIRED_FIELDS) <= set(SACCT_FIELDS)
    as_json = sacct_command(SlurmConfig(sacct="/opt/slurm/bin/sacct", clusters="gpu1"), DAY, as_json=True)
    assert as_json[0] == "/opt/slurm/bin/sacct" and as_json[-2:] == ["--clusters=gpu1", "--json"]


def test_commands_run_in_utc_and_failures_name_the_command():
    assert run_command(["sh", "-c", "echo $TZ"], 10).stdout == b"UTC\n"
    with pytest.raises(SlurmCommandError, match=r"sh -c echo oops >&2; exit 3: exit 3: oops"):
        checked(run_command(["sh", "-c", "echo oops >&2; exit 3"], 10))
    with pytest.raises(SlurmCommandError, match="command not found: /nonexistent/sacct"):
        run_command(["/nonexistent/sacct"], 10)
    with pytest.raises(SlurmCommandError, match="no answer within 0.2 s"):
        run_command(["sleep", "5"], 0.2)


def test_recorded_sacct_lands_and_ingests_as_preempt_requeue_and_cancel(warehouse):
    fake = FakeSlurm({"sacct": lambda argv: ok(recorded("sacct.json" if "--json" in argv else "sacct.txt"))})
    paths = land(warehouse.landing, DAY, LiveAccounting(SlurmConfig(), run=fake).fetch(DAY))
    assert [p.relative_to(warehouse.landing).as_posix() for p in paths] == [
        "slurm_sacct/2026-11-29/sacct.txt", "slurm_sacct_json/2026-11-29/sacct.json"]
    assert paths[0].read_bytes() == recorded("sacct.txt")  # landed as Slurm wrote it
    assert not list(paths[0].parent.glob(".*"))  # no temporary file left behind

    for source in ("slurm_sacct", "slurm_sacct_json"):
        report = ingest_partition(warehouse, source, DAY)
        assert (report.records_read, report.records_loaded, report.records_quarantined) == (4, 4, 0)
    with warehouse.writer() as con:
        events = con.execute(
            "select job_id, attempt, event_type, state from raw.job_events where ingest_source = 'slurm_sacct' "
            "and event_type in ('preempt', 'requeue', 'start', 'finish') order by job_id, attempt, occurred_at"
        ).fetchall()
    assert events == [
        ("10", 1, "start", "RUNNING"), ("10", 1, "finish", "COMPLETED"),
        ("8", 1, "start", "RUNNING"), ("8", 1, "preempt", "PREEMPTED"),
        ("8", 2, "start", "RUNNING"), ("8", 2, "finish", "CANCELLED"),
        ("9", 1, "start", "RUNNING"), ("9", 1, "finish", "CANCELLED"),
    ]


def test_a_failing_sacct_lands_nothing_and_says_why(warehouse):
    fake = FakeSlurm({"sacct": fail("sacct: error: Problem talking to the database: Connection refused")})
    with pytest.raises(SlurmCommandError, match=r"^sacct --duplicates .*exit 1: sacct: error: Problem talking"):
        land(warehouse.landing, DAY, LiveAccounting(SlurmConfig(), run=fake).fetch(DAY))
    assert not warehouse.landing.exists()


class _Restd(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, bytes]]] = {}
    requests: ClassVar[list[tuple[str, dict, dict]]] = []

    def do_GET(self):
        url = urlparse(self.path)
        type(self).requests.append((url.path, parse_qs(url.query), dict(self.headers)))
        status, body = type(self).answers.get(url.path, (404, b"Unable find requested URL."))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def restd():
    _Restd.answers, _Restd.requests = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Restd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield _Restd, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_slurmrestd_jobs_are_the_sacct_json_document(restd):
    handler, url = restd
    handler.answers["/slurmdb/v0.0.38/jobs"] = (200, recorded("slurmrestd-jobs.json"))
    config = SlurmConfig(accounting=["slurmrestd"], restd_url=url + "/", restd_timezone="Europe/Berlin",
                         restd_user="gpupool", restd_token="t0ken")
    [delivery] = LiveAccounting(config).fetch(DAY)
    assert (delivery.source, delivery.filename, delivery.data) == (
        "slurm_sacct_json", "slurmrestd.json", recorded("slurmrestd-jobs.json"))
    _, query, headers = handler.requests[0]
    # slurmrestd reads times in its own zone: the UTC day starts at 01:00 in Berlin
    assert query == {"start_time": ["2026-11-29T01:00:00"], "end_time": ["2026-11-30T01:00:00"]}
    assert (headers["X-SLURM-USER-NAME"], headers["X-SLURM-USER-TOKEN"]) == ("gpupool", "t0ken")
    parsed = parse_sacct_json(delivery.data, "slurmrestd.json")
    assert (parsed.records_read, parsed.records_loaded) == (4, 4)


def test_slurmrestd_nothing_found_is_an_empty_day_and_other_errors_raise(restd):
    handler, url = restd
    config = SlurmConfig(accounting=["slurmrestd"], restd_url=url)
    handler.answers["/slurmdb/v0.0.38/jobs"] = (200, recorded("slurmrestd-nothing-found.json"))
    [delivery] = LiveAccounting(config).fetch(DAY)
    parsed = parse_sacct_json(delivery.data, "slurmrestd.json")
    assert (parsed.records_read, parsed.quarantine.height) == (0, 0)

    error = {"errors": [{"description": "Unable to parse time format", "error_number": 9000}], "jobs": []}
    handler.answers["/slurmdb/v0.0.38/jobs"] = (500, json.dumps(error).encode())
    with pytest.raises(SlurmRestError, match="HTTP 500: slurmrestd reported 9000 Unable to parse time format"):
        LiveAccounting(config).fetch(DAY)
    requests_before = len(handler.requests)
    with pytest.raises(HttpStatusError, match="HTTP 404"):
        LiveAccounting(config.model_copy(update={"restd_api": "v0.0.99"})).fetch(DAY)
    assert len(handler.requests) == requests_before + 1  # a 4xx is not retried
    handler.answers["/slurmdb/v0.0.38/jobs"] = (200, b"<html>proxy login</html>")
    with pytest.raises(SlurmRestError, match="HTTP 200, body is not a JSON object: '<html>"):
        LiveAccounting(config).fetch(DAY)
    with pytest.raises(ValueError, match="restd_url is not set"):
        LiveAccounting(SlurmConfig(accounting=["slurmrestd"])).fetch(DAY)


def test_offline_accounting_lands_recorded_files(warehouse, tmp_path):
    recorded_dir = tmp_path / "recorded" / DAY.isoformat()
    recorded_dir.mkdir(parents=True)
    (recorded_dir / "sacct.txt").write_bytes(recorded("sacct.txt"))
    (recorded_dir / "slurmrestd.json").write_bytes(recorded("slurmrestd-jobs.json"))
    paths = SlurmAccounting(offline_dir=str(tmp_path / "recorded")).land_day(warehouse.landing, DAY)
    assert sorted(p.relative_to(warehouse.landing).as_posix() for p in paths) == [
        "slurm_sacct/2026-11-29/sacct.txt", "slurm_sacct_json/2026-11-29/slurmrestd.json"]
    with pytest.raises(FileNotFoundError, match="no recorded Slurm accounting for 2026-11-30"):
        OfflineAccounting(tmp_path / "recorded").fetch(DAY + dt.timedelta(days=1))


def test_the_slurm_section_takes_secrets_from_the_environment(tmp_path, monkeypatch):
    config_file = tmp_path / "gpupool.yml"
    config_file.write_text(
        "slurm:\n  accounting: [sacct, slurmrestd]\n  restd_url: http://slurm-head:6820\n"
        "  restd_token: ${SLURM_JWT}\n  protected_partitions: [inference]\n")
    monkeypatch.setenv("SLURM_JWT", "from-the-environment")
    config = load_slurm_config(config_file)
    assert config.restd_token == "from-the-environment" and config.protected_partitions == ["inference"]
    assert load_slurm_config(tmp_path / "absent.yml") == SlurmConfig()
    config_file.write_text("slurm:\n  accounting: [squeue]\n")
    with pytest.raises(ConfigError, match="section slurm: accounting.0"):
        load_slurm_config(config_file)
    config_file.write_text("slurm:\n  restd_timezone: Mars/Olympus\n")
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus'"):
        load_slurm_config(config_file)
    config_file.write_text("slurm:\n  protected_partition: [inference]\n")
    with pytest.raises(ConfigError, match="protected_partition: Extra inputs are not permitted"):
        load_slurm_config(config_file)


def test_the_example_configuration_documents_a_valid_slurm_section():
    example = yaml.safe_load((REPO_ROOT / "gpupool.example.yml").read_text())
    assert SlurmConfig.model_validate(example["slurm"]).restd_url == "http://127.0.0.1:6820"


# --- GPU indices ----------------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "expected"), [
    ("gpu:2(IDX:0-1)", (None, 2, [0, 1])),
    ("gpu:a100:3(IDX:0,2-3)", ("a100", 3, [0, 2, 3])),
    ("gpu:1(IDX:N/A)", (None, 1, [])),
    ("gpu:h100:2(IDX:4-5),nic:1(IDX:0)", ("h100", 2, [4, 5])),
    ("nic:1(IDX:0)", None),
    ("", None),
])
def test_gres_detail_entries(entry, expected):
    assert gres_gpu_indices(entry) == expected


@pytest.mark.parametrize("entry", ["gpu:2(IDX:3-1)", "gpu:2(IDX:a)", "gpu:2"])
def test_unreadable_gres_detail_is_an_error(entry):
    with pytest.raises(RecordError, match="gres_detail"):
        gres_gpu_indices(entry)


def test_running_jobs_gpu_indices_from_recorded_squeue():
    parsed = parse_squeue_job_gpus(recorded("squeue.json"), "squeue.json")
    assert (parsed.records_read, parsed.records_loaded, parsed.quarantine.height) == (2, 2, 0)
    assert parsed.notes == ["5 jobs not running: no placement"]
    rows = parsed.tables["job_gpus"].select("job_id", "attempt", "host", "gpu", "fraction", "source").rows()
    assert rows == [("5", 1, "localhost", 0, 1.0, "slurm"), ("5", 1, "localhost", 1, 1.0, "slurm"),
                    ("6", 1, "localhost", 2, 1.0, "slurm"), ("6", 1, "localhost", 3, 1.0, "slurm"),
                    ("6", 1, "localhost", 4, 1.0, "slurm")]
    assert parsed.tables["job_gpus"]["assigned_at"][0] == dt.datetime(2026, 11, 29, 15, 53, 8)

    requeued = parse_squeue_job_gpus(recorded("squeue-requeued.json"), "squeue-requeued.json").tables["job_gpus"]
    assert requeued.select("job_id", "attempt").unique().rows() == [("8", 2)]  # restart_cnt 1: attempt 2
    assert requeued["gpu"].to_list() == [0, 1, 2, 3, 4, 5]


def test_squeue_records_that_cannot_be_read_are_quarantined():
    doc = json.loads(recorded("squeue.json"))
    running = [j for j in doc["jobs"] if j["job_state"] == "RUNNING"]
    running[0]["gres_detail"] = ["gpu:2(IDX:0-1)", "gpu:1(IDX:2)"]  # two entries, one node
    running[1]["job_state"] = ["RUNNING", "COMPLETING"]  # the 23.02+ shape is read too
    mig = {**running[1], "job_id": 99, "gres_detail": ["gpu:a100_3g.40gb:2(IDX:0-1)"]}
    doc["jobs"] = [*doc["jobs"], mig, "not a job"]
    parsed = parse_squeue_job_gpus(json.dumps(doc), "squeue.json")
    assert parsed.records_read == parsed.records_loaded + parsed.quarantine.height == 4
    assert parsed.quarantine["reason"].to_list() == [
        "jobs[4]: job 5: 2 gres_detail entries for 1 nodes 'localhost'",
        "jobs[8]: job is string, expected a JSON object"]
    gpus = parsed.tables["job_gpus"]
    assert gpus.filter(pl.col("job_id") == "6")["gpu"].to_list() == [2, 3, 4]
    mig_rows = gpus.filter(pl.col("job_id") == "99")
    assert mig_rows["gpu"].to_list() == [None, None] and mig_rows["gpu_instance_profile"].to_list() == ["3g.40gb"] * 2
    assert "2 MIG-typed GPUs have no GPU index" in parsed.notes[-1]

    garbage = parse_squeue_job_gpus(b"squeue: error: slurm_load_jobs", "squeue.json")
    assert (garbage.records_read, garbage.quarantine.height) == (1, 1)
    assert garbage.quarantine["stage"].to_list() == ["parse"]


def test_a_snapshot_lands_squeue_output_for_the_day(warehouse):
    fake = FakeSlurm({"squeue": ok(recorded("squeue.json"))})
    path = snapshot_running_jobs(warehouse.landing, NOW, run=fake)
    assert path.relative_to(warehouse.landing).as_posix() == "slurm_squeue/2026-11-29/squeue-155400.json"
    assert fake.calls == [("squeue", "--json", "--states=RUNNING")]


# --- enforcement ----------------------------------------------------------------------------


def _enforcer(tmp_path: Path, fake: FakeSlurm, **config) -> SlurmEnforcer:
    return SlurmEnforcer(ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "slurm"), SlurmConfig(**config),
                         run=fake)


def _slurm(**answers) -> FakeSlurm:
    return FakeSlurm({"squeue": ok(recorded("squeue.json")), "scancel": ok(), "scontrol": ok(), **answers})


def _audit(tmp_path: Path) -> list[dict]:
    lines = (tmp_path / "landing" / "allocator_audit" / "2026-11-29" / "slurm.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_reclaim_runs_scancel_once_per_key_and_a_dry_run_runs_nothing(tmp_path):
    fake = _slurm()
    enforcer = _enforcer(tmp_path, fake)
    action = Action(ActionKind.RECLAIM, "reclaim:5:idle", "5", "governance-bot", reason="idle 45 min",
                    policy="idle-reclaim", policy_version="v3")
    dry = enforcer.apply(dataclasses.replace(action, dry_run=True), NOW)
    assert dry.outcome == Outcome.DRY_RUN
    assert dry.reason == "dry run: would run scancel 5: idle 45 min (policy idle-reclaim v3)"
    assert fake.count("scancel") == 0
    applied = enforcer.apply(action, NOW)
    assert applied.outcome == Outcome.APPLIED
    assert applied.effects == {"state": "CANCELLED", "released_slots": ["localhost/0", "localhost/1"],
                               "gpus_released": 2, "command": "scancel 5"}
    again = enforcer.apply(action, NOW)
    assert again.outcome == Outcome.ALREADY_DONE and again.effects == applied.effects
    reused = enforcer.apply(dataclasses.replace(action, target="6"), NOW)
    assert reused.outcome == Outcome.REFUSED
    assert reused.reason == "idempotency key reclaim:5:idle was used for reclaim on 5"
    assert fake.count("scancel") == 1
    audit = _audit(tmp_path)
    assert [(r["decision"], r["engine"]) for r in audit] == [
        ("dry_run", "slurm"), ("applied", "slurm"), ("already_done", "slurm"), ("refused", "slurm")]
    assert audit[1]["before"]["slots"] == ["localhost/0", "localhost/1"] and audit[1]["after"] == {
        "state": "CANCELLED"}


def test_concurrent_applies_of_one_key_run_the_command_once(tmp_path):
    fake = _slurm()
    fake.delay_s = 0.05

    def setup():
        enforcer = _enforcer(tmp_path, fake)  # its own ledger connection, as another process would have
        return lambda: enforcer.apply(Action(ActionKind.RECLAIM, "k", "5", "bot"), NOW).outcome

    outcomes = race(setup, 8)
    assert sorted(outcomes) == sorted([Outcome.APPLIED] + [Outcome.ALREADY_DONE] * 7)
    assert fake.count("scancel") == 1


def test_protected_pending_unknown_and_unreadable_jobs_are_refused(tmp_path):
    enforcer = _enforcer(tmp_path, _slurm())
    answers = {target: enforcer.apply(Action(ActionKind.RECLAIM, f"r{target}", target, "bot"), NOW)
               for target in ("6", "7", "404")}
    assert {t: (r.outcome, r.reason) for t, r in answers.items()} == {
        "6": (Outcome.REFUSED, "protected workload (comment gpupool:inference) is exempt from automatic reclaim"),
        "7": (Outcome.REFUSED, "job 7 is PENDING, not running"),
        "404": (Outcome.REFUSED, "no job 404 in Slurm (ended over MinJobAge ago, or never existed)"),
    }
    # refused answers are not remembered: once the reason is gone the same key may apply
    assert enforcer.apply(Action(ActionKind.REMIND, "remind-6", "6", "bot"), NOW).outcome == Outcome.APPLIED

    by_partition = _enforcer(tmp_path / "p", _slurm(), protected_partitions=["batch"], protected_comment=None)
    refused = by_partition.apply(Action(ActionKind.PREEMPT, "p5", "5", "bot"), NOW)
    assert refused.reason == "protected workload (partition batch) is exempt from automatic preemption"
    by_qos = _enforcer(tmp_path / "q", _slurm(), protected_qos=["normal"])
    assert by_qos.apply(Action(ActionKind.CAP_RUNTIME, "c5", "5", "bot", runtime_s=60), NOW).reason == (
        "protected workload (QOS normal) is exempt from automatic run-time caps")

    newer = _enforcer(tmp_path / "n", _slurm(squeue=fail("slurm_load_jobs error: Invalid job id specified")))
    assert newer.apply(Action(ActionKind.RECLAIM, "x", "404", "bot"), NOW).reason.startswith("no job 404")
    down = _enforcer(tmp_path / "d", _slurm(squeue=fail("slurm_load_jobs error: Unable to contact slurm controller")))
    assert down.apply(Action(ActionKind.RECLAIM, "x", "5", "bot"), NOW).reason == (
        "cannot read job 5 from Slurm: squeue --json --jobs=5: exit 1: slurm_load_jobs error: Unable to contact "
        "slurm controller")


def test_a_failed_command_is_refused_and_may_be_retried(tmp_path):
    fake = _slurm(scancel=fail("scancel: error: Kill job error on job id 5: Job/step already completing or completed"))
    enforcer = _enforcer(tmp_path, fake)
    action = Action(ActionKind.RECLAIM, "reclaim:5", "5", "bot")
    refused = enforcer.apply(action, NOW)
    assert refused.outcome == Outcome.REFUSED
    assert refused.reason == ("scancel 5 failed (exit 1): scancel: error: Kill job error on job id 5: Job/step "
                              "already completing or completed")
    fake.answers["scancel"] = ok()
    assert enforcer.apply(action, NOW).outcome == Outcome.APPLIED
    assert fake.count("scancel") == 2


def test_preempt_requeues_or_requeueholds(tmp_path):
    fake = _slurm()
    result = _enforcer(tmp_path, fake).apply(Action(ActionKind.PREEMPT, "p", "5", "bot"), NOW)
    assert (result.outcome, result.effects["command"], result.effects["attempt"]) == (
        Outcome.APPLIED, "scontrol requeue 5", 2)
    held = _enforcer(tmp_path / "h", _slurm(), preempt_hold=True).apply(Action(ActionKind.PREEMPT, "p", "5", "bot"),
                                                                        NOW)
    assert held.effects["command"] == "scontrol requeuehold 5" and held.effects["state"] == "PENDING (held)"
    doc = json.loads(recorded("squeue.json"))
    for job in doc["jobs"]:
        job["requeue"] = False
    fixed = _enforcer(tmp_path / "f", _slurm(squeue=ok(json.dumps(doc).encode())))
    assert fixed.apply(Action(ActionKind.PREEMPT, "p", "5", "bot"), NOW).reason == (
        "job 5 is not requeueable (--no-requeue or JobRequeue=0)")


def test_cap_runtime_sets_a_shorter_time_limit_in_whole_minutes(tmp_path):
    fake = _slurm()
    enforcer = _enforcer(tmp_path, fake)
    same = enforcer.apply(Action(ActionKind.CAP_RUNTIME, "c1", "5", "bot", runtime_s=3600), NOW)  # --time=60
    assert same.reason == "the job's time limit is already 60 min (asked 60 min)"
    capped = enforcer.apply(Action(ActionKind.CAP_RUNTIME, "c2", "5", "bot", runtime_s=1750), NOW)
    assert capped.outcome == Outcome.APPLIED
    assert capped.effects == {"runtime_cap_s": 1800, "ends_at": "2026-11-29T16:23:08Z",
                              "command": "scontrol update JobId=5 TimeLimit=30"}
    past = enforcer.apply(Action(ActionKind.CAP_RUNTIME, "c3", "5", "bot", runtime_s=30),
                          dt.datetime(2026, 11, 29, 15, 55))
    assert past.effects["state"] == "TIMEOUT"
    assert enforcer.apply(Action(ActionKind.CAP_RUNTIME, "c4", "5", "bot"), NOW).reason == (
        "cap_runtime needs runtime_s >= 1")
    assert [c for c in fake.calls if c[0] == "scontrol"] == [
        ("scontrol", "update", "JobId=5", "TimeLimit=30"), ("scontrol", "update", "JobId=5", "TimeLimit=1")]


def _squeue_with(**fields) -> CommandResult:
    """The recorded squeue answer with job 5's fields replaced."""
    doc = json.loads(recorded("squeue.json"))
    for job in doc["jobs"]:
        if job["job_id"] == 5:
            job.update(fields)
    return ok(json.dumps(doc).encode())


def test_remind_marks_the_jobs_admin_comment_once_per_key_and_names_the_user(tmp_path):
    fake = _slurm()
    enforcer = _enforcer(tmp_path, fake)
    action = Action(ActionKind.REMIND, "remind:5", "5", "bot", policy="idle-allocation", policy_version="1",
                    reason="GPU activity 0.0% over the last 35 min on 2 of 2 GPUs;\npreempt in 15 min unless it is used")
    mark = ("gpupool: reminded 2026-11-29 15:54 UTC: GPU activity 0.0% over the last 35 min on 2 of 2 GPUs; "
            "preempt in 15 min unless it is used (policy idle-allocation 1)")  # on one line
    dry = enforcer.apply(dataclasses.replace(action, dry_run=True), NOW)
    assert dry.outcome == Outcome.DRY_RUN and fake.count("scontrol") == 0
    applied = enforcer.apply(action, NOW)
    assert applied.outcome == Outcome.APPLIED
    assert applied.effects == {"reminded": "root", "admin_comment": mark,
                               "command": f"scontrol update JobId=5 'AdminComment={mark}'"}
    assert enforcer.apply(action, NOW).outcome == Outcome.ALREADY_DONE
    # AdminComment only: the job's Comment (its template and protection markers) is never written
    assert [c for c in fake.calls if c[0] == "scontrol"] == [("scontrol", "update", "JobId=5", f"AdminComment={mark}")]
    assert _audit(tmp_path)[1]["after"] == {"admin_comment": mark}

    # our own earlier mark is replaced by the next reminder; a long reason is cut to the mark's limit
    fake.answers["squeue"] = _squeue_with(admin_comment="gpupool: reminded 2026-11-29 14:00 UTC: earlier")
    long = enforcer.apply(Action(ActionKind.REMIND, "remind:5:b", "5", "bot", reason="idle " * 100), NOW)
    assert long.outcome == Outcome.APPLIED and len(long.effects["admin_comment"]) == MARK_LIMIT
    assert fake.count("scontrol") == 2


def test_remind_leaves_someone_elses_admin_comment_and_survives_a_refused_mark(tmp_path):
    fake = _slurm(squeue=_squeue_with(admin_comment="ticket 4711: keep running"))
    enforcer = _enforcer(tmp_path, fake)
    theirs = enforcer.apply(Action(ActionKind.REMIND, "remind:5", "5", "bot", reason="idle"), NOW)
    assert (theirs.outcome, theirs.effects) == (Outcome.APPLIED, {"reminded": "root"})
    assert theirs.reason == "idle; the job's AdminComment was set by someone else and is left as it is"
    assert fake.count("scontrol") == 0 and _audit(tmp_path)[0]["before"]["admin_comment"] == "ticket 4711: keep running"

    # without Slurm operator rights the mark is refused: the remind still applies, so the owner is still told
    denied = _enforcer(tmp_path / "d", _slurm(scontrol=fail("Access/permission denied for job 5")))
    result = denied.apply(Action(ActionKind.REMIND, "remind:5", "5", "bot", reason="idle"), NOW)
    assert result.outcome == Outcome.APPLIED and result.effects["reminded"] == "root"
    assert "admin_comment" not in result.effects
    assert result.reason.startswith("idle; the job's AdminComment was not set: scontrol update JobId=5 ")
    assert result.effects["mark_error"].endswith("failed (exit 1): Access/permission denied for job 5")
    assert _audit(tmp_path / "d")[0].get("after") is None  # nothing changed in Slurm
    assert denied.apply(Action(ActionKind.REMIND, "remind:5", "5", "bot", reason="idle"), NOW).outcome == (
        Outcome.ALREADY_DONE)


def test_quota_change_is_a_proposal_for_an_admin(tmp_path):
    fake = _slurm(sacctmgr=ok(b"vision\n"))
    enforcer = _enforcer(tmp_path, fake, clusters="gpupool")
    action = Action(ActionKind.QUOTA_CHANGE, "q1", "vision", "bot", reason="sustained demand", quota={"H100": 6})
    dry = enforcer.apply(dataclasses.replace(action, dry_run=True), NOW)
    assert dry.outcome == Outcome.DRY_RUN and dry.reason.startswith("dry run: would propose: sustained demand")
    proposed = enforcer.apply(action, NOW)
    assert proposed.outcome == Outcome.PROPOSED and proposed.proposal_id.startswith("slurm-qp-")
    assert proposed.effects["admin_command"] == (
        "sacctmgr -i modify account where name=vision cluster=gpupool set GrpTRES=gres/gpu=6")
    assert enforcer.apply(action, NOW).outcome == Outcome.ALREADY_DONE
    assert all(call[:3] == ("sacctmgr", "-n", "-P") for call in fake.calls)  # only ever read
    half = enforcer.apply(Action(ActionKind.QUOTA_CHANGE, "q2", "vision", "bot", quota={"H100": 1.5}), NOW)
    assert half.reason == "quota H100 is 1.5: Slurm's GrpTRES counts whole GPUs >= 0"
    fake.answers["sacctmgr"] = ok(b"")
    assert enforcer.apply(Action(ActionKind.QUOTA_CHANGE, "q3", "nobody", "bot", quota={"H100": 1}), NOW).reason == (
        "no Slurm account nobody")
    assert _audit(tmp_path)[1]["object_kind"] == "account"


def test_the_ledger_must_be_the_slurm_engines(tmp_path):
    with pytest.raises(ValueError, match="ledger is for engine 'kueue'"):
        SlurmEnforcer(ActionLedger(tmp_path / "l.db", tmp_path / "landing", "kueue"))
