"""Parse `squeue --json` (running jobs with the GPU indices of each node) into raw.job_gpus rows.

Source `slurm_squeue`: `pipelines.connectors.slurm.snapshot_running_jobs` lands the command's output
as landing/slurm_squeue/<day>/squeue-<HHMMSS>.json; this module only reads it. squeue's
`gres_detail` gives each node's GPU indices (`gpu:a100:2(IDX:0-1)`), which sacct does not: with
them a job's rows carry `gpu` and join DCGM telemetry by host and index. squeue's JSON changes by
version: numbers are plain (22.05) or {set, infinite, number} (23.02+), `job_state` a string or a
list of base state then flags.
"""
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping

import polars as pl

from pipelines.contracts import contract
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import (
    Columns,
    DocumentError,
    RecordError,
    Rejects,
    compact_json,
    decode_document,
    json_type,
    load_json_document,
)
from pipelines.sources.slurm_sacct import canonical_gpu_model, expand_hostlist

SOURCE = "slurm_squeue"
MAX_NODE_GPUS = 1024  # GPU (or MIG device) count and index range of one node's gres: more is not a node
_GRES = re.compile(r"(?P<name>[^:(,]+)(?::(?P<first>[^:(,]+))?(?::(?P<second>[^:(,]+))?\(IDX:(?P<idx>[^)]*)\)")


def gres_gpu_indices(entry: str) -> tuple[str | None, int, list[int]] | None:
    """One node's `gres_detail` entry → (gres type, GPU count, GPU indices); None without GPUs.

    `gpu:2(IDX:0-1)` → (None, 2, [0, 1]); `gpu:a100:3(IDX:0,2-3)` → ("a100", 3, [0, 2, 3]);
    `gpu:1(IDX:N/A)` → (None, 1, []). Other gres on the node (`nic:1(IDX:0)`) are skipped.
    """
    gpu_items = [m for m in _GRES.finditer(entry) if m.group("name").strip() == "gpu"]
    if not gpu_items:
        if re.match(r"\s*gpu\b", entry):
            raise RecordError(f"gres_detail {entry!r} is not gpu[:type][:count](IDX:...)")
        return None
    gres_type, count, indices = None, 0, []
    for item in gpu_items:
        first, second = item.group("first"), item.group("second")
        if second is not None:
            item_type, item_count = first, second
        elif first is not None and first.isascii() and first.isdigit():  # isdigit alone accepts '²'
            item_type, item_count = None, first
        else:
            item_type, item_count = first, None
        if item_count is not None and not (item_count.isascii() and item_count.isdigit()):
            raise RecordError(f"gres_detail {entry!r}: count {item_count!r} is not an integer")
        if item_count is not None and int(item_count) > MAX_NODE_GPUS:
            raise RecordError(f"gres_detail {entry!r}: count {item_count} is more than a node holds")
        item_indices = _index_list(item.group("idx"), entry)
        gres_type = gres_type or item_type
        count += int(item_count) if item_count is not None else len(item_indices)
        indices.extend(item_indices)
    return gres_type, count, indices


def _index_list(text: str, entry: str) -> list[int]:
    if text in ("N/A", ""):
        return []
    out = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not part.isascii() or not low.isdigit() or (high and (not high.isdigit() or int(high) < int(low))):
            raise RecordError(f"gres_detail {entry!r}: bad index range {part!r}")
        if int(high or low) >= MAX_NODE_GPUS:
            raise RecordError(f"gres_detail {entry!r}: index range {part!r} goes past what a node holds")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def slurm_number(value: object, name: str) -> int | None:
    """A squeue number: plain (22.05) or {set, infinite, number} (23.02+); unset → None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping) and "number" in value:
        if value.get("infinite") or value.get("set") is False:
            return None
        if isinstance(value["number"], int):
            return value["number"]
    raise RecordError(f"field '{name}' is {json_type(value)} {compact_json(value)[:60]}, expected integer")


def job_state(job: Mapping[str, object]) -> str:
    """squeue's job_state: a string (22.05) or a list of base state then flags (23.02+)."""
    state = job.get("job_state")
    if isinstance(state, list) and state and all(isinstance(s, str) for s in state):
        return state[0]
    if isinstance(state, str) and state:
        return state
    raise RecordError(f"field 'job_state' is {json_type(state)}, expected a state")


def job_id_text(job: Mapping[str, object]) -> str:
    """The job id as sacct shows it: `123`, or `123_4` for an array task."""
    job_id = slurm_number(job.get("job_id"), "job_id")
    if job_id is None:
        raise RecordError("field 'job_id' is missing")
    array_job = slurm_number(job.get("array_job_id"), "array_job_id")
    task = slurm_number(job.get("array_task_id"), "array_task_id")
    return f"{array_job}_{task}" if array_job and task is not None else str(job_id)


def squeue_jobs(data: bytes | str) -> list:
    """The `jobs` list of a `squeue --json` document (the ingest's and the live tick's reading);
    DocumentError for a syntax error, RecordError for JSON that is not squeue's."""
    doc = load_json_document(decode_document(data))
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise RecordError("document is not squeue --json output: expected an object with a 'jobs' list")
    return doc["jobs"]


