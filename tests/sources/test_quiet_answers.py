"""A well-formed answer without a record (a quiet day) is told apart from input nothing could be read
from: the first is `empty_answer` and passes the blocking check, the second still fails it.

The Slurm samples are what the test cluster answered for 2020-01-01, a day without jobs
(tests/fixtures/real-data/PROVENANCE.md)."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from pipelines.checks import day_problems
from pipelines.ingest import ingest_partition, landing_folder
from pipelines.sources.dcgm_text import parse_dcgm_text
from pipelines.sources.kueue import parse_kueue_workloads
from pipelines.sources.node_exporter import parse_node_exporter_text
from pipelines.sources.prometheus import parse_query_range
from pipelines.sources.slurm_sacct import parse_sacct_json, parse_sacct_parsable2
from pipelines.sources.slurm_sacctmgr import parse_sacctmgr_transactions
from pipelines.sources.slurm_squeue import parse_squeue_job_gpus
from pipelines.warehouse import Warehouse

DAY = dt.date(2020, 1, 1)
SACCT_TEXT = "sacct_parsable2_no_jobs_slurm_22_5_8_gpupool_cluster.txt"
SACCT_JSON = "sacct_json_nothing_found_slurm_22_5_8_gpupool_cluster.json"
SACCTMGR = "sacctmgr_transactions_none_slurm_22_5_8_gpupool_cluster.txt"


def slurm_sample(real_data: Path, name: str) -> bytes:
    return (real_data / "slurm" / name).read_bytes()


def test_header_only_sacct_is_a_quiet_answer(real_data):
    parsed = parse_sacct_parsable2(slurm_sample(real_data, SACCT_TEXT), SACCT_TEXT)
    assert parsed.empty_answer
    assert (parsed.records_read, parsed.quarantine.height) == (0, 0)
    assert any("quiet day" in note for note in parsed.notes)


def test_sacct_json_nothing_found_is_a_quiet_answer(real_data):
    parsed = parse_sacct_json(slurm_sample(real_data, SACCT_JSON), SACCT_JSON)
    assert parsed.empty_answer
    assert (parsed.records_read, parsed.quarantine.height) == (0, 0)


def test_header_only_sacctmgr_is_a_quiet_answer(real_data):
    parsed = parse_sacctmgr_transactions(slurm_sample(real_data, SACCTMGR), SACCTMGR)
    assert parsed.empty_answer and parsed.records_read == 0


@pytest.mark.parametrize("parse, data", [
    (parse_squeue_job_gpus, b'{"jobs": []}'),
    (parse_kueue_workloads, b'{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadList", "items": []}'),
    (parse_query_range, b'{"status": "success", "data": {"resultType": "matrix", "result": []}}'),
    (parse_dcgm_text, b"# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization.\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"),
    (parse_node_exporter_text, b"# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\n"),
], ids=["squeue", "kueue", "prometheus", "dcgm_text", "node_exporter"])
def test_an_empty_list_or_a_scrape_without_samples_is_a_quiet_answer(parse, data):
    parsed = parse(data, "answer")
    assert parsed.empty_answer and parsed.records_read == 0


@pytest.mark.parametrize("parse, data", [
    (parse_sacct_parsable2, b"<html><body>proxy login</body></html>\n"),
    (parse_sacct_parsable2, b"JobID|State\n"),  # a header that lacks Submit, Start, End: not sacct's answer
    (parse_sacct_json, json.dumps({"errors": [{"error_number": 9000, "description": "Unable to parse time"}],
                                   "jobs": []}).encode()),
    (parse_sacct_json, b'{"meta": {}}'),
    (parse_sacct_json, b"not json"),
    (parse_sacctmgr_transactions, b"Nothing|Here\n"),
    (parse_squeue_job_gpus, b'{"jobs": "none"}'),
    (parse_kueue_workloads, b'{"kind": "WorkloadList"}'),
    (parse_query_range, b'{"status": "error", "errorType": "bad_data", "error": "parse error"}'),
    (parse_dcgm_text, b"<html>login</html>\n"),
    (parse_node_exporter_text, b"<html>login</html>\n"),
], ids=["sacct-html", "sacct-bad-header", "sacct-json-error", "sacct-json-no-jobs-key", "sacct-json-garbage",
        "sacctmgr-garbage", "squeue-jobs-not-a-list", "kueue-no-items", "prometheus-error", "dcgm-html",
        "node-exporter-html"])
def test_unreadable_or_failed_answers_are_not_quiet(parse, data):
    assert not parse(data, "answer").empty_answer


def land_file(wh: Warehouse, source: str, name: str, data: bytes) -> None:
    folder = landing_folder(wh, source, DAY)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


@pytest.mark.parametrize("source, name, sample", [
    ("slurm_sacct", "sacct.txt", SACCT_TEXT), ("slurm_sacct_json", "sacct.json", SACCT_JSON),
])
def test_a_quiet_slurm_day_passes_the_blocking_check(warehouse, real_data, source, name, sample):
    land_file(warehouse, source, name, slurm_sample(real_data, sample))
    report = ingest_partition(warehouse, source, DAY)
    assert (report.files_read, report.files_empty, report.records_loaded) == (1, 1, 0)
    assert day_problems(report) == []


def test_a_non_empty_file_nothing_could_be_read_from_still_fails_the_blocking_check(warehouse):
    land_file(warehouse, "slurm_sacct", "sacct.txt", b"JobID|State\n")
    report = ingest_partition(warehouse, "slurm_sacct", DAY)
    assert day_problems(report) == [f"{DAY}: 1 non-empty file(s) but no record loaded"]
