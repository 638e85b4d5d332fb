"""sacct --parsable2 (hand-made fixture in the documented format) and sacct --json (real samples)."""
from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from pipelines.contracts import contract
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import RecordError
from pipelines.sources.slurm_sacct import (
    canonical_gpu_model,
    expand_hostlist,
    parse_sacct_json,
    parse_sacct_parsable2,
)

FIXTURES = Path(__file__).parent / "fixtures"
PARSABLE2 = FIXTURES / "sacct_parsable2_duplicates.txt"
HEADER = (
    "JobID|JobName|Partition|Account|User|State|ExitCode|Submit|Eligible|Start|End|Elapsed|Timelimit|"
    "Priority|NodeList|ReqTRES|AllocTRES|Reason"
)
GOOD_ROW = (
    "77|ok|a100|vision|alice|COMPLETED|0:0|2026-11-01T08:00:00|2026-11-01T08:00:00|2026-11-01T08:00:05|"
    "2026-11-01T09:00:00|00:59:55|01:00:00|10|gpu01|gres/gpu=1|gres/gpu=1|None"
)


def check(result: ParseResult) -> None:
    assert result.records_read == result.records_loaded + result.quarantine.height
    assert result.tables["job_events"].schema == contract("job_events").schema
    assert result.tables["job_gpus"].schema == contract("job_gpus").schema
    assert result.quarantine.schema == contract("quarantine").schema
    events = result.tables["job_events"]
    assert events["event_id"].n_unique() == events.height


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def job_events(result: ParseResult, job_id: str) -> list[tuple]:
    return (
        result.tables["job_events"]
        .filter(pl.col("job_id") == job_id)
        .select("attempt", "event_type", "occurred_at", "state")
        .rows()
    )


@pytest.fixture(scope="module")
def parsed() -> ParseResult:
    return parse_sacct_parsable2(PARSABLE2.read_bytes(), PARSABLE2.name, cluster="pool")


# --- parsable2 -------------------------------------------------------------------------------


def test_parsable2_counts_job_rows_and_quarantines_the_truncated_row(parsed: ParseResult) -> None:
    check(parsed)
    assert (parsed.records_read, parsed.records_loaded) == (11, 10)
    assert parsed.quarantine.select("line_number", "reason", "stage").rows() == [
        (19, "expected 18 fields, found 9 (truncated row?)", "parse")
    ]
    assert parsed.quarantine["source"].to_list() == ["slurm_sacct_parsable2"]
    assert parsed.notes == ["7 step rows ignored (steps are not jobs)"]
    assert not parsed.tables["job_events"]["job_id"].str.contains(r"\.").any()


def test_parsable2_requeued_job_shown_by_duplicates(parsed: ParseResult) -> None:
    assert job_events(parsed, "1002") == [
        (1, "submit", at("2026-11-01T07:00:00"), "PENDING"),
        (1, "admit", at("2026-11-01T07:00:00"), "PENDING"),
        (1, "start", at("2026-11-01T07:00:10"), "RUNNING"),
        (1, "requeue", at("2026-11-01T07:30:00"), "REQUEUED"),
        (2, "admit", at("2026-11-01T07:32:01"), "PENDING"),
        (2, "start", at("2026-11-01T07:35:00"), "RUNNING"),
        (2, "finish", at("2026-11-01T09:00:00"), "COMPLETED"),
    ]
    gpus = parsed.tables["job_gpus"].filter(pl.col("job_id") == "1002")
    assert gpus.select("attempt", "host", "assigned_at").rows() == [
        (1, "gpu03", at("2026-11-01T07:00:10")),
        (1, "gpu03", at("2026-11-01T07:00:10")),
        (2, "gpu04", at("2026-11-01T07:35:00")),
        (2, "gpu04", at("2026-11-01T07:35:00")),
    ]
    assert gpus["gpu"].is_null().all() and gpus["uuid"].is_null().all()
    assert "slurm:pool:1002:1:requeue" in parsed.tables["job_events"]["event_id"].to_list()


def test_parsable2_attempts_follow_submit_time_not_row_order() -> None:
    lines = PARSABLE2.read_text().splitlines()
    first, second = lines[5], lines[7]  # the two 1002 job rows
    assert first.startswith("1002|") and second.startswith("1002|")
    swapped = f"{HEADER}\n{second}\n{first}"
    result = parse_sacct_parsable2(swapped, "swapped.txt", cluster="pool")
    check(result)
    assert [row[:2] for row in job_events(result, "1002")] == [
        (1, "submit"), (1, "admit"), (1, "start"), (1, "requeue"), (2, "admit"), (2, "start"), (2, "finish"),
    ]


