"""node_exporter /metrics text (Prometheus text exposition) and Parquet -> raw.host_samples.

The text is cut into sample lines and series by the dcgm-exporter parser's line and label
helpers (the same format; only the label mapping differs): each distinct series is parsed once,
then every line is checked column-wise.

What a record is: a sample line of a metric raw.host_samples keeps (KEPT_METRICS), or a line
that is malformed whatever its metric (bad UTF-8, invalid name or label block, no value or one
that is not a number, a bad timestamp, text after it, a duplicate label, a label value over
MAX_LABEL_VALUE_CHARS or unmapped labels over MAX_FREE_TEXT_CHARS together). Well-formed lines of
other metrics are not records: they are counted in a note ("skipped"). NaN and infinite values are
quarantined for kept metrics only (node_exporter writes NaN for some sensors it does not keep).

Host: the `host` given (the scrape target's name), else node_uname_info's nodename in the same
exposition (the node's own name), else, for a landing file, the host its name gives
(`host_from_file_name`); without any, kept lines are quarantined. A note says which it was.

Time: a line's own timestamp (milliseconds); else the value of node_time_seconds in the same
exposition (the node's clock at the scrape); else `scraped_at` (the scrape time, or the file's
modification time); without any, the line is quarantined. Only rows given `scraped_at` are marked
untimed (ParseResult.untimed).
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import polars as pl

from pipelines.clock import utc_naive
from pipelines.contracts import contract
from pipelines.sources.base import (
    MAX_FREE_TEXT_CHARS,
    MAX_LABEL_VALUE_CHARS,
    ParseResult,
    quarantine_frame,
    split_by_reason,
)
from pipelines.sources.dcgm_text import (
    _MAX_TIMESTAMP_MS,
    _MIN_TIMESTAMP_MS,
    _label_pairs,
    _parse_series,
    _read_lines,
    _sample_lines,
    order_and_dedupe,
)

SOURCE = "node_exporter"
PARQUET_SOURCE = "node_exporter_parquet"
TABLE = "host_samples"
TIME_METRIC = "node_time_seconds"
UNAME_METRIC = "node_uname_info"
KEPT_METRICS = (
    "node_cpu_seconds_total",
    "node_memory_MemTotal_bytes",
    "node_memory_MemAvailable_bytes",
    "node_network_receive_bytes_total",
    "node_network_transmit_bytes_total",
    "node_disk_read_bytes_total",
    "node_disk_written_bytes_total",
    TIME_METRIC,
    "node_load1",
    "node_boot_time_seconds",
)
LABEL_COLUMNS = ("cpu", "mode", "device")  # labels with their own column; the others go to extra_labels
NO_HOST_REASON = "no host: none given (scrape target or file name) and no node_uname_info nodename in the exposition"
NO_TIME_REASON = "no time: the line has no timestamp, the exposition no node_time_seconds, and no scrape time was given"


def host_from_file_name(name: str) -> str:
    """The host a landing file names: its name up to the first dot, so `node-07.prom`,
    `node-07.20261201T1030.prom` and `node-07.example.com.prom` are all node-07 (a dash cannot
    separate the host from the rest: host names hold dashes)."""
    return name.split(".", 1)[0]


def parse_node_exporter_file(path: str | Path, scraped_at: dt.datetime | None = None) -> ParseResult:
    """Parse one landing file; host from node_uname_info, else from its name; untimed lines without
    node_time_seconds get scraped_at, else the file's mtime."""
    path = Path(path)
    if scraped_at is None:
        scraped_at = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    return _parse(path, str(path), None, scraped_at, file_host=host_from_file_name(path.name))


def parse_node_exporter_text(
    data: bytes | str, source_file: str, host: str | None = None, scraped_at: dt.datetime | None = None
) -> ParseResult:
    """Parse node_exporter text into host_samples rows and quarantine (module doc for the rules).
    Without scraped_at, lines with no timestamp in an exposition without node_time_seconds are
    quarantined (NO_TIME_REASON)."""
    return _parse(data.encode() if isinstance(data, str) else data, source_file, host, scraped_at)