_PLACEMENT_SCHEMA = pl.Schema({
    "job_id": pl.String, "attempt": pl.Int32, "host": pl.String, "gpu": pl.Int32,
    "gpu_instance_profile": pl.String, "gpu_model": pl.String, "fraction": pl.Float64,
    "assigned_at": pl.Datetime("us"),
})


def job_placements(job: Mapping[str, object]) -> tuple[list[dict], int]:
    """One running job's GPU rows (job_id, attempt, assigned_at = the attempt's start, host, gpu,
    gpu_instance_profile, gpu_model, fraction), and how many of them are MIG-typed (no GPU index).
    RecordError when the job's fields cannot be read. The ingest's raw.job_gpus rows and the live
    governance reader (pipelines/governance/running.py) both come from here."""
    job_id = job_id_text(job)
    start = slurm_number(job.get("start_time"), "start_time")
    if not start:
        raise RecordError(f"job {job_id} is RUNNING without a start_time")
    attempt = (slurm_number(job.get("restart_cnt"), "restart_cnt") or 0) + 1
    if not 1 <= attempt <= 2**31 - 1:
        raise RecordError(f"job {job_id}: restart_cnt {attempt - 1} out of range")
    try:
        started = dt.datetime.fromtimestamp(start, dt.UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError) as error:
        raise RecordError(f"job {job_id}: start_time {start} out of range for a time: {error}") from error
    nodes = job.get("nodes")
    hosts = expand_hostlist(nodes) if isinstance(nodes, str) else []
    detail = job.get("gres_detail") or []
    if not isinstance(detail, list) or not all(isinstance(d, str) for d in detail):
        raise RecordError(f"field 'gres_detail' is {json_type(detail)}, expected a list of strings")
    if detail and len(detail) != len(hosts):
        raise RecordError(f"job {job_id}: {len(detail)} gres_detail entries for {len(hosts)} nodes {nodes!r}")
    base = {"job_id": job_id, "attempt": attempt, "assigned_at": started}
    rows, unindexed = [], 0
    for host, entry in zip(hosts, detail, strict=False):
        gpus = gres_gpu_indices(entry)
        if gpus is None:
            continue
        gres_type, count, indices = gpus
        model, profile = canonical_gpu_model(gres_type) if gres_type else (None, None)
        if profile:  # IDX counts MIG devices, not GPUs
            unindexed += count
            fraction = min(int(profile.split("g.", 1)[0]) / 7, 1.0)
            rows.extend({**base, "host": host, "gpu": None, "gpu_instance_profile": profile, "gpu_model": model,
                         "fraction": fraction} for _ in range(count))
        else:
            rows.extend({**base, "host": host, "gpu": index, "gpu_instance_profile": None, "gpu_model": model,
                         "fraction": 1.0} for index in indices)
    return rows, unindexed


def parse_squeue_job_gpus(data: bytes | str, source_file: str) -> ParseResult:
    """`squeue --json` → raw.job_gpus rows with GPU indices for the RUNNING jobs.

    A record is one running job (jobs in other states are no placement: counted in `notes`);
    attempt = restart_cnt + 1, which is how sacct --duplicates numbers the job's rows;
    assigned_at = the attempt's start_time. A job whose fields cannot be read is quarantined with
    its 1-based index in `jobs`.
    """
    rejects, rows, notes = Rejects(), Columns(_PLACEMENT_SCHEMA), []
    try:
        jobs = squeue_jobs(data)
    except RecordError as error:
        raw = data[:2000] if isinstance(data, str) else data[:2000].decode("utf-8", "replace")
        syntax = isinstance(error, DocumentError)
        rejects.add(error.line_number if syntax else None, str(error), raw, "parse" if syntax else "validate")
        return _placement_result(rows, rejects, 1, 0, notes, source_file)
    read = loaded = not_running = unindexed = 0
    for index, job in enumerate(jobs, start=1):
        try:
            if not isinstance(job, dict):
                raise RecordError(f"job is {json_type(job)}, expected a JSON object")
            running = job_state(job) == "RUNNING"
        except RecordError as error:
            read += 1
            rejects.add(index, f"jobs[{index - 1}]: {error}", compact_json(job)[:2000])
            continue
        if not running:
            not_running += 1
            continue
        read += 1
        try:
            job_rows, job_unindexed = job_placements(job)
        except RecordError as error:
            rejects.add(index, f"jobs[{index - 1}]: {error}", compact_json(job)[:2000])
            continue
        for row in job_rows:
            rows.append(**row)
        unindexed += job_unindexed
        loaded += 1
    if not_running:
        notes.append(f"{not_running} jobs not running: no placement")
    if unindexed:
        notes.append(f"{unindexed} MIG-typed GPUs have no GPU index (their gres IDX counts MIG devices)")
    # squeue's answer with no running job (none queued, or all pending): well-formed, nothing placed
    return _placement_result(rows, rejects, read, loaded, notes, source_file, empty_answer=read == 0)


def _placement_result(rows: Columns, rejects: Rejects, read: int, loaded: int, notes: list[str],
                      source_file: str, *, empty_answer: bool = False) -> ParseResult:
    frame = rows.frame().with_columns(source=pl.lit("slurm"), source_file=pl.lit(source_file))
    return ParseResult(
        tables={"job_gpus": contract("job_gpus").conform(frame)},
        quarantine=rejects.frame(SOURCE, source_file),
        records_read=read,
        records_loaded=loaded,
        notes=notes,
        empty_answer=empty_answer,
    )