def test_parsable2_cancelled_by_uid_before_start(parsed: ParseResult) -> None:
    assert job_events(parsed, "1003") == [
        (1, "submit", at("2026-11-01T06:00:00"), "PENDING"),
        (1, "finish", at("2026-11-01T06:45:00"), "CANCELLED"),
    ]
    finish = parsed.tables["job_events"].filter(pl.col("event_id") == "slurm:pool:1003:1:finish").row(0, named=True)
    assert finish["reason"] == "cancelled by uid 0"  # Dependency was why it waited, not why it ended
    submit = parsed.tables["job_events"].filter(pl.col("event_id") == "slurm:pool:1003:1:submit").row(0, named=True)
    assert submit["reason"] == "Dependency"
    assert finish["gpus_requested"] == 8
    assert parsed.tables["job_gpus"].filter(pl.col("job_id") == "1003").is_empty()


def test_parsable2_running_and_pending_jobs_have_no_finish(parsed: ParseResult) -> None:
    assert [row[1] for row in job_events(parsed, "1004")] == ["submit", "admit", "start"]
    running_gpus = parsed.tables["job_gpus"].filter(pl.col("job_id") == "1004")
    assert running_gpus.height == 8
    assert running_gpus["host"].unique().to_list() == ["h100-07"]
    assert running_gpus["gpu_model"].unique().to_list() == ["H100"]
    pending = parsed.tables["job_events"].filter(pl.col("job_id") == "1005")
    assert pending.select("event_type", "state", "reason", "gpu_model", "gpus_requested").rows() == [
        ("submit", "PENDING", "JobHeldUser", "L40S", 1)
    ]


def test_parsable2_final_preemption_gives_preempt_and_finish(parsed: ParseResult) -> None:
    events = parsed.tables["job_events"].filter(pl.col("job_id") == "1006")
    assert events.select("event_type", "state", "exit_code").rows()[-2:] == [
        ("preempt", "PREEMPTED", None),
        ("finish", "PREEMPTED", 143),  # ExitCode 0:15 → killed by SIGTERM
    ]


def test_parsable2_job_fields(parsed: ParseResult) -> None:
    events = parsed.tables["job_events"]
    first = events.filter(pl.col("event_id") == "slurm:pool:1001:1:finish").row(0, named=True)
    assert first | {"source_file": None} == {
        "event_id": "slurm:pool:1001:1:finish", "occurred_at": at("2026-11-01T10:01:00"),
        "event_type": "finish", "job_id": "1001", "attempt": 1, "tenant": "vision", "queue": "a100",
        "user_name": "alice", "job_name": "train-resnet", "template": None, "gpu_model": "A100",
        "gpus_requested": 4, "share_mode": "whole", "mig_profile": None, "priority": 5012,
        "state": "COMPLETED", "reason": None, "exit_code": 0, "spec_json": '{"time_limit_s":86400}',
        "source": "slurm", "source_file": None, "line_number": 2,
    }
    failed = events.filter(pl.col("event_id") == "slurm:pool:1007_3:1:finish").row(0, named=True)
    assert (failed["state"], failed["exit_code"], failed["reason"]) == ("FAILED", 1, "NonZeroExitCode")
    oom = events.filter(pl.col("event_id") == "slurm:pool:1008:1:finish").row(0, named=True)
    assert (oom["state"], oom["exit_code"]) == ("OUT_OF_MEMORY", 253)
    assert events.filter(pl.col("job_id") == "1001")["event_type"].to_list() == ["submit", "admit", "start", "finish"]
    assert events.filter(pl.col("event_type") == "submit").height == 9  # 10 job rows, 1002 has two


def test_parsable2_gpus_spread_over_hosts(parsed: ParseResult) -> None:
    per_host = (
        parsed.tables["job_gpus"].filter(pl.col("job_id").is_in(["1001", "1008"]))
        .group_by("job_id", "host").len().sort("job_id", "host").rows()
    )
    assert per_host == [
        ("1001", "gpu01", 2), ("1001", "gpu02", 2),
        ("1008", "h100-01", 1), ("1008", "h100-02", 1), ("1008", "h100-03", 1),
    ]
    assert parsed.tables["job_gpus"]["fraction"].filter(parsed.tables["job_gpus"]["job_id"] != "1011").eq(1.0).all()