def _parse(source: bytes | Path, source_file: str, host: str | None, scraped_at: dt.datetime | None,
           file_host: str | None = None) -> ParseResult:
    records = _sample_lines(_read_lines(source))
    series = _series(records.get_column("key").unique(maintain_order=True))
    rows = (
        records.join(series, on="key", how="left", maintain_order="left")
        .with_columns(
            value=pl.col("v").cast(pl.Float64, strict=False), ts_ms=pl.col("ts").str.to_integer(strict=False)
        )
        .with_columns(reason=_syntax_reason(), kept=pl.col("metric").is_in(KEPT_METRICS))
    )
    sound = rows.filter(pl.col("reason").is_null())
    nodename = _nodename(sound)
    host, host_from = next(((h, where) for h, where in ((host, "given"), (nodename, "node_uname_info's nodename"),
                                                        (file_host, "the file name")) if h), (None, ""))
    node_time = _node_time(sound)
    fallback = node_time or (utc_naive(scraped_at) if scraped_at else None)
    rows = rows.filter(pl.col("kept") | pl.col("reason").is_not_null()).with_columns(
        reason=pl.coalesce(
            "reason",
            pl.when(pl.col("value").is_nan())
            .then(pl.lit("value is NaN"))
            .when(pl.col("value").is_infinite())
            .then(pl.format("value is {} (not a finite number)", pl.col("v")))
            .when(pl.lit(host is None))
            .then(pl.lit(NO_HOST_REASON))
            .when(pl.col("ts").is_null() & pl.lit(fallback is None))
            .then(pl.lit(NO_TIME_REASON)),
        ),
        sampled_at=pl.coalesce(
            (pl.col("ts_ms") * 1000).cast(pl.Datetime("us")), pl.lit(fallback, dtype=pl.Datetime("us"))
        ),
        no_timestamp=pl.col("ts").is_null() & pl.lit(node_time is None),
    )
    good, duplicates = order_and_dedupe(rows.filter(pl.col("reason").is_null()))
    bad = pl.concat([rows.filter(pl.col("reason").is_not_null()), duplicates], how="diagonal_relaxed").sort(
        "line_number"
    )
    samples = good.with_columns(host=pl.lit(host), source=pl.lit(SOURCE), source_file=pl.lit(source_file))
    skipped = sound.filter(~pl.col("kept"))
    skipped_note = (
        f"{skipped.height} sample lines of {skipped.get_column('metric').n_unique()} metrics "
        "raw.host_samples does not keep were skipped"
    )
    notes = [skipped_note] if skipped.height else []
    if host is not None and host_from != "given":
        notes.append(f"host {host} from {host_from}")
    return ParseResult(
        tables={TABLE: contract(TABLE).conform(samples)},
        quarantine=quarantine_frame(
            SOURCE, source_file, bad.get_column("line_number"), bad.get_column("reason"), bad.get_column("raw")
        ),
        records_read=rows.height,
        records_loaded=good.height,
        notes=notes,
        untimed={TABLE: good.get_column("no_timestamp")},
        empty_answer=rows.height == 0,  # comments only: a scrape without samples (a line not a sample is a record)
    )


def _series(keys: pl.Series) -> pl.DataFrame:
    """One row per distinct series key: metric, cpu, mode, device, extra_labels, nodename (of
    node_uname_info), rank (the series' identity: metric and labels in any order), syntax_error
    and label_error. The syntax check is the dcgm-exporter parser's (its DCGM columns are unused)."""
    parsed = _parse_series(keys).select("key", "metric", "syntax_error")
    sound = parsed.filter(pl.col("syntax_error").is_null()).with_row_index("series_id")
    pairs = _label_pairs(
        sound.select("series_id", content=pl.col("key").str.extract(r"^[^{]*\{(.*)\}$").fill_null(""))
    )
    present = pairs.filter(pl.col("value") != "")  # an empty label value is an absent label
    columns = (
        present.filter(pl.col("key").is_in([*LABEL_COLUMNS, "nodename"]))
        .group_by("series_id", "key")
        .agg(pl.col("value").first())
    )
    wide = (
        columns.pivot(on="key", index="series_id", values="value")
        if columns.height
        else pl.DataFrame(schema={"series_id": pl.UInt32})
    )
    extra = (
        present.filter(~pl.col("key").is_in(LABEL_COLUMNS))
        .sort("series_id", "position")
        .group_by("series_id")
        .agg(extra_labels=pl.col("text").str.join(","), labels_key=pl.col("text").sort().str.join(","))
    )
    duplicated = (
        pairs.group_by("series_id", "key")
        .agg(n=pl.len(), position=pl.col("position").min())
        .filter(pl.col("n") > 1)
        .sort("position")
        .group_by("series_id")
        .agg(duplicate=pl.format("duplicate label {}", pl.col("key").first()))
    )
    too_long = (
        pairs.with_columns(chars=pl.col("value").str.len_chars())
        .filter(pl.col("chars") > MAX_LABEL_VALUE_CHARS)
        .sort("position")
        .group_by("series_id")
        .agg(too_long=pl.format(f"label {{}} is {{}} characters, over {MAX_LABEL_VALUE_CHARS}",
                                pl.col("key").first(), pl.col("chars").first()))
    )
    sound = (
        sound.join(wide, on="series_id", how="left")
        .join(extra, on="series_id", how="left")
        .join(duplicated, on="series_id", how="left")
        .join(too_long, on="series_id", how="left")
        .with_columns(label_error=pl.coalesce(
            "duplicate", "too_long",
            pl.when(pl.col("extra_labels").str.len_chars() > MAX_FREE_TEXT_CHARS).then(pl.format(
                f"labels take {{}} characters, over {MAX_FREE_TEXT_CHARS}", pl.col("extra_labels").str.len_chars())),
        ))
        .with_columns(pl.lit(None, dtype=pl.String).alias(c) for c in [*LABEL_COLUMNS, "nodename"] if c not in wide.columns)
        .with_columns(
            rank=pl.struct("metric", *LABEL_COLUMNS, pl.col("labels_key").fill_null(""))
            .rank("dense")
            .cast(pl.UInt32)
        )
        .drop("series_id", "labels_key", "duplicate", "too_long")
    )
    return pl.concat([sound, parsed.filter(pl.col("syntax_error").is_not_null())], how="diagonal_relaxed")


