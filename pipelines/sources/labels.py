"""How DCGM/Prometheus label variants map onto the dcgm_samples contract (shared by both parsers).

Both parsers hand over the labels of each distinct series in long form (one row per label) and
get back one row per series with the contract's label columns, the labels they did not map, and
the first problem found. The work is per series, not per sample: a scrape file holds ~1,000
series and ~1,000,000 samples.
"""

from __future__ import annotations

import polars as pl

# contract column -> label names, best first. exported_* come first: Prometheus renames a target
# label it collides with (honor_labels: false) to exported_*, so when both exist the exported_
# one is the exporter's (the workload's) and the plain one names the scrape target's own pod.
LABEL_COLUMNS: dict[str, tuple[str, ...]] = {
    "host": ("Hostname", "hostname"),
    "gpu": ("gpu", "minor_number"),
    "uuid": ("UUID", "uuid"),
    "device": ("device",),
    "pci_bus_id": ("pci_bus_id",),
    "model_name": ("modelName", "name"),
    "gpu_instance_id": ("GPU_I_ID",),
    "gpu_instance_profile": ("GPU_I_PROFILE",),
    "k8s_namespace": ("exported_namespace", "namespace", "pod_namespace"),
    "k8s_pod": ("exported_pod", "pod", "pod_name"),
    "k8s_container": ("exported_container", "container", "container_name"),
    "hpc_job": ("hpc_job", "jobid"),
}
# A series whose container label names the exporter carries the scrape target's own pod labels.
EXPORTER_NAME = r"dcgm-exporter"
EXPORTER_CONTAINER_LABELS = ("container", "container_name")
TARGET_WORKLOAD_LABELS = ("pod", "namespace", "container", "pod_name", "pod_namespace", "container_name")
# The host when no Hostname/hostname label exists: Prometheus' target label, port stripped.
# It is also kept in extra_labels, as it names the scrape target.
INSTANCE_LABEL = "instance"
INTEGER_COLUMNS = {"gpu": "gpu", "gpu_instance_id": "GPU_I_ID"}
MAPPED_COLUMNS = tuple(LABEL_COLUMNS)

_LOOKUP = pl.DataFrame(
    [
        {"key": label, "column": column, "priority": rank}
        for column, labels in LABEL_COLUMNS.items()
        for rank, label in enumerate(labels)
    ],
    schema={"key": pl.String, "column": pl.String, "priority": pl.Int32},
)

PAIRS_SCHEMA = pl.Schema(
    {"series_id": pl.UInt32, "position": pl.UInt32, "key": pl.String, "value": pl.String, "text": pl.String}
)


def unescape_label_value(expr: pl.Expr) -> pl.Expr:
    """Exposition-format escapes \\\\, \\" and \\n; leftmost matching handles "\\\\n" right."""
    return expr.str.replace_many(["\\\\", '\\"', "\\n"], ["\\", '"', "\n"], leftmost=True)


def escape_label_value(expr: pl.Expr) -> pl.Expr:
    return expr.str.replace_many(["\\", '"', "\n"], ["\\\\", '\\"', "\\n"], leftmost=True)


def host_from_instance(expr: pl.Expr) -> pl.Expr:
    """'node-3:9400' -> 'node-3', '[fe80::1]:9400' -> 'fe80::1'."""
    return expr.str.replace(r"^\[(.*)\](?::\d+)?$", "$1").str.replace(r"^([^:\[\]]*):\d+$", "$1")


def _without_exporter_target_labels(present: pl.DataFrame) -> pl.DataFrame:
    """Drop the pod/namespace/container labels that name the dcgm-exporter itself.

    Behind Prometheus' Kubernetes service discovery, the scrape target's labels (the exporter's
    own pod) sit on every series; on a GPU with a workload the exporter's are renamed exported_*,
    but on an idle GPU the plain ones are the exporter's and must not be read as a workload.
    They still reach extra_labels, as every label not mapped does.
    """
    exporter = (
        present.filter(pl.col("key").is_in(EXPORTER_CONTAINER_LABELS) & pl.col("value").str.contains(EXPORTER_NAME))
        .select("series_id")
        .unique()
        .with_columns(is_exporter_target=pl.lit(True))
    )
    if exporter.is_empty():
        return present
    return (
        present.join(exporter, on="series_id", how="left")
        .filter(~(pl.col("is_exporter_target").fill_null(False) & pl.col("key").is_in(TARGET_WORKLOAD_LABELS)))
        .drop("is_exporter_target")
    )