def test_parsable2_mig_typed_gres(parsed: ParseResult) -> None:
    event = parsed.tables["job_events"].filter(pl.col("event_id") == "slurm:pool:1011:1:start").row(0, named=True)
    assert (event["gpu_model"], event["share_mode"], event["mig_profile"]) == ("A100", "mig", "3g.40gb")
    gpu = parsed.tables["job_gpus"].filter(pl.col("job_id") == "1011").row(0, named=True)
    assert gpu["gpu_instance_profile"] == "3g.40gb"
    assert gpu["fraction"] == pytest.approx(3 / 7)


def test_parsable_with_trailing_delimiter_and_crlf_reads_the_same(parsed: ParseResult) -> None:
    lines = PARSABLE2.read_text().splitlines()
    variant = "\r\n".join(line + "|" for line in lines[:-1]) + "\r\n" + lines[-1]  # last row still truncated
    result = parse_sacct_parsable2(variant.encode(), "p.txt", cluster="pool")
    check(result)
    assert result.records_read == 11 and result.records_loaded == 10
    assert result.tables["job_events"].drop("source_file").equals(parsed.tables["job_events"].drop("source_file"))


def test_parsable2_minimal_fields_in_any_order() -> None:
    text = (
        "end|TimelimitRaw|Cluster|jobid|State|Submit|Start\n"
        "2026-11-01T08:00:01|90|narval|5|COMPLETED|2026-11-01T08:00:00|Unknown\n"
    )
    result = parse_sacct_parsable2(text, "c.txt")
    check(result)
    events = result.tables["job_events"]
    assert events["event_id"].to_list() == ["slurm:narval:5:1:submit", "slurm:narval:5:1:finish"]
    assert events["spec_json"].to_list() == ['{"time_limit_s":5400}'] * 2
    assert events["gpus_requested"].is_null().all() and result.tables["job_gpus"].is_empty()


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (GOOD_ROW.replace("2026-11-01T08:00:05", "2026-13-01T08:00:05"),
         "Start is '2026-13-01T08:00:05': month must be in 1..12"),
        (GOOD_ROW.replace("2026-11-01T08:00:05", "yesterday"),
         "Start is 'yesterday', expected YYYY-MM-DDTHH:MM:SS, Unknown or None"),
        (GOOD_ROW.replace("|2026-11-01T08:00:00|2026-11-01T08:00:00|", "|Unknown|2026-11-01T08:00:00|", 1),
         "Submit is 'Unknown', expected a time"),
        (GOOD_ROW.replace("COMPLETED", "completed"),
         "State is 'completed', expected a Slurm job state such as COMPLETED or 'CANCELLED by 0'"),
        (GOOD_ROW.replace("|gpu01|", "|gpu[01-|"), "NodeList 'gpu[01-' has unbalanced brackets"),
        (GOOD_ROW.replace("|gres/gpu=1|gres/gpu=1|", "|gres/gpu=1|gres/gpu=two|"),
         "AllocTRES 'gres/gpu=two': gres/gpu count 'two' is not an integer"),
        (GOOD_ROW.replace("|0:0|", "|-1|"), "ExitCode is '-1', expected return_code:signal"),
        (GOOD_ROW.replace("|01:00:00|", "|forever|"),
         "Timelimit is 'forever', expected [D-]HH:MM:SS, UNLIMITED or Partition_limit"),
        (GOOD_ROW + "|extra", "expected 18 fields, found 19 (truncated row?)"),
    ],
)
def test_parsable2_bad_row_is_quarantined_with_reason(row: str, reason: str) -> None:
    result = parse_sacct_parsable2(f"{HEADER}\n{GOOD_ROW}\n{row}\n", "bad.txt")
    check(result)
    assert (result.records_read, result.records_loaded) == (2, 1)
    assert result.quarantine.select("line_number", "reason", "raw").rows() == [(3, reason, row)]


def test_parsable2_without_header_quarantines_every_row() -> None:
    result = parse_sacct_parsable2(f"{GOOD_ROW}\n{GOOD_ROW}\n{GOOD_ROW}\n", "noheader.txt")
    check(result)
    assert (result.records_read, result.records_loaded) == (2, 0)
    assert result.quarantine["line_number"].to_list() == [2, 3]
    assert result.quarantine["reason"][0].startswith("header (line 1) lacks JobID, State, Submit, Start, End")


