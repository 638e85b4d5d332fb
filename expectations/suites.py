"""One Great Expectations suite per raw table, built in code from the contracts and the domain rules.

A table's rules are plain data (`Rule`, `rules`), read two ways: as the GX suite (`build_suite`) that
names failing rows, reasons and examples, and as Polars expressions (expectations/screen.py) that say
whether a frame passes without importing GX, which takes three seconds. Every expectation carries
`meta["reason"]`: the plain-English sentence quarantine rows and check metadata show when it fails.
Column map expectations skip nulls, so a range or set rule on a nullable column reads "when present";
the contract's non-nullable columns get a not-null rule each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from allocator.model import TEMPLATES
from pipelines.contracts import contract
from pipelines.sources.node_exporter import KEPT_METRICS

if TYPE_CHECKING:
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

SUITE_TABLES: tuple[str, ...] = (
    "dcgm_samples",
    "job_events",
    "job_gpus",
    "audit_events",
    "gpu_inventory",
    "queue_quotas",
    "governance_actions",
    "host_samples",
    "artifact_events",
)

# DCGM profiling metrics exported as a ratio of time or cycles (0..1).
RATIO_METRICS: tuple[str, ...] = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "DCGM_FI_PROF_PIPE_INT_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
)
# Device utilisation counters exported in percent (0..100).
PERCENT_METRICS: tuple[str, ...] = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL")
# Amounts that cannot be negative: framebuffer MiB and power in watts.
NON_NEGATIVE_METRICS: tuple[str, ...] = (
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
)

EVENT_TYPES: tuple[str, ...] = ("submit", "admit", "start", "requeue", "preempt", "finish")
SHARE_MODES: tuple[str, ...] = ("whole", "mig", "timeslice")
K8S_AUDIT_STAGES: tuple[str, ...] = ("RequestReceived", "ResponseStarted", "ResponseComplete", "Panic")
SOURCES: dict[str, tuple[str, ...]] = {
    "dcgm_samples": ("dcgm_text", "prometheus", "dcgm_parquet"),
    "job_events": ("allocator", "slurm", "kueue"),
    "job_gpus": ("allocator", "slurm", "kueue"),
    "audit_events": ("allocator", "k8s", "slurm", "kueue"),
    "gpu_inventory": ("allocator", "slurm", "k8s"),
    "queue_quotas": ("allocator", "slurm", "kueue"),
    "host_samples": ("node_exporter", "node_exporter_parquet"),
    "artifact_events": ("allocator", "mlflow"),
}
ARTIFACT_KINDS: tuple[str, ...] = ("checkpoint", "artifact", "model_version")
ARTIFACT_STATUSES: tuple[str, ...] = ("ok", "failed")


# The expectation types the rules use, by GX's names (a result's `expectation_config.type`).
NOT_NULL = "expect_column_values_to_not_be_null"
BETWEEN = "expect_column_values_to_be_between"
IN_SET = "expect_column_values_to_be_in_set"
UNIQUE = "expect_column_values_to_be_unique"


@dataclass(frozen=True)
class Rule:
    """One expectation on one column of a raw table, with the reason a failing row is quarantined for."""

    kind: str  # NOT_NULL, BETWEEN, IN_SET or UNIQUE
    column: str
    reason: str
    min_value: float | None = None  # BETWEEN: at least (above, with strict_min)
    max_value: float | None = None  # BETWEEN: at most (below, with strict_max)
    strict_min: bool = False
    strict_max: bool = False
    value_set: tuple[str, ...] = ()  # IN_SET
    where: tuple[str, tuple[str, ...]] | None = None  # only the rows whose column's value is in the list


def reason_of(expectation: gxe.Expectation | ExpectationConfiguration) -> str:
    """The plain-English reason an expectation (or its configuration in a result) states; else its type."""
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    meta = expectation.meta or {}
    kind = (
        expectation.type
        if isinstance(expectation, ExpectationConfiguration)
        else expectation.expectation_type
    )
    return str(meta.get("reason") or expectation.description or kind)


def _not_null(column: str) -> Rule:
    return Rule(NOT_NULL, column, f"{column} is required but missing")


def _in_set(column: str, values: tuple[str, ...], reason: str | None = None) -> Rule:
    return Rule(IN_SET, column, reason or f"{column} is not one of {', '.join(values)}", value_set=tuple(values))


def _between(column: str, reason: str, where: tuple[str, tuple[str, ...]] | None = None, **bounds) -> Rule:
    return Rule(BETWEEN, column, reason, where=where, **bounds)


def _dcgm_rules() -> list[Rule]:
    return [
        _between("gpu", "gpu index is negative", min_value=0),
        _between("gpu_instance_id", "MIG instance id is negative", min_value=0),
        _in_set("source", SOURCES["dcgm_samples"]),
        _between("value", "activity ratio outside 0..1", min_value=0, max_value=1, where=("metric", RATIO_METRICS)),
        _between("value", "utilisation percent outside 0..100", min_value=0, max_value=100,
                 where=("metric", PERCENT_METRICS)),
        _between("value", "framebuffer or power value is negative", min_value=0, where=("metric", NON_NEGATIVE_METRICS)),
    ]


def _host_rules() -> list[Rule]:
    # Every kept metric is a byte count, seconds, a load average or a clock: none is negative.
    return [
        _in_set("source", SOURCES["host_samples"]),
        _in_set("metric", KEPT_METRICS, "metric is not one raw.host_samples keeps"),
        _between("value", "host metric value is negative", min_value=0),
    ]


def _job_events_rules() -> list[Rule]:
    return [
        _in_set(
            "event_type",
            EVENT_TYPES,
            "unknown event_type (not submit, admit, start, requeue, preempt, finish)",
        ),
        _between("attempt", "attempt is below 1 (attempts are 1-based)", min_value=1),
        _in_set("template", TEMPLATES, "unknown template (not training, inference, experiment, interactive)"),
        _in_set("share_mode", SHARE_MODES),
        _between("gpus_requested", "gpus_requested is negative", min_value=0),
        _in_set("source", SOURCES["job_events"]),
        Rule(UNIQUE, "event_id", "event_id appears more than once in the batch"),
    ]


def _job_gpus_rules() -> list[Rule]:
    return [
        _between("fraction", "fraction of a GPU outside (0, 1]", min_value=0, max_value=1, strict_min=True),
        _between("attempt", "attempt is below 1 (attempts are 1-based)", min_value=1),
        _between("gpu", "gpu index is negative", min_value=0),
        _between("gpu_instance_id", "MIG instance or replica id is negative", min_value=0),
        _in_set("source", SOURCES["job_gpus"]),
    ]


def _audit_events_rules() -> list[Rule]:
    return [
        _in_set("source", SOURCES["audit_events"]),
        _in_set("stage", K8S_AUDIT_STAGES, "unknown Kubernetes audit stage"),
    ]


def _gpu_inventory_rules() -> list[Rule]:
    return [
        _between("fraction", "fraction of a GPU outside (0, 1]", min_value=0, max_value=1, strict_min=True),
        _in_set("share_mode", SHARE_MODES),
        _between("memory_mib", "memory_mib is not positive", min_value=0, strict_min=True),
        _between("gpu", "gpu index is negative", min_value=0),
        _between("gpu_instance_id", "MIG instance or replica id is negative", min_value=0),
        _in_set("source", SOURCES["gpu_inventory"]),
    ]


def _queue_quotas_rules() -> list[Rule]:
    return [
        _between("quota_gpus", "quota_gpus is negative", min_value=0),
        _in_set("source", SOURCES["queue_quotas"]),
    ]


def _governance_actions_rules() -> list[Rule]:
    return [
        _between("step_index", "step_index is negative", min_value=0),
        # 1-based, and 0 for a gpu_health decision (a node or GPU, not an attempt; the parser checks which)
        _between("attempt", "attempt is negative", min_value=0),
        _in_set("record", ("decision", "answer")),
        _in_set("status", ("shadow", "exempt", "rate_limited", "queued", "answered", "recommended", "dropped")),
        _in_set("outcome", ("applied", "refused", "already_done", "dry_run", "proposed")),
        _between("gpus_flagged", "gpus_flagged is negative", min_value=0),
    ]


def _artifact_events_rules() -> list[Rule]:
    return [
        _in_set("kind", ARTIFACT_KINDS, "unknown kind (not checkpoint, artifact, model_version)"),
        _in_set("status", ARTIFACT_STATUSES, "unknown status (not ok, failed)"),
        _in_set("source", SOURCES["artifact_events"]),
        _between("attempt", "attempt is below 1 (attempts are 1-based)", min_value=1),
        _between("size_bytes", "size_bytes is negative", min_value=0),
        _between("training_step", "training_step is negative", min_value=0),
    ]


_DOMAIN_RULES: dict[str, Callable[[], list[Rule]]] = {
    "dcgm_samples": _dcgm_rules,
    "job_events": _job_events_rules,
    "job_gpus": _job_gpus_rules,
    "audit_events": _audit_events_rules,
    "gpu_inventory": _gpu_inventory_rules,
    "queue_quotas": _queue_quotas_rules,
    "governance_actions": _governance_actions_rules,
    "host_samples": _host_rules,
    "artifact_events": _artifact_events_rules,
}


@cache
def rules(table: str) -> tuple[Rule, ...]:
    """A raw table's rules, in the suite's order: not-null per required contract column, then the domain rules."""
    if table not in _DOMAIN_RULES:
        raise ValueError(f"no expectation suite for table {table!r}; known: {', '.join(SUITE_TABLES)}")
    return tuple(_not_null(column) for column in contract(table).required) + tuple(_DOMAIN_RULES[table]())


def build_suite(table: str) -> gx.ExpectationSuite:
    """A fresh GX suite for a raw table: its rules as expectations, in order."""
    import great_expectations as gx

    expectations = [_expectation(rule) for rule in rules(table)]
    # Passing the list up front keeps suite building free of a data context (add_expectation needs one).
    return gx.ExpectationSuite(
        name=f"raw.{table}", expectations=expectations, meta={"contract": contract(table).table}
    )


def _expectation(rule: Rule) -> gxe.Expectation:
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column

    common = {"meta": {"reason": rule.reason}, "description": rule.reason, "column": rule.column}
    if rule.where is not None:
        common["row_condition"] = Column(rule.where[0]).is_in(list(rule.where[1]))
    if rule.kind == NOT_NULL:
        return gxe.ExpectColumnValuesToNotBeNull(**common)
    if rule.kind == BETWEEN:
        return gxe.ExpectColumnValuesToBeBetween(**common, min_value=rule.min_value, max_value=rule.max_value,
                                                  strict_min=rule.strict_min, strict_max=rule.strict_max)
    if rule.kind == IN_SET:
        return gxe.ExpectColumnValuesToBeInSet(**common, value_set=list(rule.value_set))
    if rule.kind == UNIQUE:
        return gxe.ExpectColumnValuesToBeUnique(**common)
    raise ValueError(f"{rule.column}: no GX expectation for rule kind {rule.kind!r}")
