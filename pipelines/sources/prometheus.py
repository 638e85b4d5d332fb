"""Prometheus HTTP API responses (/api/v1/query_range "matrix", /api/v1/query "vector") ->
raw.dcgm_samples.

A record is one point of one series. DuckDB's JSON reader turns the document into typed columns
in one pass (labels as a MAP, points as text pairs, native histograms left as JSON), a SQL
model flattens it to one row per label and one row per point, and the labels go through the
same mapping as the exposition parser (labels.py).
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections import Counter

import duckdb
import numpy as np
import polars as pl

from pipelines.contracts import contract
from pipelines.sources.base import RAW_TEXT_LIMIT, ParseResult, quarantine_frame
from pipelines.sources.dcgm_text import order_and_dedupe, samples_result, value_reason
from pipelines.sources.labels import MAPPED_COLUMNS, PAIRS_SCHEMA, escape_label_value, map_labels, with_rank

SOURCE = "prometheus"
_TIME_RANGE_S = (-62_135_596_800, 253_402_300_799.999)  # years 1 to 9999, as dcgm_text's timestamps
NAME_LABEL = "__name__"

_RESULT = (
    'STRUCT(metric MAP(VARCHAR, VARCHAR), "values" VARCHAR[][], value VARCHAR[], '
    "histograms JSON[], histogram JSON)[]"
)
_ENVELOPE = {
    "status": "VARCHAR",
    "errorType": "VARCHAR",
    "error": "VARCHAR",
    "warnings": "VARCHAR[]",
    "infos": "VARCHAR[]",
}
_SERIES_RESULTS = ("matrix", "vector")

# every query starts from one row per series of the response
_SERIES_CTE = """
with
  series as (
    select generate_subscripts(data.result, 1) as series_index, unnest(data.result) as s
    from response
  ),"""

_SERIES_SQL = _SERIES_CTE + """
  final as (
    select
      series_index,
      s.metric['__name__'] as metric,
      to_json(s.metric)::varchar as metric_json
    from series
  )
select * from final order by series_index
"""

_LABELS_SQL = _SERIES_CTE + """
  final as (
    select
      series_index,
      generate_subscripts(map_keys(s.metric), 1) as position,
      unnest(map_keys(s.metric)) as key,
      unnest(map_values(s.metric)) as value
    from series
  )
select * from final
"""

_FLOAT_POINTS_SQL = _SERIES_CTE + """
  point_lists as (
    select
      series_index,
      coalesce(s."values", case when s.value is not null then [s.value] else [] end) as points
    from series
  ),
  final as (
    select
      series_index,
      generate_subscripts(points, 1) as point_index,
      unnest(points) as point
    from point_lists
  )
select series_index, point_index, len(point) as arity, point[1] as t, point[2] as v from final
"""

# Native histograms (not DCGM data) are only counted and quarantined, so they stay JSON.
_HISTOGRAM_POINTS_SQL = _SERIES_CTE + """
  point_lists as (
    select
      series_index,
      len(coalesce(s."values", case when s.value is not null then [s.value] else [] end)) as floats,
      coalesce(s.histograms, case when s.histogram is not null then [s.histogram] else [] end) as points
    from series
  ),
  final as (
    select
      series_index,
      floats + generate_subscripts(points, 1) as point_index,
      unnest(points) as point
    from point_lists
  )
select
  series_index,
  point_index,
  json_array_length(point) as arity,
  point ->> '$[0]' as t,
  point::varchar as histogram_json
