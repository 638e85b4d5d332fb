"""Every table's DDL and the vocabularies the parts share: the single definition.

- Raw tables: their contracts, read from models/contracts/*.yml. Parsers build frames with
  `empty_frame`/`conform`; the warehouse creates the tables from `ddl`.
- The decision log's vocabulary (`gpupool.governance/v1`): policy kinds, modes, step actions and
  decision statuses, shared by the policies, the reclaim loop and the log's parser.
- Policy findings' frame schema (FINDING_SCHEMA).
- The tables the code writes itself (ops.*, governance.*): their DDL and documentation, one
  `CodeTable` each in TABLES (add a new one with `register` at the end of this module).

`make_tables` (`all_ddl()`, once per version of the statements: SCHEMA_STAMP) is what
`Warehouse.ensure_schema` runs.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

import duckdb
import polars as pl
import yaml

from pipelines.paths import CONTRACTS_DIR

LAKE_TABLES = ("dcgm_samples", "host_samples")  # raw tables kept as Parquet, exposed by a view
LAKE_TIME_COLUMN = "sampled_at"  # every lake table's sample time (ops.lake_versions records its days)
# columns the warehouse adds to every raw table
PARTITION_COLUMNS = ",\n  partition_date DATE,\n  ingest_source VARCHAR,\n  ingested_at TIMESTAMP"

_POLARS_TYPES: dict[str, pl.DataType] = {
    "VARCHAR": pl.String(),
    "INTEGER": pl.Int32(),
    "BIGINT": pl.Int64(),
    "DOUBLE": pl.Float64(),
    "BOOLEAN": pl.Boolean(),
    "TIMESTAMP": pl.Datetime("us"),
    "DATE": pl.Date(),
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    description: str


@dataclass(frozen=True)
class Contract:
    table: str  # schema-qualified, e.g. raw.job_events
    grain: str
    description: str
    columns: tuple[Column, ...]

    @property
    def name(self) -> str:
        return self.table.split(".", 1)[1]

    @property
    def schema(self) -> pl.Schema:
        return pl.Schema({c.name: _POLARS_TYPES[c.type] for c in self.columns})

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if not c.nullable]

    def empty_frame(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.schema)

    def conform(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Select the contract's columns in order, cast to its types, adding missing nullable ones as null."""
        missing_required = [c for c in self.required if c not in frame.columns]
        if missing_required:
            raise ValueError(f"{self.table}: frame lacks required columns {missing_required}")
        exprs = [
            (pl.col(c.name) if c.name in frame.columns else pl.lit(None)).cast(_POLARS_TYPES[c.type]).alias(c.name)
            for c in self.columns
        ]
        return frame.select(exprs)

    def ddl(self, extra_columns: str = "") -> str:
        cols = ",\n  ".join(f"{c.name} {c.type}" for c in self.columns)
        return f"create table if not exists {self.table} (\n  {cols}{extra_columns}\n)"


