"""`gpupool reclaim --dry-run`: every running job of the engines gpupool.yml names, with its idle
evidence and what each live policy would do to it now, touching nothing.

It reads what the tick reads (each engine's running work, the telemetry of the lookback: the scrape
rounds or Prometheus, as `governance.telemetry` says) and evaluates the same live kinds with the
same catalog, then asks the planner what it would decide now, with the outbox as history when there
is one (a step already taken is not announced again; one waiting for its delay says when it falls
due). Telemetry that cannot be read lists the jobs and judges none, as the tick then plans nothing. Unlike the tick it pulls no log from the allocator,
records no decision, sends no action and no reminder: no engine is called but to list its jobs.
"""
from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipelines.governance.live import SAMPLE_SCHEMA
from pipelines.governance.live import gpu_minutes as gpu_minutes_of
from pipelines.governance.outbox import Outbox
from pipelines.governance.running import RunningWorkReader
from pipelines.governance.telemetry import ScrapeRounds, Telemetry
from pipelines.governance.tick import TickReport, plan_live, read_telemetry, read_work, work_inputs
from pipelines.policies.catalog import PolicyCatalog, default_lookback
from pipelines.policies.evaluate import evaluate
from pipelines.policies.model import LIVE_KINDS
from pipelines.policies.planner import next_steps

JOB_KEY = ("source", "job_id", "attempt")
JOB_SCHEMA = {
    "source": pl.String, "job_id": pl.String, "attempt": pl.Int64, "user_name": pl.String, "tenant": pl.String,
    "queue": pl.String, "template": pl.String, "gpus": pl.Int64, "slots": pl.String,
    "minutes_reported": pl.Int64, "mean_activity": pl.Float64, "peak_fb_used_mib": pl.Float64,
    "findings": pl.String, "now": pl.String, "next": pl.String,
}


@dataclass(frozen=True)
class DryRun:
    """What a dry run saw: one row per running job (JOB_SCHEMA), and the engines' read report
    (errors, skipped jobs) as the tick would give it."""

    at: dt.datetime
    lookback: dt.timedelta
    jobs: pl.DataFrame
    read: TickReport


def dry_run(now: dt.datetime, *, landing: Path, catalog: PolicyCatalog, readers: Sequence[RunningWorkReader],
            outbox_path: Path | None, lookback: dt.timedelta | None = None,
            telemetry: Telemetry | None = None) -> DryRun:
    """Evaluate the live policies over the running work of `readers` at `now` and plan, without
    recording, what each would do (see the module docstring). `outbox_path`: the tick's outbox, read as
    history when it exists (None or absent: no step was ever taken); `telemetry`: the tick's (default:
    the scrape rounds in `landing`)."""
    lookback = lookback or default_lookback(catalog)
    report = TickReport(at=now)
    read = read_work(readers, report)
    listed = read
    gpu_minutes = read_telemetry(telemetry or ScrapeRounds(landing), now, lookback, report) if read else None
    if gpu_minutes is None:  # telemetry unreadable: the jobs are listed and nothing is judged, as the tick plans nothing
        gpu_minutes, read = gpu_minutes_of(pl.DataFrame(schema=SAMPLE_SCHEMA)), []
    inputs = work_inputs(landing, listed, now, lookback, gpu_minutes)
    findings = evaluate(inputs, catalog, now, kinds=LIVE_KINDS) if read else report.findings
    with _history(outbox_path, landing) as outbox:
        planned = plan_live(findings, catalog, outbox, read, now) if read else []
        pending = next_steps(findings, catalog, outbox, now)
    return DryRun(now, lookback, job_rows(inputs.allocations, inputs.minutes, findings, planned, pending), report)


@contextmanager
def _history(path: Path | None, landing: Path) -> Iterator[Outbox]:
    """The outbox at `path` when it exists; else an empty one in a temporary folder (the tick's place
    is left as it was)."""
    if path is not None and Path(path).exists():
        with closing(Outbox(Path(path), landing, writer="dry-run")) as outbox:
            yield outbox
        return
    with tempfile.TemporaryDirectory(prefix="gpupool-dry-run-") as folder, \
            closing(Outbox(Path(folder) / "outbox.db", Path(folder), writer="dry-run", durable=False)) as outbox:
        yield outbox


def job_rows(allocations: pl.DataFrame, minutes: pl.DataFrame, findings: pl.DataFrame, planned: list,
             pending: dict) -> pl.DataFrame:
    """One row per running job: who and where, its telemetry over the lookback (minutes reported, mean
    activity, peak memory), its findings (`policy: observed vs threshold`), what would be decided now
    (`now`: `action status`, with why when held back) and the step after (`next`: `action at time`)."""
    if allocations.is_empty():
        return pl.DataFrame(schema=JOB_SCHEMA)
    jobs = (allocations.group_by(JOB_KEY, maintain_order=True).agg(
        pl.col("user_name", "tenant", "queue", "template").first(), pl.len().alias("gpus"),
        (pl.col("host") + "/" + pl.col("gpu").cast(pl.String)).unique().sort().str.join(", ").alias("slots")))
    usage = (minutes.join(allocations.select("allocation_id", *JOB_KEY), on="allocation_id")
             .group_by(JOB_KEY).agg(pl.len().cast(pl.Int64).alias("minutes_reported"),
                                    pl.col("activity").mean().alias("mean_activity"),
                                    pl.col("fb_used_mib").max().cast(pl.Float64).alias("peak_fb_used_mib")))
    said = _texts(findings, planned, pending)
    return (jobs.join(usage, on=JOB_KEY, how="left").join(said, on=JOB_KEY, how="left")
            .with_columns(pl.col("minutes_reported").fill_null(0))
            .sort(JOB_KEY).select(JOB_SCHEMA.keys()).cast(JOB_SCHEMA))


def _texts(findings: pl.DataFrame, planned: list, pending: dict) -> pl.DataFrame:
    """Per job: its findings, the decisions due now and the next steps, each as `; `-joined text."""
    out: dict[tuple, dict[str, list[str]]] = {}

    def add(key: tuple, column: str, text: str) -> None:
        out.setdefault(key, {"findings": [], "now": [], "next": []})[column].append(text)

    for f in findings.iter_rows(named=True):
        add((f["source"], f["job_id"], f["attempt"]), "findings",
            f"{f['policy']}: {f['metric']} {_number(f['observed'])} vs {_number(f['threshold'])}")
    decided = set()
    for p in planned:
        decided.add((p.policy, p.engine, p.job_id, p.attempt))
        why = f" ({p.status_reason})" if p.status_reason else ""
        add((p.engine, p.job_id, p.attempt), "now", f"{p.policy}: {p.action.value} {p.status.value}{why}")
    for (policy, engine, job_id, attempt), (action, due) in sorted(pending.items(), key=str):
        if (policy, engine, job_id, attempt) in decided:
            continue  # due now: the `now` column says it
        when = "once its reminder has gone out" if due is None else f"at {due:%Y-%m-%d %H:%M} UTC"
        add((engine, job_id, attempt), "next", f"{policy}: {action.value} {when}")
    rows = [{"source": k[0], "job_id": k[1], "attempt": k[2], **{c: "; ".join(v) or None for c, v in texts.items()}}
            for k, texts in out.items()]
    schema = {c: JOB_SCHEMA[c] for c in (*JOB_KEY, "findings", "now", "next")}
    return pl.DataFrame(rows, schema=schema)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