def _syntax_reason() -> pl.Expr:
    """The first problem with a sample line's text, in words; null when it is well formed."""
    ts, ts_ms = pl.col("ts"), pl.col("ts_ms")
    return (
        pl.when(pl.col("bad_utf8"))
        .then(pl.lit("line is not valid UTF-8"))
        .when(pl.col("syntax_error").is_not_null())
        .then(pl.col("syntax_error"))
        .when(pl.col("v").is_null())
        .then(pl.lit("no value"))
        .when(pl.col("rest") != "")
        .then(pl.format("unexpected text after the timestamp: '{}'", pl.col("rest")))
        .when(pl.col("label_error").is_not_null())
        .then(pl.col("label_error"))
        .when(pl.col("value").is_null())
        .then(pl.format("value is not a number: '{}'", pl.col("v")))
        .when(ts.is_not_null() & ts_ms.is_null())
        .then(pl.format("timestamp is not an integer (milliseconds): '{}'", ts))
        .when(~ts_ms.is_between(_MIN_TIMESTAMP_MS, _MAX_TIMESTAMP_MS))
        .then(pl.format("timestamp out of range: {}", ts))
    )


def _nodename(sound: pl.DataFrame) -> str | None:
    names = sound.filter((pl.col("metric") == UNAME_METRIC) & pl.col("nodename").is_not_null())
    return names.item(0, "nodename") if names.height else None


def _node_time(sound: pl.DataFrame) -> dt.datetime | None:
    """The first well-formed, finite node_time_seconds value, as a naive UTC datetime."""
    times = sound.filter((pl.col("metric") == TIME_METRIC) & pl.col("value").is_finite())
    if not times.height:
        return None
    seconds = times.item(0, "value")
    if not _MIN_TIMESTAMP_MS <= seconds * 1000 <= _MAX_TIMESTAMP_MS:
        return None
    return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=round(seconds * 1_000_000))


# -- Parquet -----------------------------------------------------------------------------------
def parse_node_exporter_parquet(data: bytes, source_file: str) -> ParseResult:
    """Parquet already in the raw.host_samples contract (the simulator's host telemetry, or a
    scrape round) -> host_samples. Columns are matched by name and cast to the contract; a file
    that cannot be read, lacks a required column or does not cast is one quarantined record.
    Rows with a null required field, a NaN or infinite value, a metric the contract does not keep,
    or a host or label over MAX_LABEL_VALUE_CHARS (extra_labels: MAX_FREE_TEXT_CHARS) are
    quarantined with the row as JSON."""
    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except Exception as err:  # noqa: BLE001 - polars raises several error types for a bad file
        return _rejected(source_file, f"not a readable Parquet file: {err}")
    samples = contract(TABLE)
    missing = [c for c in samples.required if c not in frame.columns and c not in ("source", "source_file")]
    if missing:
        return _rejected(source_file, f"missing required columns {', '.join(missing)}")
    try:
        rows = samples.conform(frame.with_columns(source=pl.lit(PARQUET_SOURCE), source_file=pl.lit(source_file)))
    except pl.exceptions.PolarsError as err:
        return _rejected(source_file, f"columns do not cast to the contract's types: {err}")
    rows = rows.with_columns(line_number=pl.int_range(1, pl.len() + 1, dtype=pl.Int32))
    reason = (
        pl.when(pl.any_horizontal(*[pl.col(c).is_null() for c in samples.required]))
        .then(pl.lit("required field is null: ") + pl.concat_str(
            [pl.when(pl.col(c).is_null()).then(pl.lit(c)) for c in samples.required], separator=",",
            ignore_nulls=True))
        .when(pl.col("value").is_nan())
        .then(pl.lit("value is NaN"))
        .when(pl.col("value").is_infinite())
        .then(pl.lit("value is infinite"))
        .when(~pl.col("metric").is_in(KEPT_METRICS))
        .then(pl.format("metric {} is not one raw.host_samples keeps", pl.col("metric")))
    )
    for column, limit in (*((c, MAX_LABEL_VALUE_CHARS) for c in ("host", *LABEL_COLUMNS)),
                          ("extra_labels", MAX_FREE_TEXT_CHARS)):
        chars = pl.col(column).str.len_chars()
        reason = reason.when(chars > limit).then(pl.format(f"{column} is {{}} characters, over {limit}", chars))
    return split_by_reason(rows.with_columns(reason=reason), PARQUET_SOURCE, source_file, TABLE)


def _rejected(source_file: str, reason: str) -> ParseResult:
    return ParseResult(
        tables={TABLE: contract(TABLE).empty_frame()},
        quarantine=quarantine_frame(PARQUET_SOURCE, source_file, [None], [reason], [None]),
        records_read=1,
        records_loaded=0,
    )