@cache
def contracts() -> dict[str, Contract]:
    """Every contract by short table name (dcgm_samples, job_events, ...)."""
    out: dict[str, Contract] = {}
    for path in sorted(CONTRACTS_DIR.glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        contract = Contract(
            table=doc["table"],
            grain=doc["grain"],
            description=doc["description"].strip(),
            columns=tuple(Column(**c) for c in doc["columns"]),
        )
        out[contract.name] = contract
    return out


def contract(name: str) -> Contract:
    return contracts()[name]


# -- the decision log's vocabulary (gpupool.governance/v1) ----------------------------------------
# One line per decision and per answer in landing/governance_actions/<day>/<writer>.jsonl.
DECISION_SCHEMA_NAME = "gpupool.governance/v1"


class PolicyKind(StrEnum):
    IDLE_ALLOCATION = "idle_allocation"
    ZOMBIE = "zombie"
    IDLE_INTERACTIVE = "idle_interactive"
    OVERRUN = "overrun"
    OVERSIZED = "oversized"
    RETRY_STORM = "retry_storm"
    TEMPLATE_BREACH = "template_breach"
    HOST_BOUND = "host_bound"  # GPUs waiting on a saturated host: advice only (pipelines/policies/host.py)
    GPU_HEALTH = "gpu_health"  # drain a GPU or node with repeated hardware faults (pipelines/policies/health.py)


class Mode(StrEnum):
    SHADOW = "shadow"  # record what would be done; nothing reaches the engine
    ENFORCE = "enforce"


class StepAction(StrEnum):
    REMIND = "remind"
    RECLAIM = "reclaim"
    PREEMPT = "preempt"
    CAP_RUNTIME = "cap_runtime"
    RECOMMEND = "recommend"  # recorded advice (right-size); never sent to an engine
    DRAIN = "drain"  # a node or GPU takes no new work (gpu_health); its running work keeps running
    UNDRAIN = "undrain"  # the drained node or GPU takes work again once its health checks pass


class DecisionStatus(StrEnum):
    SHADOW = "shadow"  # shadow mode: recorded, not sent
    EXEMPT = "exempt"  # matched an exemption or a protected template
    RATE_LIMITED = "rate_limited"  # deferred: over the hourly reclaim limit; tried again later
    QUEUED = "queued"  # in the outbox, not yet answered
    ANSWERED = "answered"  # the engine answered (outcome says how)
    RECOMMENDED = "recommended"  # a recommend step: advice recorded
    DROPPED = "dropped"  # the finding no longer holds (job ended, busy again) before the step was due


# -- policy findings -------------------------------------------------------------------------------
# One row per finding: a job attempt caught by one policy version over one evidence window.
# gpu_health findings are about hardware, not work: job_id is the drain target ("node-07" or
# "node-07/3", GPU 3 of node-07), attempt 0, tenant/queue/template "platform", user_name null.
FINDING_SCHEMA: dict[str, pl.DataType] = {
    "finding_id": pl.String,  # finding_key(...)
    "policy": pl.String,
    "policy_version": pl.String,
    "kind": pl.String,  # PolicyKind
    "scope": pl.String,  # Rule.scope the parameters came from
    "source": pl.String,  # engine holding the work: allocator | slurm | kueue
    "job_id": pl.String,
    "attempt": pl.Int64,
    "tenant": pl.String,
    "queue": pl.String,
    "template": pl.String,
    "user_name": pl.String,
    "gpu_model": pl.String,
    "window_start_at": pl.Datetime("us"),  # evidence window, UTC naive
    "window_end_at": pl.Datetime("us"),
    "detected_at": pl.Datetime("us"),  # when the rule's threshold was crossed
    "gpus_flagged": pl.Int64,  # GPUs (allocations) the finding covers
    "gpus_held": pl.Int64,  # GPUs the attempt holds
    "gpu_hours": pl.Float64,  # wasted GPU-hours in the evidence window (x fraction)
    "metric": pl.String,  # what was measured, e.g. "activity", "runtime_s", "failed_attempts"
    "observed": pl.Float64,  # its value over the window
    "threshold": pl.Float64,  # the rule's threshold for it
    "is_ongoing": pl.Boolean,  # the attempt still runs and the condition still holds at the data's end
    "recommendation": pl.String,  # e.g. "1 x 3g.40gb instead of 8 x H100"; null when none
    "evidence": pl.String,  # JSON object of numbers: per-GPU windows, spikes ignored, ...
}

_DUCK_TYPES = {pl.String: "VARCHAR", pl.Int64: "BIGINT", pl.Float64: "DOUBLE", pl.Boolean: "BOOLEAN"}


def _duck_type(dtype: pl.DataType) -> str:
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP"
    return _DUCK_TYPES[dtype]


# -- the tables the code writes itself -------------------------------------------------------------
_DDL_COLUMN = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s+([A-Za-z]+)", re.MULTILINE)


@dataclass(frozen=True)
class CodeTable:
    """A table the code writes itself (not a source's raw table): its DDL and what it holds."""

    table: str  # schema-qualified, e.g. ops.ingest_log
    ddl: str
    grain: str
    description: str
    descriptions: dict[str, str]  # column -> description
    migrations: tuple[str, ...] = ()  # run after the DDL: columns added since the table's first version
    on_demand: bool = False  # created by its writer at first write, not by ensure_schema

    @property
    def columns(self) -> list[tuple[str, str]]:
        """(name, type) of each column, in DDL order."""
        body = self.ddl[self.ddl.index("(") + 1: self.ddl.rindex(")")]
        return [(m.group(1), m.group(2).upper()) for m in _DDL_COLUMN.finditer(body)]


TABLES: dict[str, CodeTable] = {}  # by table, in registration order


def register(table: CodeTable) -> CodeTable:
    TABLES[table.table] = table
    return table


def all_ddl() -> list[str]:
    """The statements that create every table the warehouse holds up front: raw contracts (but the
    lake's), then the code's tables with their migrations."""
    out = [c.ddl(PARTITION_COLUMNS) for name, c in contracts().items() if name not in LAKE_TABLES]
    for t in TABLES.values():
        if not t.on_demand:
            out += [t.ddl, *t.migrations]
    return out


SCHEMA_STAMP = "ops.schema_stamp"  # the digest of the statements that made a file's schemas and tables


def make_tables(con: duckdb.DuckDBPyConnection, schemas: Sequence[str]) -> None:
    """Run the statements that make `schemas` and every table (all_ddl), in `con`'s transaction, unless
    the file's SCHEMA_STAMP says these very statements made it: every writer connection asks, and an
    ingest opens several a day. A change of any table or migration changes the digest; a file made
    before the stamp has none."""
    digest = schema_digest(tuple(schemas))
    schema, name = SCHEMA_STAMP.split(".")
    stamped = con.execute("select count(*) from duckdb_tables() where schema_name = ? and table_name = ?",
                          [schema, name]).fetchone()[0]
    if stamped and con.execute(f"select digest from {SCHEMA_STAMP}").fetchone() == (digest,):
        return
    for each in schemas:
        con.execute(f"create schema if not exists {each}")
    for statement in all_ddl():
        con.execute(statement)
    con.execute(f"create or replace table {SCHEMA_STAMP} (digest varchar not null)")
    con.execute(f"insert into {SCHEMA_STAMP} values (?)", [digest])


@cache
def schema_digest(schemas: tuple[str, ...]) -> str:
    """A digest of every statement make_tables runs."""
    return hashlib.sha256("\n".join([*schemas, *all_ddl()]).encode()).hexdigest()


# Written by Warehouse.replace_partition.
INGEST_LOG_DDL = """
create table if not exists ops.ingest_log (
  run_id VARCHAR,
  ingest_source VARCHAR,
  partition_date DATE,
  files_read INTEGER,
  records_read BIGINT,
  records_loaded BIGINT,
  records_quarantined BIGINT,
  rows_by_table VARCHAR,
  started_at TIMESTAMP,
  finished_at TIMESTAMP,
  notes VARCHAR
)"""
INGEST_LOG_COLUMNS = ("run_id", "ingest_source", "partition_date", "files_read", "records_read", "records_loaded",
                      "records_quarantined", "rows_by_table", "started_at", "finished_at", "notes")
register(CodeTable(
    "ops.ingest_log", INGEST_LOG_DDL, grain="one row per ingest run of a source for a day",
    description="Every ingest: files and records read, loaded and quarantined (read = loaded + quarantined).",
    descriptions={
        "run_id": "ingest run id", "ingest_source": "ingest source", "partition_date": "UTC day ingested",
        "files_read": "files read", "records_read": "input records read", "records_loaded": "records loaded",
        "records_quarantined": "input records quarantined (ops.quarantine)",
        "rows_by_table": "JSON object: rows written per raw table", "started_at": "run start, UTC",
        "finished_at": "run end, UTC",
        "notes": "JSON array: what the parsers noted, each as 'file: note' (e.g. 'empty file', "
                 "'19 step rows ignored'); null when none",
    },
    # Warehouses made before the notes column get it on their next write.
    migrations=("alter table ops.ingest_log add column if not exists notes VARCHAR",),
))

# Written by Warehouse.replace_partition and append_partition: what the intraday ingest has loaded of a day so far.
INGEST_STATE_DDL = """
create table if not exists ops.ingest_state (
  ingest_source VARCHAR,
  partition_date DATE,
  run_id VARCHAR,
  state VARCHAR
)"""
register(CodeTable(
    "ops.ingest_state", INGEST_STATE_DDL,
    grain="one row per (ingest source, day) loaded a file at a time by the intraday ingest; deleted when the day "
          "is ingested whole",
    description="What an intraday ingest (pipelines/ingest.py ingest_new_files) has loaded of a day: the files by "
                "size and modification time, and the day's totals, so the next one reads only newer files.",
    descriptions={
        "ingest_source": "ingest source", "partition_date": "UTC day",
        "run_id": "the ops.ingest_log run that wrote this state",
        "state": "JSON object: files (name -> [bytes, mtime_ns]), the day's counts, notes, validation and tenants",
    },
))

# Written by Warehouse.refresh_lake_views: the Delta version each lake view reads (a publish records it).
register(CodeTable(
    "ops.lake_versions",
    """
create table if not exists ops.lake_versions (
  table_name VARCHAR PRIMARY KEY,
  version BIGINT,
  location VARCHAR,
  first_day DATE,
  last_day DATE
)""",
    grain="one row per lake (Delta) table",
    description="The Delta version each lake view (raw.dcgm_samples) reads in this file; a release records these.",
    descriptions={"table_name": "lake table, schema.table", "version": "Delta version the view reads (null: no table yet)",
                  "location": "the Delta table's folder when the view was written (a moved home re-points it)",
                  "first_day": "first UTC day of the version's sample times, from its files' Delta statistics "
                               "(null: no rows, or a file without statistics)",
                  "last_day": "last UTC day of the version's sample times, from its files' Delta statistics "
                              "(null: no rows, or a file without statistics)"},
    # Warehouses made before the days were recorded get the columns on their next write (and the
    # days when each view is next written).
    migrations=("alter table ops.lake_versions add column if not exists first_day DATE",
                "alter table ops.lake_versions add column if not exists last_day DATE"),
))

# Written by Warehouse.record_check.
CHECK_RESULTS_DDL = """
create table if not exists ops.check_results (
  check_name VARCHAR,
  asset VARCHAR,
  partition_date DATE,
  passed BOOLEAN,
  severity VARCHAR,
  unexpected_count BIGINT,
  metadata_json VARCHAR,
  checked_at TIMESTAMP
)"""
register(CodeTable(
    "ops.check_results", CHECK_RESULTS_DDL, grain="one row per check per asset per day (the latest result)",
    description="Asset checks (Great Expectations suites, SQL checks) as last run.",
    descriptions={
        "check_name": "check", "asset": "asset checked", "partition_date": "UTC day checked (null: not partitioned)",
        "passed": "whether it passed", "severity": "ERROR | WARN", "unexpected_count": "rows that failed",
        "metadata_json": "JSON: the check's metadata (examples, counts)", "checked_at": "when it ran, UTC",
    },
))

# Written by pipelines/capacity/store.py (one month replaced per run); read by metrics.capacity_recommendations.
RECOMMENDATIONS_TABLE = "governance.capacity_recommendations"
RECOMMENDATIONS_DDL = f"""create table if not exists {RECOMMENDATIONS_TABLE} (
  recommendation_id VARCHAR,
  period_month DATE,
  recommended_at TIMESTAMP,
  rank INTEGER,
  kind VARCHAR,
  gpu_model VARCHAR,
  tenant VARCHAR,
  queue VARCHAR,
  target VARCHAR,
  recommendation VARCHAR,
  recommendation_zh VARCHAR,
  quantity DOUBLE,
  unit VARCHAR,
  wait_cause VARCHAR,
  confidence VARCHAR,
  confidence_score DOUBLE,
  impact_gpu_hours DOUBLE,
  evidence_json VARCHAR,
  whatif_json VARCHAR,
  rules_version VARCHAR,
  release_id BIGINT
)"""
register(CodeTable(
    RECOMMENDATIONS_TABLE, RECOMMENDATIONS_DDL, grain="one row per recommendation per month",
    description="Capacity recommendations of each month with their evidence (`gpupool recommend`).",
    descriptions={
        "recommendation_id": "recommendation id", "period_month": "first day of the month advised on",
        "recommended_at": "when it was made, UTC", "rank": "rank in the month (1 = most impact)",
        "kind": "rule kind (add capacity, move quota, rightsize, ...)", "gpu_model": "GPU model concerned",
        "tenant": "tenant concerned", "queue": "queue concerned", "target": "what the change applies to",
        "recommendation": "the advice, English", "recommendation_zh": "the advice, Chinese",
        "quantity": "how much to change", "unit": "unit of quantity", "wait_cause": "wait cause it answers",
        "confidence": "low | medium | high", "confidence_score": "confidence, 0..1",
        "impact_gpu_hours": "GPU-hours of waiting or idling it addresses",
        "evidence_json": "JSON: the metric values behind it", "whatif_json": "JSON: what-if replay result, if run",
        "rules_version": "version of models/capacity/rules.yml used",
        "release_id": "warehouse release the advice was computed from (pinned; `gpupool releases`)",
    },
    # Tables made before releases get the column on their next write (null: release not recorded).
    migrations=(f"alter table {RECOMMENDATIONS_TABLE} add column if not exists release_id BIGINT",),
))

# A scrape round's gaps as a frame: ops.scrape_gaps' columns, as the scraper builds them.
GAPS_SCHEMA = pl.Schema({
    "target": pl.String, "round_at": pl.Datetime("us"), "round_id": pl.String, "error_kind": pl.String,
    "error": pl.String, "duration_s": pl.Float64, "attempts": pl.Int32,
})

# Appended by ingest.record_scrape_gaps after each scrape round (one row per failed scrape of a target);
# read by metrics.scrape_gaps.
SCRAPE_GAPS_DDL = """
create table if not exists ops.scrape_gaps (
  target VARCHAR,
  round_at TIMESTAMP,
  round_id VARCHAR,
  error_kind VARCHAR,
  error VARCHAR,
  duration_s DOUBLE,
  attempts INTEGER
)"""
register(CodeTable(
    "ops.scrape_gaps", SCRAPE_GAPS_DDL, grain="one row per failed scrape of a target in a round",
    description="DCGM exporter scrapes that failed after their retries: the gaps in live telemetry.",
    descriptions={
        "target": "exporter URL", "round_at": "scrape round time, UTC", "round_id": "scrape round id",
        "error_kind": "timeout | http | connection | parse", "error": "the error, in words",
        "duration_s": "seconds spent on the target", "attempts": "attempts made",
    },
))

# Written by the daily policy_findings asset (pipelines/assets/reclaim.py), which creates it on its
# first run: FINDING_SCHEMA's columns between the day and the catalog version.
FINDINGS_TABLE = "governance.policy_findings"
FINDINGS_DDL = (
    f"create table if not exists {FINDINGS_TABLE} (\n  partition_date DATE,\n"
    + "".join(f"  {name} {_duck_type(t)},\n" for name, t in FINDING_SCHEMA.items())
    + "  catalog_version VARCHAR,\n  evaluated_at TIMESTAMP\n)"
)
register(CodeTable(
    FINDINGS_TABLE, FINDINGS_DDL, on_demand=True,
    grain="one row per finding per day (a job attempt caught by one policy version over one evidence window)",
    description="Every policy's findings, re-evaluated over the warehouse one UTC day at a time (the policy_findings asset).",
    descriptions={
        "partition_date": "UTC day evaluated", "finding_id": "deterministic finding key", "policy": "policy name",
        "policy_version": "policy version", "kind": "policy kind", "scope": "rule scope the parameters came from",
        "source": "engine holding the work: allocator | slurm | kueue", "job_id": "job id", "attempt": "attempt",
        "tenant": "tenant", "queue": "queue", "template": "job template", "user_name": "user",
        "gpu_model": "GPU model", "window_start_at": "evidence window start, UTC",
        "window_end_at": "evidence window end, UTC", "detected_at": "when the threshold was crossed, UTC",
        "gpus_flagged": "GPUs (allocations) the finding covers", "gpus_held": "GPUs the attempt holds",
        "gpu_hours": "wasted GPU-hours in the evidence window", "metric": "what was measured",
        "observed": "its value over the window", "threshold": "the rule's threshold",
        "is_ongoing": "the attempt still runs and the condition holds at the data's end",
        "recommendation": "suggested request, if any", "evidence": "JSON: the numbers behind the finding",
        "catalog_version": "policy catalog version", "evaluated_at": "when evaluated, UTC",
    },
))

# Replaced by every model build (pipelines/build_checks.py load_exemptions) from the policy catalog's
# exemptions file; read by the dashboards' Idle page. Expiry is read against the clock there.
EXEMPTIONS_TABLE = "governance.policy_exemptions"
EXEMPTIONS_CHECK = "policy_exemptions_valid"  # its load's outcome in ops.check_results
EXEMPTIONS_DDL = f"""
create table if not exists {EXEMPTIONS_TABLE} (
  tenant VARCHAR,
  policy VARCHAR,
  queue VARCHAR,
  job_id VARCHAR,
  reason VARCHAR,
  granted_by VARCHAR,
  expires_at TIMESTAMP,
  loaded_at TIMESTAMP
)"""
register(CodeTable(
    EXEMPTIONS_TABLE, EXEMPTIONS_DDL, grain="one row per exemption (allow-list entry) of the file last loaded",
    description="The governance exemptions (models/policies/exemptions.yml or gpupool.yml's governance.exemptions) "
                "as the last model build loaded them; an invalid file keeps the rows loaded before.",
    descriptions={
        "tenant": "tenant exempted", "policy": "policy exempted from (null: every policy)",
        "queue": "queue exempted (null: every queue)", "job_id": "job exempted (null: every job)",
        "reason": "why", "granted_by": "who granted it", "expires_at": "when it expires, UTC",
        "loaded_at": "when the build loaded it, UTC",
    },
))

# Appended by pipelines/pack/store.py, one row per pack built; read by the dashboards' Review packs page.
REVIEW_PACKS_TABLE = "ops.review_packs"
REVIEW_PACKS_DDL = f"""
create table if not exists {REVIEW_PACKS_TABLE} (
  month DATE,
  version VARCHAR,
  lang VARCHAR,
  catalog_version VARCHAR,
  built_at TIMESTAMP,
  html_path VARCHAR,
  pdf_path VARCHAR,
  build_seconds DOUBLE,
  release_id BIGINT,
  tenant VARCHAR
)"""
register(CodeTable(
    REVIEW_PACKS_TABLE, REVIEW_PACKS_DDL, grain="one row per review pack built",
    description="The monthly review packs built (`gpupool pack`, the review_pack asset), kept under "
                "<home>/packs/YYYY-MM/<version>/.",
    descriptions={
        "month": "first day of the month the pack reports on", "version": "the pack's version folder",
        "lang": "language: en | zh", "catalog_version": "metric catalog version of its numbers",
        "built_at": "when it was built, UTC", "html_path": "its HTML, relative to the gpupool home",
        "pdf_path": "its PDF, relative to the gpupool home", "build_seconds": "seconds the build took",
        "release_id": "warehouse release its figures were read from (pinned; `gpupool pack --as-of` rebuilds it)",
        "tenant": "the tenant of a tenant pack (its team lead's); null for the pool's pack",
    },
    # Tables made before releases (tenant packs) get the column on their next write (null: release not
    # recorded; the pool's pack).
    migrations=(f"alter table {REVIEW_PACKS_TABLE} add column if not exists release_id BIGINT",
                f"alter table {REVIEW_PACKS_TABLE} add column if not exists tenant VARCHAR"),
))

# Appended by pipelines/pack/deliver.py, one row per review pack emailed to one recipient: what a
# retried delivery skips.
PACK_DELIVERIES_TABLE = "ops.pack_deliveries"
PACK_DELIVERIES_DDL = f"""
create table if not exists {PACK_DELIVERIES_TABLE} (
  month DATE,
  tenant VARCHAR,
  lang VARCHAR,
  version VARCHAR,
  recipient VARCHAR,
  sent_at TIMESTAMP,
  message_id VARCHAR
)"""
register(CodeTable(
    PACK_DELIVERIES_TABLE, PACK_DELIVERIES_DDL, grain="one row per review pack emailed to one recipient",
    description="The review packs emailed by the review_pack asset (the pack_delivery section of gpupool.yml): "
                "a recipient gets a month's pack in a language once, however often the run is retried.",
    descriptions={
        "month": "first day of the month the pack reports on",
        "tenant": "the tenant of a tenant pack; null for the pool's pack", "lang": "language: en | zh",
        "version": "the pack's version folder that was sent (ops.review_packs.version)",
        "recipient": "the address it was sent to", "sent_at": "when the SMTP server accepted it, UTC",
        "message_id": "the message's Message-ID header",
    },
))