from final
"""


def parse_query_range(data: bytes | str, source_file: str) -> ParseResult:
    """Parse a query_range (or instant query) response into dcgm_samples rows and quarantine.

    A failed or unreadable response is one quarantined record (the document); otherwise every
    point is a record: NaN/Inf values, DCGM sentinels, native histogram points and series
    without a host, gpu or metric name are quarantined with their record index (1-based, in
    document order) and the point as JSON.
    """
    raw = data.encode() if isinstance(data, str) else data
    with duckdb.connect() as con:
        response, problem = _read_response(con, raw)
        if problem:
            return _rejected(raw, source_file, problem)
        notes = [f"warning: {w}" for w in response["warnings"] or []] + [
            f"info: {i}" for i in response["infos"] or []
        ]
        series = con.sql(_SERIES_SQL).pl()
        labels = con.sql(_LABELS_SQL).pl()
        points = pl.concat(
            [con.sql(_FLOAT_POINTS_SQL).pl(), con.sql(_HISTOGRAM_POINTS_SQL).pl()], how="diagonal_relaxed"
        )
    series = _map_series(series, labels)
    rows = (
        points.with_columns(pl.col("series_index").cast(pl.UInt32))
        .sort("series_index", "point_index")
        .with_row_index("line_number", offset=1)
        .join(
            series.select("series_index", "rank", "series_error"),
            on="series_index",
            how="left",
            maintain_order="left",
        )
        .with_columns(
            time=pl.col("t").cast(pl.Float64, strict=False), value=pl.col("v").cast(pl.Float64, strict=False)
        )
        .with_columns(
            reason=_reason(),
            sampled_at=((pl.col("time") * 1000).round().cast(pl.Int64, strict=False) * 1000).cast(
                pl.Datetime("us")
            ),
        )
    )
    good, duplicates = order_and_dedupe(rows.filter(pl.col("reason").is_null()))
    bad = (
        pl.concat([rows.filter(pl.col("reason").is_not_null()), duplicates])
        .sort("line_number")
        .join(
            series.select("series_index", "metric_json"), on="series_index", how="left", maintain_order="left"
        )
        .with_columns(raw=_point_json())
    )
    return samples_result(SOURCE, source_file, series, good, bad, rows.height, notes)


class AnswerRejected(ValueError):
    """The whole query answer was rejected (the message is parse_query_range's reason)."""


# label set (the series' `metric` object's items, in order) -> (host, gpu, gpu_instance_id, metric, error)
MappedSeries = dict[tuple, tuple]
SAMPLE_COLUMNS = {"sampled_at": pl.Datetime("us"), "host": pl.String, "gpu": pl.Int64,
                  "gpu_instance_id": pl.Int64, "metric": pl.String, "value": pl.Float64}


def matrix_samples(data: bytes, source_file: str, known: MappedSeries | None = None) -> tuple[pl.DataFrame, Counter]:
    """The samples of a query answer (SAMPLE_COLUMNS) and the reasons of those quarantined, counted:
    the rows and reasons `parse_query_range` gives, for the governance tick, which reads one every
    minute. A matrix of float points is read without DuckDB: in Prometheus' own compact encoding cut
    at its fixed separators by Polars (a label text is decoded only the first time it is seen),
    otherwise decoded with `json`; each distinct label set is mapped once (`known`, kept by the
    caller between answers; the mapping and the value checks are parse_query_range's own). Anything
    else (a failed query, histograms, a point that is no [number, string] pair, a repeated point)
    goes through parse_query_range itself.
    AnswerRejected when the whole answer is rejected."""
    known = {} if known is None else known
    fast = _float_matrix(data, known)
    if fast is not None:
        return fast
    return _parsed(data, source_file, SAMPLE_COLUMNS)


def _parsed(data: bytes, source_file: str, columns: dict) -> tuple[pl.DataFrame, Counter]:
    """parse_query_range's rows (`columns` of them) and its quarantine reasons, counted; AnswerRejected
    when it rejects the whole answer."""
    result = parse_query_range(data, source_file)
    quarantine = result.quarantine
    if result.records_loaded == 0 and quarantine.height == 1 and quarantine["line_number"][0] is None:
        raise AnswerRejected(quarantine["reason"][0])
    return (result.tables["dcgm_samples"].select(list(columns)).cast(columns),
            Counter(quarantine["reason"].to_list()))


def _float_matrix(data: bytes, known: MappedSeries) -> tuple[pl.DataFrame, Counter] | None:
    """`matrix_samples` of an answer holding float points only; None for any other answer."""
    read = _compact_matrix(data) or _json_matrix(data)
    if read is None:
        return None
    keys, labels_of, counts, times, texts = read
    if times.len() and not (times.is_finite().all() and times.is_between(*_TIME_RANGE_S).all()):
        return None
    new = list(dict.fromkeys(k for k in keys if k not in known))
    if new:
        try:
            label_sets = [labels_of(k) for k in new]
        except (ValueError, RecursionError, AttributeError):
            return None
        known.update(zip(new, _mapped(label_sets), strict=True))
    series = pl.DataFrame([known[k] for k in keys], orient="row", schema={
        "host": pl.String, "gpu": pl.Int64, "gpu_instance_id": pl.Int64, "metric": pl.String, "reason": pl.String})
    index = pl.Series(np.repeat(np.arange(len(keys), dtype=np.uint32), counts))
    rows = (
        pl.DataFrame({"series": index, "t": times, "v": texts})
        .with_columns(value=pl.col("v").cast(pl.Float64, strict=False),
                      sampled_at=((pl.col("t") * 1000).round().cast(pl.Int64) * 1000).cast(pl.Datetime("us")))
        .with_columns(series.select(pl.all().gather(index)))
        .with_columns(reason=pl.coalesce("reason", value_reason(pl.col("v"), pl.col("value"))))
    )
    if _repeats_a_point(rows):
        return None  # parse_query_range quarantines the repeats
    good = rows.filter(pl.col("reason").is_null()).select(list(SAMPLE_COLUMNS))
    return good, Counter(rows.get_column("reason").drop_nulls().to_list())


def _repeats_a_point(rows: pl.DataFrame) -> bool:
    """Whether a series holds two points of one time. Prometheus answers each series' points in time
    order, where only neighbours need comparing; any other order is hashed."""
    same_series = pl.col("series") == pl.col("series").shift(1)
    if rows.select((same_series & (pl.col("sampled_at") < pl.col("sampled_at").shift(1))).any()).item():
        return rows.select(pl.struct("series", "sampled_at").is_duplicated().any()).item()
    return rows.select((same_series & (pl.col("sampled_at") == pl.col("sampled_at").shift(1))).any()).item()


# Prometheus' own encoding of a matrix answer (no spaces; a series' labels, then its points)
_COMPACT_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
_COMPACT_TAIL = b"]}}"
_SERIES_START = '{"metric":'
_LABELS_END = '},"values":['
_QUOTED = r'^"[^"\\]*"$'


def _compact_matrix(data: bytes) -> tuple | None:
    """An answer in Prometheus' compact encoding cut at its fixed separators, not decoded: each
    series' label text (the key a label set is known by; decoded only when new) and its points. None
    where the text is anything else (the JSON reading decides then): a label text holds no braces, a
    point no brackets, and every point is [time, "value"]."""
    if not (data.startswith(_COMPACT_HEAD) and data.endswith(_COMPACT_TAIL)):
        return None
    inner = pl.Series([data[len(_COMPACT_HEAD):len(data) - len(_COMPACT_TAIL)]], dtype=pl.Binary)
    inner = inner.cast(pl.String, strict=False)
    if inner.null_count():  # not UTF-8
        return None
    texts = inner.str.split(_SERIES_START).explode()
    if texts[0] != "":
        return None
    texts = texts.slice(1)
    ends = pl.Series(["]},"] * (texts.len() - 1) + ["]}"] * (texts.len() > 0), dtype=pl.String)  # the last has no comma
    if not texts.str.ends_with(ends).all():
        return None
    parts = texts.str.strip_suffix(",").str.strip_suffix("]}").str.split_exact(_LABELS_END, 1).struct.unnest()
    labels, listed = parts["field_0"], parts["field_1"]
    if listed.null_count() or not labels.str.starts_with("{").all() or labels.str.slice(1).str.contains("[{}]").any():
        return None
    counts = listed.str.count_matches(r"\[").to_numpy()
    each = listed.str.strip_prefix("[").str.strip_suffix("]").str.split("],[").explode()
    pairs = each.filter(each != "").str.split_exact(",", 1).struct.unnest()  # a series without points: ""
    if pairs.height != counts.sum() or listed.str.count_matches(r"\]").sum() != pairs.height:
        return None
    times = pairs["field_0"].cast(pl.Float64, strict=False)
    quoted = pairs["field_1"]
    if times.null_count() or quoted.null_count() or not quoted.str.contains(_QUOTED).all():
        return None
    keys = (labels + "}").to_list()
    return keys, lambda text: tuple(json.loads(text).items()), counts, times, quoted.str.slice(1, quoted.str.len_bytes() - 2)


def _clean_result(doc: dict, result_type: str) -> list | None:
    """A successful answer's result list when it is of `result_type` and carries no warnings or infos
    (those go through parse_query_range, which keeps them as notes); None otherwise."""
    result = doc["data"]["result"]
    if doc["status"] != "success" or doc["data"]["resultType"] != result_type or doc.get("warnings") \
            or doc.get("infos") or type(result) is not list:
        return None
    return result


def _json_matrix(data: bytes) -> tuple | None:
    """A matrix answer of float points decoded as JSON: each series' label set (its key) and points."""
    try:
        result = _clean_result(json.loads(data), "matrix")
        if result is None:
            return None
        keys = [tuple(s["metric"].items()) for s in result]
        points = [s["values"] for s in result]
        if any(type(p) is not list for p in points) or any(len(s) != 2 for s in result):
            return None  # histograms, or a series of another shape
        flat = list(itertools.chain.from_iterable(points))
        if any(type(p) is not list or len(p) != 2 for p in flat):
            return None
        times = pl.Series([p[0] for p in flat], dtype=pl.Float64, strict=True)
        texts = pl.Series([p[1] for p in flat], dtype=pl.String, strict=True)
    except (ValueError, RecursionError, KeyError, TypeError, AttributeError, pl.exceptions.PolarsError):
        return None
    return keys, lambda key: key, [len(p) for p in points], times, texts


VECTOR_COLUMNS = {**{c: pl.String for c in MAPPED_COLUMNS}, "gpu": pl.Int64, "gpu_instance_id": pl.Int64,
                  "metric": pl.String, "value": pl.Float64}


def vector_series(data: bytes, source_file: str) -> tuple[pl.DataFrame, Counter]:
    """The series of an instant query's vector answer, one row each (VECTOR_COLUMNS: the contract's
    label columns as parse_query_range maps them, the metric and the value), and the reasons of those
    it would quarantine, counted. A vector of float samples is read with `json` and mapped once per
    label set; anything else goes through parse_query_range itself. AnswerRejected when the whole
    answer is rejected."""
    read = _json_vector(data)
    if read is None:
        return _parsed(data, source_file, VECTOR_COLUMNS)
    series, labels, texts = read
    rows = (
        _map_series(series, labels).sort("series_index")
        .with_columns(v=texts, value=texts.cast(pl.Float64, strict=False))
        .with_columns(reason=pl.coalesce("series_error", value_reason(pl.col("v"), pl.col("value"))))
    )
    good = rows.filter(pl.col("reason").is_null()).select(list(VECTOR_COLUMNS)).cast(VECTOR_COLUMNS)
    return good, Counter(rows.get_column("reason").drop_nulls().to_list())


def _json_vector(data: bytes) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series] | None:
    """A vector answer of float samples decoded as JSON: its series (index, metric), their labels in
    long form (as _map_series takes them) and the value texts."""
    try:
        result = _clean_result(json.loads(data), "vector")
        if result is None:
            return None
        if any(len(s) != 2 or type(s["metric"]) is not dict or type(s["value"]) is not list
               or len(s["value"]) != 2 for s in result):
            return None  # histograms, or a series of another shape
        label_sets = [s["metric"] for s in result]
        sizes = np.fromiter(map(len, label_sets), dtype=np.int64, count=len(label_sets))
        first = np.repeat(np.cumsum(sizes) - sizes, sizes)
        series = pl.DataFrame({
            "series_index": pl.Series(range(len(label_sets)), dtype=pl.UInt32),
            "metric": pl.Series([d.get(NAME_LABEL) for d in label_sets], dtype=pl.String, strict=True),
            "metric_json": pl.Series([None] * len(label_sets), dtype=pl.String),  # a quarantine's raw text only
        })
        labels = pl.DataFrame({
            "series_index": np.repeat(np.arange(len(label_sets), dtype=np.uint32), sizes),
            "position": (np.arange(sizes.sum()) - first + 1).astype(np.uint32),
            "key": pl.Series(list(itertools.chain.from_iterable(label_sets)), dtype=pl.String, strict=True),
            "value": pl.Series(list(itertools.chain.from_iterable(d.values() for d in label_sets)), dtype=pl.String,
                               strict=True),
        })
        texts = pl.Series([s["value"][1] for s in result], dtype=pl.String, strict=True)
    except (ValueError, RecursionError, KeyError, TypeError, AttributeError, pl.exceptions.PolarsError):
        return None
    return series, labels, texts


