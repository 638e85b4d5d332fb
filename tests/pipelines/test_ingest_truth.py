"""The ingest CLI tells cron the truth (issue 11, section 4): exit codes, parser notes, unread files,
history dates, records on their own day, empty files, build errors with their cause, Slurm reasons.

End to end through `gpupool` (click's runner, in process) where it is about the CLI.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from click.testing import CliRunner

from pipelines import ingest as ingest_module
from pipelines.assets.backfill import merge_spilled
from pipelines.cli import main
from pipelines.cli.common import EXIT_BLOCKED, EXIT_FAILED, EXIT_NOTHING_READ, EXIT_USAGE
from pipelines.ingest import Spilled, ingest_days, ingest_partition, stage_files
from pipelines.partitions import FIRST_DAY
from pipelines.resources.warehouse import WarehouseResource
from pipelines.sources.registry import SOURCES
from pipelines.sources.slurm_sacct import parse_sacct_json, parse_sacct_parsable2
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow  # ingests and builds through the CLI

D1, D2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)
SACCT_FIXTURE = Path(__file__).parents[1] / "sources" / "fixtures" / "sacct_parsable2_duplicates.txt"


def gpupool(*args: str, home: Path):
    result = CliRunner().invoke(main, [*args, "--home", str(home)], catch_exceptions=True)
    # a failure ends in a message and an exit code, never in an uncaught exception (a traceback)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {result.exception!r}\n{result.output}"
    )
    return result


def rows(wh: Warehouse, sql: str, params: list | None = None) -> list[tuple]:
    with wh.connect(read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def sacct_file(tmp_path: Path) -> Path:
    """The parsable2 fixture (7 step rows) without its deliberately truncated row: a clean batch."""
    header, *lines = SACCT_FIXTURE.read_text().splitlines()
    clean = tmp_path / "sacct" / "jobs.txt"
    clean.parent.mkdir(exist_ok=True)
    clean.write_text("\n".join([header, *(x for x in lines if x.count("|") == header.count("|"))]) + "\n")
    return clean


def ms(moment: str) -> int:
    return int(dt.datetime.fromisoformat(moment).replace(tzinfo=dt.UTC).timestamp() * 1000)


def prom(*samples: tuple[str, str, float]) -> str:
    """dcgm-exporter text lines: (gpu uuid, UTC time, value)."""
    return "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{uuid}",Hostname="n1"}} {value} {ms(at)}\n' for uuid, at, value in samples
    )


# --- 1. a blocking data-quality failure exits non-zero ---------------------------------------------


def test_a_batch_failing_its_blocking_check_exits_3_and_says_models_not_rebuilt(tmp_path):
    broken = tmp_path / "broken.prom"
    broken.write_text(
        prom(("GPU-1", "2026-11-05T10:00:00", 50))
        + 'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2",Hostname="n1"} NaN 1793786400000\n'
        + 'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-3",Hostname="n1\n'
    )
    result = gpupool("ingest", "dcgm_text", str(broken), "--date", "2026-11-05", home=tmp_path / "home")
    assert result.exit_code == EXIT_BLOCKED, result.output
    assert "3 read, 1 loaded, 2 quarantined" in result.output
    assert "failed its blocking data-quality check: models not rebuilt" in result.output


def test_exit_codes_are_documented():
    text = (Path(__file__).parents[2] / "docs" / "operators.md").read_text()
    table = text[text.index("## Exit codes"):]
    for code in (0, EXIT_FAILED, EXIT_USAGE, EXIT_BLOCKED, EXIT_NOTHING_READ):
        assert f"\n| {code} |" in table, code


# --- 2. parser notes are kept and printed ------------------------------------------------------------


def test_parser_notes_are_printed_and_kept_in_the_ingest_log(tmp_path):
    home = tmp_path / "home"
    result = gpupool("ingest", "slurm_sacct", str(sacct_file(tmp_path)), "--date", "2026-11-01", "--no-build",
                     home=home)
    assert result.exit_code == 0, result.output
    assert "note: jobs.txt: 7 step rows ignored" in result.output
    [(notes,)] = rows(Warehouse(home), "select notes from ops.ingest_log")
    assert json.loads(notes) == ["jobs.txt: 7 step rows ignored (steps are not jobs)"]


def test_priority_beyond_int32_in_real_sacct_json_is_noted(tmp_path, real_data):
    doc = json.loads((real_data / "slurm" / "sacct_json_slurm_22_5_9_mila_SARC.json").read_text())
    doc["jobs"][0]["priority"] = 2**32 + 5
    big = tmp_path / "big_priority.json"
    big.write_text(json.dumps(doc))
    home = tmp_path / "home"
    result = gpupool("ingest", "slurm_sacct_json", str(big), "--date", "2026-11-01", "--no-build", home=home)
    assert result.exit_code == 0, result.output
    assert "priority above 2^31-1; stored as null" in result.output
    [(notes,)] = rows(Warehouse(home), "select notes from ops.ingest_log")
    assert "priority above 2^31-1" in notes


# --- 3. files the source does not read ---------------------------------------------------------------


def test_a_file_the_source_does_not_read_is_refused_with_exit_4(tmp_path, real_data):
    sample = real_data / "slurm" / "sacct_json_slurm_22_5_9_mila_SARC.json"
    result = gpupool("ingest", "slurm_sacct", str(sample), "--date", "2026-11-01", "--no-build", home=tmp_path / "h")
    assert result.exit_code == EXIT_NOTHING_READ, result.output
    assert sample.name in result.output and "*.txt, *.psv, *.sacct" in result.output
    assert "staged" not in result.output


def test_a_folder_warns_about_each_file_not_read(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(sacct_file(tmp_path), folder / "jobs.txt")
    (folder / "jobs.json").write_text("{}")
    result = gpupool("ingest", "slurm_sacct", str(folder), "--date", "2026-11-01", "--no-build", home=tmp_path / "h")
    assert result.exit_code == 0, result.output
    assert "jobs.json: not read: source slurm_sacct reads *.txt, *.psv, *.sacct" in result.output
    assert "staged 1 file(s)" in result.output


# --- 4. history and malformed dates ------------------------------------------------------------------


def test_a_date_years_back_is_accepted(tmp_path):
    home = tmp_path / "home"
    result = gpupool("ingest", "slurm_sacct", str(sacct_file(tmp_path)), "--date", "2019-06-01", "--no-build",
                     home=home)
    assert result.exit_code == 0, result.output
    assert rows(Warehouse(home), "select distinct partition_date from raw.job_events") == [(dt.date(2019, 6, 1),)]


@pytest.mark.parametrize(("day", "words"), [
    ("2019-13-45", "is not a date YYYY-MM-DD"),
    ("yesterday", "is not a date YYYY-MM-DD"),
    ((FIRST_DAY - dt.timedelta(days=1)).isoformat(), f"before the first partition, {FIRST_DAY}"),
    ("2999-01-01", "in the future"),
])
def test_a_bad_date_is_a_usage_error_naming_the_problem(tmp_path, day, words):
    result = gpupool("ingest", "slurm_sacct", str(SACCT_FIXTURE), "--date", day, "--no-build", home=tmp_path / "h")
    assert result.exit_code == EXIT_USAGE, result.output
    assert words in result.output and "--date" in result.output
    assert "no warehouse" not in result.output


# --- 5. records on their own day ---------------------------------------------------------------------


def _day_rows(wh: Warehouse, day: dt.date) -> list[tuple]:
    return rows(
        wh, "select uuid, strftime(sampled_at, '%H:%M'), value from raw.dcgm_samples where partition_date = ? "
        "order by all", [day],
    )


def test_samples_spanning_midnight_land_on_their_own_day_and_reingesting_that_day_replaces_its_files_rows(tmp_path):
    home = tmp_path / "home"
    span = tmp_path / "span.prom"
    span.write_text(prom(("GPU-1", "2026-11-01T23:59:00", 10), ("GPU-1", "2026-11-02T00:01:00", 20)))
    assert gpupool("ingest", "dcgm_text", str(span), "--date", "2026-11-01", "--no-build", home=home).exit_code == 0
    wh = Warehouse(home)
    assert _day_rows(wh, D1) == [("GPU-1", "23:59", 10.0)]
    assert _day_rows(wh, D2) == [("GPU-1", "00:01", 20.0)]

    day2 = tmp_path / "day2.prom"
    day2.write_text(prom(("GPU-1", "2026-11-02T00:01:00", 25), ("GPU-1", "2026-11-02T06:00:00", 70)))
    assert gpupool("ingest", "dcgm_text", str(day2), "--date", "2026-11-02", "--no-build", home=home).exit_code == 0
    # day 1's file still holds its 00:01 sample: both deliveries are kept (the staging reads the latest)
    assert _day_rows(wh, D2) == [("GPU-1", "00:01", 20.0), ("GPU-1", "00:01", 25.0), ("GPU-1", "06:00", 70.0)]
    assert _day_rows(wh, D1) == [("GPU-1", "23:59", 10.0)]
    day2.write_text(prom(("GPU-1", "2026-11-02T06:00:00", 71)))
    assert gpupool("ingest", "dcgm_text", str(day2), "--date", "2026-11-02", "--no-build", home=home).exit_code == 0
    assert _day_rows(wh, D2) == [("GPU-1", "00:01", 20.0), ("GPU-1", "06:00", 71.0)]


def test_lines_without_a_timestamp_go_to_the_date_given(tmp_path, real_data):
    wh = Warehouse(tmp_path / "home")
    stage_files(wh, "dcgm_text", real_data / "dcgm-exporter" / "metrics_sample_a100_mig_nvidia_docs.prom", D1)
    report = ingest_partition(wh, "dcgm_text", D1)
    assert report.records_loaded > 0
    assert rows(wh, "select distinct partition_date from raw.dcgm_samples") == [(D1,)]


def test_prometheus_range_across_midnight_splits_by_sample_day(tmp_path):
    def series(uuid: str) -> dict:
        return {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "UUID": uuid, "Hostname": "n1"},
                "values": [[ms("2026-11-01T23:58:00") / 1000, "1"], [ms("2026-11-02T00:02:00") / 1000, "2"]]}

    body = {"status": "success", "data": {"resultType": "matrix", "result": [series("GPU-1"), series("GPU-2")]}}
    path = tmp_path / "range.json"
    path.write_text(json.dumps(body))
    wh = Warehouse(tmp_path / "home")
    stage_files(wh, "prometheus", path, D1)
    report = ingest_partition(wh, "prometheus", D1)
    assert report.records_loaded == 4 and report.rows_by_table == {"dcgm_samples": 2}
    assert any("2 record(s) timestamped 2026-11-02" in n for n in report.notes)
    assert rows(wh, "select partition_date, count(*) from raw.dcgm_samples group by 1 order by 1") == [(D1, 2), (D2, 2)]


def test_a_run_over_days_keeps_records_carried_across_midnight_and_reingest_drops_moved_rows(tmp_path):
    wh = Warehouse(tmp_path / "home")
    (tmp_path / "a.prom").write_text(prom(("GPU-1", "2026-11-01T23:59:00", 1), ("GPU-1", "2026-11-02T00:01:00", 2)))
    (tmp_path / "b.prom").write_text(prom(("GPU-2", "2026-11-02T12:00:00", 3)))
    stage_files(wh, "dcgm_text", tmp_path / "a.prom", D1)
    stage_files(wh, "dcgm_text", tmp_path / "b.prom", D2)
    ingest_days(wh, "dcgm_text", [D1, D2])
    assert _day_rows(wh, D2) == [("GPU-1", "00:01", 2.0), ("GPU-2", "12:00", 3.0)]
    ingest_partition(wh, "dcgm_text", D1)  # re-ingesting day 1 does not disturb day 2's own rows
    assert _day_rows(wh, D2) == [("GPU-1", "00:01", 2.0), ("GPU-2", "12:00", 3.0)]
    (wh.landing / "dcgm_text" / D1.isoformat() / "a.prom").unlink()
    ingest_partition(wh, "dcgm_text", D1)  # what day 1's files moved to day 2 goes with them
    assert _day_rows(wh, D2) == [("GPU-2", "12:00", 3.0)]
    assert _day_rows(wh, D1) == []


def _audit_line(real_data: Path, moment: str, audit_id: str) -> str:
    event = json.loads((real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl").read_text().splitlines()[0])
    for field in ("timestamp", "requestReceivedTimestamp", "stageTimestamp"):
        event[field] = moment
    event["metadata"]["creationTimestamp"] = moment
    return json.dumps(event | {"auditID": audit_id}) + "\n"


def test_reingesting_a_day_keeps_the_records_its_files_put_on_an_earlier_day_once_and_drops_those_gone(
        tmp_path, real_data):
    """A warehouse table's moved rows: a day-2 file's record timestamped day 1 is merged into day 1, and
    deleting what an earlier ingest of day 2 moved must come before that merge, not after it."""
    wh = Warehouse(tmp_path / "home")
    audit = tmp_path / "audit.jsonl"
    audit.write_text(_audit_line(real_data, "2026-11-01T23:59:00Z", "early")
                     + _audit_line(real_data, "2026-11-02T08:00:00Z", "own"))
    stage_files(wh, "k8s_audit", audit, D2)

    def per_day() -> list[tuple]:
        return rows(wh, "select partition_date, count(*) from raw.audit_events group by 1 order by 1")

    ingest_partition(wh, "k8s_audit", D2)
    assert per_day() == [(D1, 1), (D2, 1)]
    ingest_partition(wh, "k8s_audit", D2)  # again: the day-1 record is there once, not twice, not gone
    assert per_day() == [(D1, 1), (D2, 1)]
    (wh.landing / "k8s_audit" / D2.isoformat() / "audit.jsonl").write_text(
        _audit_line(real_data, "2026-11-02T08:00:00Z", "own"))
    ingest_partition(wh, "k8s_audit", D2)  # the file no longer holds it: it leaves day 1 too
    assert per_day() == [(D2, 1)]


@pytest.mark.parametrize("how", ["run", "day by day", "newest first"])
def test_reingesting_a_day_alone_keeps_what_the_day_befores_files_put_on_it(tmp_path, real_data, how):
    """Records of day 1's files timestamped on day 2 (carried there by a run, or merged by day 1's own
    ingest) belong to day 1's files: re-ingesting day 2 alone replaces day 2's files' rows and keeps
    them, in a warehouse table (audit events) and a lake table (DCGM samples); re-ingesting day 1 once
    its file no longer holds them takes them away. Each order of ingesting the days ends the same."""
    wh = Warehouse(tmp_path / "home")
    landed = {
        "k8s_audit": {D1: ("jsonl", _audit_line(real_data, "2026-11-01T10:00:00Z", "a")
                           + _audit_line(real_data, "2026-11-02T00:00:30Z", "b")),
                      D2: ("jsonl", _audit_line(real_data, "2026-11-02T12:00:00Z", "d"))},
        "dcgm_text": {D1: ("prom", prom(("GPU-1", "2026-11-01T23:59:00", 1), ("GPU-1", "2026-11-02T00:01:00", 2))),
                      D2: ("prom", prom(("GPU-2", "2026-11-02T12:00:00", 3)))},
    }
    for source, days in landed.items():
        for day, (suffix, text) in days.items():
            path = tmp_path / f"{source}-{day}.{suffix}"
            path.write_text(text)
            stage_files(wh, source, path, day)
        if how == "run":
            ingest_days(wh, source, [D1, D2])
        else:
            for day in (D1, D2) if how == "day by day" else (D2, D1):
                ingest_partition(wh, source, day)

    def on_day_2() -> tuple[list[tuple], list[tuple]]:
        return (rows(wh, "select audit_id from raw.audit_events where partition_date = ? order by 1", [D2]),
                _day_rows(wh, D2))

    both = ([("b",), ("d",)], [("GPU-1", "00:01", 2.0), ("GPU-2", "12:00", 3.0)])
    assert on_day_2() == both
    for source in landed:
        ingest_partition(wh, source, D2)
    assert on_day_2() == both  # not lost, not twice
    for source, (suffix, _) in (("k8s_audit", ("jsonl", "")), ("dcgm_text", ("prom", ""))):
        (wh.landing / source / D1.isoformat() / f"{source}-{D1}.{suffix}").write_text(
            _audit_line(real_data, "2026-11-01T10:00:00Z", "a") if source == "k8s_audit"
            else prom(("GPU-1", "2026-11-01T23:59:00", 1)))
        ingest_partition(wh, source, D1)
    assert on_day_2() == ([("d",)], [("GPU-2", "12:00", 3.0)])


@pytest.mark.parametrize("failing", ["_commit_ingest", "merge_files"])
def test_a_reingest_that_fails_leaves_the_next_days_rows_of_its_files_as_they_were(tmp_path, real_data, monkeypatch,
                                                                                   failing):
    """Day 1's files put a record on day 2, in a warehouse table (audit events) and a lake table (DCGM
    samples). A re-ingest of day 1 with that record changed that fails at its commit, or after it and
    before its records are merged into day 2, leaves day 2 with the record it had, not without it (it
    used to take them off day 2 before its commit), also once day 2 is ingested again; run again, it
    ends with the new record."""
    wh = Warehouse(tmp_path / "home")

    def day_1_file(source: str, name: str, value: int) -> tuple[str, str]:
        if source == "k8s_audit":
            return "jsonl", (_audit_line(real_data, "2026-11-01T10:00:00Z", "a")
                             + _audit_line(real_data, "2026-11-02T00:00:30Z", name))
        return "prom", prom(("GPU-1", "2026-11-01T23:59:00", 1), ("GPU-1", "2026-11-02T00:01:00", value))

    for source in ("k8s_audit", "dcgm_text"):
        for day, (suffix, text) in ((D1, day_1_file(source, "b", 2)), (D2, (
                ("jsonl", _audit_line(real_data, "2026-11-02T12:00:00Z", "d")) if source == "k8s_audit"
                else ("prom", prom(("GPU-2", "2026-11-02T12:00:00", 3)))))):
            path = tmp_path / f"{source}-{day}.{suffix}"
            path.write_text(text)
            stage_files(wh, source, path, day)
        ingest_days(wh, source, [D1, D2])

    def on_day_2() -> tuple[list[tuple], list[tuple]]:
        return (rows(wh, "select audit_id from raw.audit_events where partition_date = ? order by 1", [D2]),
                _day_rows(wh, D2))

    assert on_day_2() == ([("b",), ("d",)], [("GPU-1", "00:01", 2.0), ("GPU-2", "12:00", 3.0)])
    for source in ("k8s_audit", "dcgm_text"):
        suffix, text = day_1_file(source, "b2", 5)
        (wh.landing / source / D1.isoformat() / f"{source}-{D1}.{suffix}").write_text(text)

    def fail(*_args, **_kwargs):
        raise RuntimeError("killed")

    with monkeypatch.context() as patched:
        patched.setattr(Warehouse, failing, fail)
        for source in ("k8s_audit", "dcgm_text"):
            with pytest.raises(RuntimeError, match="killed"):
                ingest_partition(wh, source, D1)
    for source in ("k8s_audit", "dcgm_text"):  # day 2 read again from the lake's newest version
        ingest_partition(wh, source, D2)
    assert on_day_2() == ([("b",), ("d",)], [("GPU-1", "00:01", 2.0), ("GPU-2", "12:00", 3.0)])
    for source in ("k8s_audit", "dcgm_text"):
        ingest_partition(wh, source, D1)
    assert on_day_2() == ([("b2",), ("d",)], [("GPU-1", "00:01", 5.0), ("GPU-2", "12:00", 3.0)])


def test_chunks_ingested_side_by_side_replace_what_their_files_put_on_each_others_days(tmp_path, real_data):
    """The backfill's chunks (days 1 and 2 here, each its own run): day 1's file puts a record on day 2;
    its chunk spills it and `merge_spilled` merges it once both chunks are in. Ingested again, the record
    changed, it is replaced; then with the record gone from day 1's file, it leaves day 2 (day 1's
    chunk takes it off after its commit, as nothing spills there), in a warehouse and a lake table."""
    wh = Warehouse(tmp_path / "home")

    def day_1_text(source: str, second: str | None) -> str:
        if source == "k8s_audit":
            return _audit_line(real_data, "2026-11-01T10:00:00Z", "a") + (
                _audit_line(real_data, "2026-11-02T00:00:30Z", second) if second else "")
        return prom(("GPU-1", "2026-11-01T23:59:00", 1), *([("GPU-1", "2026-11-02T00:01:00", int(second))]
                                                          if second else []))

    def backfill() -> None:
        steps = []
        for source in ("k8s_audit", "dcgm_text"):
            for day in (D1, D2):  # each day a chunk of its own
                spilled: Spilled = []
                ingest_days(wh, source, [day], spilled=spilled)
                steps.append([(other, tables, files, source) for other, tables, files in spilled])
        merge_spilled(dg.build_op_context(), warehouse=WarehouseResource(home=str(wh.home)), steps=steps)

    def on_day_2() -> tuple[list[tuple], list[tuple]]:
        return (rows(wh, "select audit_id from raw.audit_events where partition_date = ? order by 1", [D2]),
                _day_rows(wh, D2))

    for source, suffix in (("k8s_audit", "jsonl"), ("dcgm_text", "prom")):
        for day, text in ((D1, day_1_text(source, "2")), (D2, _audit_line(real_data, "2026-11-02T12:00:00Z", "d")
                                                           if source == "k8s_audit"
                                                           else prom(("GPU-2", "2026-11-02T12:00:00", 3)))):
            path = tmp_path / f"{source}-{day}.{suffix}"
            path.write_text(text)
            stage_files(wh, source, path, day)
    backfill()
    assert on_day_2() == ([("2",), ("d",)], [("GPU-1", "00:01", 2.0), ("GPU-2", "12:00", 3.0)])
    for second, expected in (("5", ([("5",), ("d",)], [("GPU-1", "00:01", 5.0), ("GPU-2", "12:00", 3.0)])),
                             (None, ([("d",)], [("GPU-2", "12:00", 3.0)]))):
        for source, suffix in (("k8s_audit", "jsonl"), ("dcgm_text", "prom")):
            (wh.landing / source / D1.isoformat() / f"{source}-{D1}.{suffix}").write_text(day_1_text(source, second))
        backfill()
        assert on_day_2() == expected


def test_a_run_of_days_that_are_not_consecutive_is_refused(tmp_path):
    """What a run carries to its later days is committed with them, and a day's commit replaces the rows
    of the run's earlier days' files: a gap in the run would lose the records carried to it."""
    with pytest.raises(ValueError, match="consecutive"):
        ingest_days(Warehouse(tmp_path / "home"), "k8s_audit", [D1, D1 + dt.timedelta(days=2)])


@pytest.mark.parametrize(("slice_rows", "commits"), [(None, 1), (3, 2)])
@pytest.mark.parametrize("source_name", ["k8s_audit", "dcgm_text"])
def test_a_run_of_days_commits_together_and_ends_as_day_by_day(tmp_path, real_data, monkeypatch, slice_rows,
                                                              commits, source_name):
    """Records whose files sit on the day before or after their own, some inside the run (carried, or
    merged into a day already committed) and some after it (merged), in a warehouse table (audit events)
    and a lake table (DCGM samples): the run commits its days in one writer session (two when the rows
    the days hold in memory pass a slice: days 1 and 2, then day 3) and ends with the same rows and
    ingest log as the same run committing each day as it is read (ingest_partition over the run's days,
    carrying as the run does)."""
    if slice_rows is not None:
        monkeypatch.setattr(ingest_module, "SLICE_ROWS", slice_rows)
    d3, d4 = D2 + dt.timedelta(days=1), D2 + dt.timedelta(days=2)
    landed = {D1: [("2026-11-01T10:00:00Z", "a"), ("2026-11-02T00:00:30Z", "b")],  # b: carried to day 2
              D2: [("2026-11-01T23:59:59Z", "c"), ("2026-11-02T12:00:00Z", "d")],  # c: merged into day 1
              d3: [("2026-11-03T01:00:00Z", "e"), ("2026-11-04T00:00:01Z", "f")]}  # f: after the run
    if source_name == "dcgm_text":  # a day's bad line is its quarantine, the rows a slice counts
        landed[D1].append(("2026-11-01T11:00:00Z", "bad"))
        landed[D2].append(("2026-11-02T13:00:00Z", "bad"))

    def text(records: list[tuple[str, str]]) -> str:
        if source_name == "k8s_audit":
            return "".join(_audit_line(real_data, moment, audit_id) for moment, audit_id in records)
        return "".join("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-" + name + "\",Hostname=\"n1\"} "
                       + ("not-a-number" if name == "bad" else "1") + f" {ms(moment.rstrip('Z'))}\n"
                       for moment, name in records)

    homes = {}
    for how in ("run", "day by day"):
        wh = homes[how] = Warehouse(tmp_path / how.replace(" ", "_"))
        for day, records in landed.items():
            path = tmp_path / f"{how}-{day}.{'jsonl' if source_name == 'k8s_audit' else 'prom'}"
            path.write_text(text(records))
            stage_files(wh, source_name, path, day)
    sessions = []
    real_writer = Warehouse.writer
    monkeypatch.setattr(Warehouse, "writer", lambda self: sessions.append(1) or real_writer(self))
    ingest_days(homes["run"], source_name, [D1, D2, d3])
    assert len(sessions) == commits + 2  # the days' commits, then the merges into day 1 and day 4
    carried: dict = {}
    for day in (D1, D2, d3):
        ingest_partition(homes["day by day"], source_name, day, carried=carried, run_first=D1, run_last=d3)

    def contents(wh: Warehouse) -> tuple[list[tuple], list[tuple]]:
        records = ("select partition_date, audit_id, occurred_at from raw.audit_events order by all"
                   if source_name == "k8s_audit" else
                   "select partition_date, substr(uuid, 5), sampled_at from raw.dcgm_samples order by all")
        return (rows(wh, records),
                rows(wh, "select partition_date, files_read, records_read, records_loaded, records_quarantined, "
                         "rows_by_table, notes from ops.ingest_log order by all"))

    assert contents(homes["run"]) == contents(homes["day by day"])
    assert [(day, name) for day, name, _ in contents(homes["run"])[0]] == [
        (D1, "a"), (D1, "c"), (D2, "b"), (D2, "d"), (d3, "e"), (d4, "f")]


def test_audit_events_go_to_their_own_day(tmp_path, real_data):
    wh = Warehouse(tmp_path / "home")
    stage_files(wh, "k8s_audit", real_data / "k8s-audit" / "falco_k8s_audit_events.jsonl", D1)
    ingest_partition(wh, "k8s_audit", D1)
    mismatched = rows(wh, "select count(*) from raw.audit_events where cast(occurred_at as date) <> partition_date")
    assert mismatched == [(0,)]


# --- 6. an empty file counts the same in every source ------------------------------------------------


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_an_empty_file_counts_the_same_in_every_source(tmp_path, source):
    src = SOURCES[source]
    empty = tmp_path / f"empty{src.patterns[0].removeprefix('*')}"
    empty.write_bytes(b"")
    home = tmp_path / "home"
    result = gpupool("ingest", source, str(empty), "--date", "2026-11-01", "--no-build", home=home)
    assert result.exit_code == 0, result.output
    assert "0 read, 0 loaded, 0 quarantined" in result.output
    assert f"{empty.name}: empty file" in result.output
    [(read, loaded, quarantined, notes)] = rows(
        Warehouse(home), "select records_read, records_loaded, records_quarantined, notes from ops.ingest_log")
    assert (read, loaded, quarantined) == (0, 0, 0)
    assert json.loads(notes) == [f"{empty.name}: empty file"]


# --- 7. a failed build says why ------------------------------------------------------------------------


def test_a_failed_build_prints_the_model_and_duckdbs_message_without_a_traceback(tmp_path):
    wh = Warehouse(tmp_path / "home")
    with wh.writer() as con:  # a raw table without the columns its staging view reads
        con.execute("drop table raw.audit_events")
        con.execute("create table raw.audit_events (x integer)")
    result = gpupool("build", home=wh.home)
    assert result.exit_code == EXIT_FAILED, result.output
    assert "models/staging/audit/stg_audit__events.sql: building staging.stg_audit__events failed" in result.output
    assert "Binder Error: Referenced column" in result.output  # DuckDB's message
    assert "Traceback" not in result.output
    assert "Traceback" in (wh.home / "logs" / "last-error.log").read_text()


def test_a_failed_blocking_check_of_the_build_names_what_it_found(tmp_path, monkeypatch):
    from pipelines import build_checks

    monkeypatch.setattr(build_checks, "catalog_mismatches", lambda _con: ["marts.dim_jobs.x: documented but not produced"])
    result = gpupool("build", home=tmp_path / "home")
    assert result.exit_code == EXIT_FAILED, result.output
    assert ("blocking check catalog_matches_models failed on metrics/catalog: "
            "marts.dim_jobs.x: documented but not produced") in result.output
    assert "Traceback" not in result.output


def test_a_failed_ingest_step_prints_its_cause(tmp_path, monkeypatch):
    def boom(_data: bytes, source_file: str):
        raise KeyError(f"{Path(source_file).name}: field 'JobID' vanished")

    monkeypatch.setitem(SOURCES, "slurm_sacct", dataclasses.replace(SOURCES["slurm_sacct"], parse_bytes=boom))
    result = gpupool("ingest", "slurm_sacct", str(sacct_file(tmp_path)), "--date", "2026-11-01", home=tmp_path / "h")
    assert result.exit_code == EXIT_FAILED, result.output
    assert "ingest of raw_slurm_sacct failed: raw_slurm_sacct: KeyError: \"jobs.txt: field 'JobID' vanished\"" in (
        result.output)
    assert "Traceback" not in result.output


# --- 8. a Slurm pending reason is a wait cause, not an end reason ------------------------------------

HEADER = "JobID|JobName|Partition|Account|User|State|ExitCode|Submit|Eligible|Start|End|Priority|NodeList|AllocTRES|Reason"


def _sacct_row(job: str, state: str, reason: str, start: str = "2026-11-01T09:00:00",
               end: str = "2026-11-01T10:00:00") -> str:
    return (f"{job}|j|gpu|acct|alice|{state}|0:0|2026-11-01T08:00:00|2026-11-01T08:00:00|{start}|{end}|10|"
            f"n1|gres/gpu=1|{reason}")


def _reasons(result, job: str) -> dict[str, str | None]:
    events = result.tables["job_events"].filter(pl.col("job_id") == job)
    return dict(events.select("event_type", "reason").rows())


@pytest.mark.parametrize("pending", ["BeginTime", "JobHeldUser", "Priority", "Resources", "Dependency"])
def test_parsable2_pending_reason_is_not_the_end_reason_of_a_completed_job(pending):
    result = parse_sacct_parsable2(f"{HEADER}\n{_sacct_row('1', 'COMPLETED', pending)}\n", "s.txt")
    reasons = _reasons(result, "1")
    assert reasons["finish"] is None
    assert reasons["admit"] == pending  # why it waited


def test_parsable2_end_reasons_and_still_pending_jobs_keep_theirs():
    text = "\n".join([
        HEADER,
        _sacct_row("1", "FAILED", "NonZeroExitCode"),
        _sacct_row("2", "PENDING", "Priority", start="Unknown", end="Unknown"),
    ])
    result = parse_sacct_parsable2(text, "s.txt")
    assert _reasons(result, "1")["finish"] == "NonZeroExitCode"
    assert _reasons(result, "2") == {"submit": None, "admit": "Priority"}


def test_sacct_json_pending_reason_is_not_the_end_reason(real_data):
    doc = json.loads((real_data / "slurm" / "sacct_json_slurm_22_5_9_mila_SARC.json").read_text())
    job = doc["jobs"][0]
    job["state"] = {"current": "COMPLETED", "reason": "JobHeldUser"}
    failed = copy.deepcopy(job)
    failed["state"] = {"current": "FAILED", "reason": "NonZeroExitCode"}
    failed["array"]["task_id"] = 101  # the sample is array task 20247445_100
    doc["jobs"].append(failed)
    result = parse_sacct_json(json.dumps(doc), "j.json")
    completed = _reasons(result, "20247445_100")
    assert completed["finish"] is None
    assert completed["admit"] == "JobHeldUser"
    assert _reasons(result, "20247445_101")["finish"] == "NonZeroExitCode"