def map_labels(series_ids: pl.Series, pairs: pl.DataFrame) -> pl.DataFrame:
    """One row per series id (in the order given): contract label columns, extra_labels,
    labels_key and label_error.

    `pairs` (PAIRS_SCHEMA) holds one row per label of a series: its position in the series, the
    name, the unescaped value and the original `k="v"` text. Empty values count as absent. gpu
    and gpu_instance_id come back as Int32; labels_key is the sorted label text (the series'
    identity with its metric name); label_error is null or the first problem in words
    (duplicate label, missing host, missing gpu, a non-integer gpu or GPU_I_ID).
    """
    present = pairs.filter(pl.col("value") != "")
    matched = _without_exporter_target_labels(present).join(_LOOKUP, on="key", how="left")
    chosen = (
        matched.filter(pl.col("column").is_not_null())
        .sort("series_id", "priority")
        .group_by("series_id", "column", maintain_order=True)
        .agg(pl.col("value").first(), pl.col("key").first())
    )
    wide = (
        chosen.pivot(on="column", index="series_id", values="value")
        if chosen.height
        else pl.DataFrame(schema={"series_id": pl.UInt32})
    )
    # Labels whose value is not in a contract column: unmapped ones, and losing variants.
    extra = (
        present.join(chosen.select("series_id", "key"), on=["series_id", "key"], how="anti")
        .sort("series_id", "position")
        .group_by("series_id", maintain_order=True)
        .agg(extra_labels=pl.col("text").str.join(","))
    )
    # Series identity: label order and empty labels do not make a different series.
    identity = present.group_by("series_id").agg(labels_key=pl.col("text").sort().str.join(","))
    instance = (
        present.filter(pl.col("key") == INSTANCE_LABEL)
        .group_by("series_id")
        .agg(instance_host=host_from_instance(pl.col("value").first()))
    )
    duplicated = (
        pairs.group_by("series_id", "key")
        .agg(n=pl.len(), position=pl.col("position").min())
        .filter(pl.col("n") > 1)
        .sort("series_id", "position")
        .group_by("series_id", maintain_order=True)
        .agg(duplicate_label=pl.col("key").first())
    )
    out = (
        pl.DataFrame({"series_id": series_ids.cast(pl.UInt32)})
        .join(wide, on="series_id", how="left", maintain_order="left")
        .join(extra, on="series_id", how="left", maintain_order="left")
        .join(instance, on="series_id", how="left", maintain_order="left")
        .join(duplicated, on="series_id", how="left", maintain_order="left")
        .join(identity, on="series_id", how="left", maintain_order="left")
    )
    out = out.with_columns(
        pl.lit(None, dtype=pl.String).alias(c) for c in MAPPED_COLUMNS if c not in out.columns
    ).with_columns(host=pl.coalesce("host", "instance_host"))
    as_integer = {
        column: pl.col(column).str.to_integer(strict=False).cast(pl.Int32, strict=False)
        for column in INTEGER_COLUMNS
    }
    label_error = (
        pl.when(pl.col("duplicate_label").is_not_null())
        .then(pl.format("duplicate label {}", pl.col("duplicate_label")))
        .when(pl.col("host").is_null())
        .then(pl.lit("missing host label"))
        .when(pl.col("gpu").is_null())
        .then(pl.lit("missing gpu label"))
    )
    for column, label in INTEGER_COLUMNS.items():
        label_error = label_error.when(pl.col(column).is_not_null() & as_integer[column].is_null()).then(
            pl.format(f"{label} label is not an integer: '{{}}'", pl.col(column))
        )
    return out.select(
        "series_id",
        *[as_integer[c].alias(c) if c in INTEGER_COLUMNS else pl.col(c) for c in MAPPED_COLUMNS],
        "extra_labels",
        pl.col("labels_key").fill_null(""),
        label_error.otherwise(None).alias("label_error"),
    )


def with_rank(series: pl.DataFrame) -> pl.DataFrame:
    """Add rank: the series' place in output order (host, gpu, MIG instance, metric, labels),
    equal for rows that are the same series; null where series_error is set."""
    ranked = (
        series.with_row_index("_row")
        .filter(pl.col("series_error").is_null())
        .sort("host", "gpu", "gpu_instance_id", "metric", "labels_key", nulls_last=False)
        .select(
            "_row",
            rank=pl.struct("metric", "labels_key").is_first_distinct().cast(pl.UInt32).cum_sum() - 1,
        )
    )
    return (
        series.with_row_index("_row").join(ranked, on="_row", how="left", maintain_order="left").drop("_row")
    )