def _mapped(label_sets: list[tuple]) -> list[tuple]:
    """(host, gpu, gpu_instance_id, metric, series error) of label sets, by parse_query_range's mapping."""
    series = pl.DataFrame({
        "series_index": pl.Series(range(len(label_sets)), dtype=pl.UInt32),
        "metric": [dict(k).get(NAME_LABEL) for k in label_sets],
        "metric_json": [json.dumps(dict(k)) for k in label_sets],
    })
    labels = pl.DataFrame(
        [(i, p, str(key), str(value)) for i, k in enumerate(label_sets) for p, (key, value) in enumerate(k, 1)],
        schema={"series_index": pl.UInt32, "position": pl.UInt32, "key": pl.String, "value": pl.String}, orient="row")
    mapped = _map_series(series, labels).sort("series_index")
    return list(mapped.select("host", pl.col("gpu").cast(pl.Int64), pl.col("gpu_instance_id").cast(pl.Int64),
                              "metric", "series_error").iter_rows())


def _read_response(con: duckdb.DuckDBPyConnection, raw: bytes) -> tuple[dict, str | None]:
    """The envelope as a dict, with the parsed document in table `response` (read once by the
    flattening queries), or the reason the whole document is rejected."""
    if not raw.strip():
        return {}, "empty document"
    try:
        con.read_json(
            io.BytesIO(raw),
            columns={**_ENVELOPE, "data": f"STRUCT(resultType VARCHAR, result {_RESULT})"},
            format="auto",
            maximum_object_size=len(raw) + 1,
        ).create("response")
    except (duckdb.Error, UnicodeDecodeError) as exc:  # see _shape_problem for the second
        return {}, _shape_problem(con, raw, exc)
    envelope = con.sql(f"select {', '.join(_ENVELOPE)}, data.resultType from response").fetchall()
    if len(envelope) != 1:
        return {}, f"expected one JSON object, found {len(envelope)} records"
    response = dict(zip([*_ENVELOPE, "result_type"], envelope[0], strict=True))
    if response["status"] != "success":
        return response, _failure(response)
    if response["result_type"] is None:
        return response, "response has no data.resultType"
    if response["result_type"] not in _SERIES_RESULTS:
        return response, f"resultType {response['result_type']!r} holds no series (expected matrix or vector)"
    return response, None