def test_parsable2_empty_and_header_only() -> None:
    empty = parse_sacct_parsable2(b"", "empty.txt")
    check(empty)
    assert (empty.records_read, empty.tables["job_events"].height, empty.notes) == (0, 0, ["empty file"])
    header_only = parse_sacct_parsable2(HEADER + "\n", "h.txt")
    check(header_only)
    assert header_only.records_read == 0 and header_only.quarantine.is_empty()


def test_parsable2_not_utf8_line_is_quarantined() -> None:
    data = f"{HEADER}\n{GOOD_ROW}\n".encode() + GOOD_ROW.replace("ok", "\udcff", 1).encode("utf-8", "surrogateescape")
    result = parse_sacct_parsable2(data, "latin.txt")
    check(result)
    assert (result.records_read, result.records_loaded) == (2, 1)
    assert result.quarantine.select("line_number", "reason").rows() == [(3, "not valid UTF-8 at byte 3")]


# --- hostlists and GPU types -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("cdr896", ["cdr896"]),
        ("gpu[01-02]", ["gpu01", "gpu02"]),
        ("ng[30103,30203,30706-30707]", ["ng30103", "ng30203", "ng30706", "ng30707"]),
        ("h100-[1-2],a100-09", ["h100-1", "h100-2", "a100-09"]),
        ("r[1-2]n[08-09]", ["r1n08", "r1n09", "r2n08", "r2n09"]),
        ("None assigned", []),
        ("", []),
    ],
)
def test_expand_hostlist(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist", ["gpu[1-", "gpu1]", "gpu[a-b]", "gpu[5-2]", "a,,b"])
def test_expand_hostlist_rejects_malformed(hostlist: str) -> None:
    with pytest.raises(RecordError, match="NodeList"):
        expand_hostlist(hostlist)


@pytest.mark.parametrize(
    ("gres_type", "expected"),
    [
        ("a100", ("A100", None)),
        ("a100l", ("A100", None)),
        ("nvidia_a100-sxm4-80gb", ("A100", None)),
        ("a100_3g.20gb", ("A100", "3g.20gb")),
        ("h100_80gb_hbm3", ("H100", None)),
        ("l40s", ("L40S", None)),
        ("a10g", ("A10G", None)),
        ("rtx8000", ("RTX8000", None)),
        ("titanx", ("TITANX", None)),
    ],
)
def test_canonical_gpu_model(gres_type: str, expected: tuple[str, str | None]) -> None:
    assert canonical_gpu_model(gres_type) == expected


# --- sacct --json (real samples from three Slurm versions) -----------------------------------

REAL_JSON = {
    "21_8_8": {
        "job_id": "55978384", "cluster": "cedar", "events": [
            ("submit", "2023-01-09T14:37:03", "PENDING"), ("admit", "2023-01-09T14:37:03", "PENDING"),
            ("start", "2023-01-09T14:37:03", "RUNNING"), ("requeue", "2023-01-10T16:49:46", "REQUEUED"),
        ],
        "gpus": 1, "hosts": {"cdr896": 1}, "tenant": "rrg-bengioy-ad_gpu", "queue": "gpubackfill",
        "user": "purah", "name": "submitit", "priority": 1314155, "time_limit_s": 86400, "exit_code": None,
    },
    "22_5_9": {
        "job_id": "20247445_100", "cluster": "narval", "events": [
            ("submit", "2023-08-16T04:40:13", "PENDING"), ("admit", "2023-08-16T04:40:14", "PENDING"),
            ("start", "2023-09-03T11:30:41", "RUNNING"), ("finish", "2023-09-04T22:04:04", "FAILED"),
        ],
        "gpus": 16, "hosts": {"ng30103": 4, "ng30203": 4, "ng30706": 4, "ng30707": 4},
        "tenant": "rrg-bengioy-ad_gpu", "queue": "gpubase_bynode_b4", "user": "hudson",
        "name": "roberta-encoder-with_scheduler", "priority": 1550993, "time_limit_s": 172800, "exit_code": 0,
    },
    "23_11_5": {
        "job_id": "4", "cluster": "mila", "events": [
            ("submit", "2021-02-19T09:00:09", "PENDING"), ("admit", "2021-02-19T09:00:09", "PENDING"),
            ("start", "2021-02-19T09:00:09", "RUNNING"),
        ],
        "gpus": 2, "hosts": {"mila02": 2}, "tenant": "mila", "queue": "main", "user": "masterkohga",
        "name": "sh", "priority": 499522, "time_limit_s": 432000, "exit_code": None,
    },
}


def real_json(real_data: Path, version: str) -> Path:
    return real_data / "slurm" / f"sacct_json_slurm_{version}_mila_SARC.json"


@pytest.mark.parametrize("version", sorted(REAL_JSON))
def test_sacct_json_real_samples(real_data: Path, version: str) -> None:
    expected = REAL_JSON[version]
    path = real_json(real_data, version)
    result = parse_sacct_json(path.read_bytes(), path.name)
    check(result)
    assert (result.records_read, result.records_loaded, result.notes) == (1, 1, [])
    events = result.tables["job_events"]
    assert events.select("event_type", "occurred_at", "state").rows() == [
        (kind, at(when), state) for kind, when, state in expected["events"]
    ]
    assert events["event_id"].to_list() == [
        f"slurm:{expected['cluster']}:{expected['job_id']}:1:{kind}" for kind, _, _ in expected["events"]
    ]
    first = events.row(0, named=True)
    assert first["job_id"] == expected["job_id"]
    assert (first["tenant"], first["queue"], first["user_name"], first["job_name"]) == (
        expected["tenant"], expected["queue"], expected["user"], expected["name"]
    )
    assert (first["gpus_requested"], first["share_mode"], first["gpu_model"]) == (expected["gpus"], "whole", None)
    assert first["priority"] == expected["priority"]
    assert json.loads(first["spec_json"]) == {"time_limit_s": expected["time_limit_s"]}
    assert events.filter(pl.col("event_type") == "finish")["exit_code"].to_list() == (
        [] if expected["exit_code"] is None else [expected["exit_code"]]
    )
    assert events["line_number"].unique().to_list() == [1]
    gpus = result.tables["job_gpus"]
    assert dict(gpus.group_by("host").len().rows()) == expected["hosts"]
    assert gpus["assigned_at"].unique().to_list() == [at(expected["events"][2][1])]
    assert gpus["gpu"].is_null().all() and (gpus["fraction"] == 1.0).all()


def test_sacct_json_requeued_entries_become_attempts(real_data: Path) -> None:
    doc = json.loads(real_json(real_data, "21_8_8").read_text())
    first = doc["jobs"][0]
    second = copy.deepcopy(first)
    second["state"] = {"current": "COMPLETED", "reason": "None"}
    second["time"].update(submission=1673369387, eligible=1673369507, start=1673370000, end=1673380000)
    second["nodes"] = "cdr900"
    doc["jobs"] = [second, first]  # order in the document does not matter
    result = parse_sacct_json(json.dumps(doc), "requeue.json")
    check(result)
    assert result.records_read == 2
    assert job_events(result, "55978384") == [
        (1, "submit", at("2023-01-09T14:37:03"), "PENDING"),
        (1, "admit", at("2023-01-09T14:37:03"), "PENDING"),
        (1, "start", at("2023-01-09T14:37:03"), "RUNNING"),
        (1, "requeue", at("2023-01-10T16:49:46"), "REQUEUED"),
        (2, "admit", at("2023-01-10T16:51:47"), "PENDING"),
        (2, "start", at("2023-01-10T17:00:00"), "RUNNING"),
        (2, "finish", at("2023-01-10T19:46:40"), "COMPLETED"),
    ]
    assert result.tables["job_gpus"].select("attempt", "host").rows() == [(1, "cdr896"), (2, "cdr900")]
    assert result.tables["job_events"].filter(pl.col("attempt") == 2)["line_number"].unique().to_list() == [1]


def test_sacct_json_23_11_state_flags_and_cancel_actor(real_data: Path) -> None:
    doc = json.loads(real_json(real_data, "23_11_5").read_text())
    job = doc["jobs"][0]
    job["state"]["current"] = ["CANCELLED"]
    job["kill_request_user"] = "root"
    job["time"]["end"] = 1613728809
    job["exit_code"]["signal"]["id"] = {"set": True, "infinite": False, "number": 9}
    job["priority"] = {"set": False, "infinite": False, "number": 0}
    job["time"]["limit"] = {"set": True, "infinite": True, "number": 0}
    pending_requeue = copy.deepcopy(job)
    pending_requeue.update(job_id=5, state={"current": ["PENDING", "REQUEUED"], "reason": "BeginTime"}, nodes="None assigned")
    pending_requeue["time"].update(start=0, end=0)
    doc["jobs"].append(pending_requeue)
    result = parse_sacct_json(json.dumps(doc).encode(), "flags.json")
    check(result)
    finish = result.tables["job_events"].filter(pl.col("event_id") == "slurm:mila:4:1:finish").row(0, named=True)
    assert (finish["state"], finish["reason"], finish["exit_code"]) == ("CANCELLED", "cancelled by user root", 137)
    assert (finish["priority"], finish["spec_json"]) == (None, None)
    requeued = result.tables["job_events"].filter(pl.col("job_id") == "5")
    assert requeued.select("event_type", "state", "reason").rows() == [
        ("submit", "PENDING", None), ("admit", "PENDING", "BeginTime"),
    ]


def test_sacct_json_bad_entries_are_quarantined_by_index(real_data: Path) -> None:
    doc = json.loads(real_json(real_data, "22_5_9").read_text())
    good = doc["jobs"][0]
    no_submit = copy.deepcopy(good)
    no_submit["time"]["submission"] = 0
    bad_id = copy.deepcopy(good)
    bad_id["job_id"] = "20247445"
    bad_state = copy.deepcopy(good)
    bad_state["state"]["current"] = 3
    bad_tres = copy.deepcopy(good)
    bad_tres["tres"]["allocated"][4]["count"] = "16"
    doc["jobs"] = [good, no_submit, bad_id, bad_state, bad_tres, ["not", "a", "job"]]
    result = parse_sacct_json(json.dumps(doc), "bad.json")
    check(result)
    assert (result.records_read, result.records_loaded) == (6, 1)
    assert result.quarantine.select("line_number", "reason").rows() == [
        (2, "jobs[1]: field 'time.submission' is unset"),
        (3, "jobs[2]: field 'job_id' is string \"20247445\", expected integer"),
        (4, "jobs[3]: field 'state.current' is integer, expected a state or a list of states"),
        (5, "jobs[4]: field 'tres.allocated[4].count' is string \"16\", expected integer"),
        (6, "jobs[5]: job is array, expected a JSON object"),
    ]
    assert json.loads(result.quarantine["raw"][0])["job_id"] == 20247445


def test_sacct_json_invalid_document_is_one_quarantined_record(real_data: Path) -> None:
    text = real_json(real_data, "21_8_8").read_text()
    truncated = text[: text.index('"tres"')]
    result = parse_sacct_json(truncated, "cut.json")
    check(result)
    assert (result.records_read, result.records_loaded) == (1, 0)
    row = result.quarantine.row(0, named=True)
    assert row["reason"].startswith("invalid JSON document: ")
    assert row["line_number"] == truncated.count("\n") + 1
    assert row["stage"] == "parse"
    no_jobs = parse_sacct_json('{"meta": {}, "errors": []}', "nojobs.json")
    check(no_jobs)
    assert no_jobs.quarantine["reason"].to_list() == ["field 'jobs' is null, expected array"]


def test_sacct_json_empty_file_and_errors_reported() -> None:
    empty = parse_sacct_json(b"  \n", "empty.json")
    check(empty)
    assert (empty.records_read, empty.notes) == (0, ["empty file"])
    with_error = parse_sacct_json('{"jobs": [], "errors": [{"error": "Unable to contact slurmdbd"}]}', "e.json")
    check(with_error)
    assert with_error.notes == ['sacct reported error: {"error":"Unable to contact slurmdbd"}']


def test_partition_limit_is_read_in_either_case():
    # Slurm 22.05 prints Partition_Limit; older releases and the man page say Partition_limit.
    header = "JobID|State|Submit|Start|End|Timelimit"
    rows = [
        "11|COMPLETED|2026-11-01T10:00:00|2026-11-01T10:01:00|2026-11-01T10:05:00|Partition_Limit",
        "12|COMPLETED|2026-11-01T10:00:00|2026-11-01T10:01:00|2026-11-01T10:05:00|Partition_limit",
    ]
    result = parse_sacct_parsable2("\n".join([header, *rows]) + "\n", "sacct.txt")
    assert result.quarantine.height == 0
    assert result.records_loaded == 2
