"""What the landing sensors share (`slurm_gpu_snapshot`, `dcgm_scrape`, `node_exporter_scrape`, and the
tag of `mlflow_pull` and `slurm_admin_audit`): the tag on their run requests, a cursor kept as JSON,
and when a day's re-ingest is due."""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Self

import dagster as dg

TRIGGER_TAG = "gpupool/trigger"  # names the sensor that requested a run
# on an intraday run: the ingest adds the day's files landed since its last run (pipelines/ingest.py
# ingest_new_files) instead of reading the day whole; a day's last run (FINAL) reads it whole
INGEST_TAG, NEW_FILES = "gpupool/ingest", "new-files"
FINAL = "final"


class JsonCursor:
    """A frozen dataclass kept as the sensor's cursor, in JSON. Unknown fields are dropped and a cursor
    that does not parse starts the counts again (one from another version)."""

    @classmethod
    def parse(cls, text: str | None) -> Self:
        try:
            fields = json.loads(text) if text else {}
            return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})
        except (json.JSONDecodeError, TypeError, AttributeError):
            return cls()

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def due_ingests(
    source: str, last_day: str | None, since_ingest: int, day: str, tick: int, progressed: bool, every: int
) -> tuple[int, list[tuple[str, str]]]:
    """After tick number `tick` (all days) on `day`: the ticks since the day's last requested ingest, and
    the (partition day, run key) ingests due. The first tick of a new day asks for a last run of the day
    before when it has ticks not ingested yet; a day's run is due after `every` ticks that `progressed`."""
    ingests: list[tuple[str, str]] = []
    since = since_ingest if last_day == day else 0
    if last_day is not None and last_day != day and since_ingest > 0:
        ingests.append((last_day, f"{source}:{last_day}:{FINAL}"))
    if progressed:
        since += 1
    if since >= every:
        ingests.append((day, f"{source}:{day}:{tick}"))
        since = 0
    return since, ingests


def ingest_result(
    ingests: list[tuple[str, str]], sensor: str, cursor: JsonCursor, skip_reason: str, new_files: bool = False
) -> dg.SensorResult:
    """The tick's answer: a run per due ingest (tagged with the sensor), else `skip_reason`; the cursor saved.
    `new_files`: each run but a day's FINAL one ingests only the files landed since the day's last (INGEST_TAG)."""
    runs = [dg.RunRequest(run_key=key, partition_key=day, tags={TRIGGER_TAG: sensor} | (
        {INGEST_TAG: NEW_FILES} if new_files and key.rsplit(":", 1)[-1] != FINAL else {})) for day, key in ingests]
    if runs:
        return dg.SensorResult(run_requests=runs, cursor=cursor.to_json())
    return dg.SensorResult(skip_reason=skip_reason, cursor=cursor.to_json())