def _shape_problem(con: duckdb.DuckDBPyConnection, raw: bytes, exc: duckdb.Error | UnicodeDecodeError) -> str:
    """Why the typed read failed: a failed query, a scalar/string result, or not JSON at all."""
    try:
        rows = (
            con.read_json(
                io.BytesIO(raw),
                columns={**_ENVELOPE, "data": "STRUCT(resultType VARCHAR)"},
                format="auto",
                maximum_object_size=len(raw) + 1,
            )
            .project("status, errorType, error, data.resultType")
            .fetchall()
        )
    except (duckdb.Error, UnicodeDecodeError) as inner:
        message = _duckdb_message(inner)
        if not message:
            return f"not a query response: not JSON, or JSON of another shape ({_UNREADABLE})"
        return f"not valid JSON: {message}"
    if len(rows) == 1:
        status, error_type, error, result_type = rows[0]
        if status != "success":
            return _failure({"status": status, "errorType": error_type, "error": error})
        if result_type not in _SERIES_RESULTS:
            return f"resultType {result_type!r} holds no series (expected matrix or vector)"
    message = _duckdb_message(exc)
    return f"unexpected response shape: {message}" if message else f"unexpected response shape ({_UNREADABLE})"


def _failure(response: dict) -> str:
    if response["status"] == "error":
        return f"query failed: {response['errorType'] or 'error'}: {response['error'] or 'no message'}"
    return f"status is {response['status']!r}, not 'success'"


# DuckDB quotes the offending JSON in its message, cut to a length that can fall inside a UTF-8
# character: the Python client then raises UnicodeDecodeError instead of DuckDB's error (with Python
# 3.11.7), or DuckDB's error with an empty message (3.11.2)
_UNREADABLE = "DuckDB's message was unreadable"


def _duckdb_message(exc: duckdb.Error | UnicodeDecodeError) -> str:
    """DuckDB's message without its hints; empty when it could not be read (_UNREADABLE)."""
    if isinstance(exc, UnicodeDecodeError):
        return ""
    lines = str(exc).split("Error: ", 1)[-1].splitlines()[:1]  # drop DuckDB's hints
    return re.sub(r' in file "[^"]*"', "", "".join(lines)).strip()


def _rejected(raw: bytes, source_file: str, reason: str) -> ParseResult:
    """The whole document as one quarantined record."""
    text = raw[: RAW_TEXT_LIMIT * 4].decode("utf-8", errors="replace")
    return ParseResult(
        tables={"dcgm_samples": contract("dcgm_samples").empty_frame()},
        quarantine=quarantine_frame(SOURCE, source_file, [None], [reason], [text], stage="parse"),
        records_read=1,
        records_loaded=0,
    )


def _map_series(series: pl.DataFrame, labels: pl.DataFrame) -> pl.DataFrame:
    """Series attributes (contract label columns, extra_labels, metric, rank, series_error)."""
    pairs = (
        labels.filter(pl.col("key") != NAME_LABEL)
        .select(
            series_id=pl.col("series_index").cast(pl.UInt32),
            position=pl.col("position").cast(pl.UInt32),
            key=pl.col("key"),
            value=pl.col("value"),
            text=pl.format('{}="{}"', pl.col("key"), escape_label_value(pl.col("value"))),
        )
        .match_to_schema(PAIRS_SCHEMA)
    )
    series = series.with_columns(pl.col("series_index").cast(pl.UInt32))
    mapped = map_labels(series.get_column("series_index"), pairs)
    series = series.select("series_index", "metric", "metric_json").join(
        mapped.rename({"series_id": "series_index"}), on="series_index", how="left", maintain_order="left"
    )
    series = series.with_columns(
        series_error=pl.when(pl.col("metric").is_null() | (pl.col("metric") == ""))
        .then(pl.lit("series has no __name__ label (metric name)"))
        .otherwise(pl.col("label_error"))
    )
    return with_rank(series).select(
        "series_index", "rank", "metric", "metric_json", *MAPPED_COLUMNS, "extra_labels", "series_error"
    )


def _point_json() -> pl.Expr:
    """A quarantined point as JSON, in the instant-vector form {"metric": {...}, "value": [t, "v"]}."""
    quoted = pl.concat_str(
        pl.lit('"'), pl.col("v").str.replace_many(["\\", '"'], ["\\\\", '\\"']), pl.lit('"')
    ).fill_null("null")
    point = (
        pl.when(pl.col("histogram_json").is_not_null())
        .then(pl.col("histogram_json"))
        .when((pl.col("arity") == 2) & pl.col("time").is_not_null())
        .then(pl.concat_str(pl.lit("["), pl.col("t"), pl.lit(","), quoted, pl.lit("]")))
        .otherwise(pl.lit("(not a [time, value] pair)"))
    )
    return pl.concat_str(pl.lit('{"metric":'), pl.col("metric_json"), pl.lit(',"value":'), point, pl.lit("}"))


def _reason() -> pl.Expr:
    t = pl.col("t")
    return (
        pl.when(pl.col("histogram_json").is_not_null())
        .then(pl.lit("native histogram sample (not a float value)"))
        .when(pl.col("series_error").is_not_null())
        .then(pl.col("series_error"))
        .when(pl.col("arity").fill_null(0) != 2)  # a null point has no arity
        .then(pl.lit("point is not a [time, value] pair"))
        .when(pl.col("time").is_null() | ~pl.col("time").is_finite())
        .then(pl.format("time is not a number: '{}'", t.fill_null("null")))  # format(null) is null
        .when(~pl.col("time").is_between(*_TIME_RANGE_S))
        .then(pl.format("time out of range: {}", t))
        .otherwise(value_reason(pl.col("v"), pl.col("value")))
    )
