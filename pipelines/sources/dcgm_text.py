"""dcgm-exporter /metrics text (Prometheus text exposition format) -> raw.dcgm_samples.

Column-wise Polars, no loop per line. A scrape repeats each series' label block in every line
(~250 bytes of labels per ~20 bytes of value and timestamp), so the label work is done once per
distinct series and joined back:

1. read the lines with Polars' CSV reader (one column, a separator that does not occur);
2. cut each sample line after its label block: the part before is the series key
   `name{labels}` (kept as a view into the line, not copied), the part after holds the value and
   the optional timestamp in milliseconds;
3. parse the distinct series keys (validate the label block, pull the pairs, map them onto the
   contract through labels.py);
4. per line: cast value and timestamp, quarantine what is wrong, drop later duplicates of a
   (series, timestamp), sort by series and time.
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa

from pipelines.clock import utc_naive
from pipelines.contracts import contract
from pipelines.sources.base import ParseResult, quarantine_frame
from pipelines.sources.labels import MAPPED_COLUMNS, PAIRS_SCHEMA, map_labels, unescape_label_value, with_rank

SOURCE = "dcgm_text"
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_VALUE = r'"(?:[^"\\]|\\.)*"'
_PAIR = rf"[ \t]*{_LABEL}[ \t]*=[ \t]*{_VALUE}[ \t]*"
_BLOCK_OK = rf"^(?:{_PAIR}(?:,{_PAIR})*,?)?[ \t]*$"
# Complete pairs, then a label whose quoted value runs to the end of what is there.
_VALUE_OPEN = rf'^(?:{_PAIR},)*[ \t]*{_LABEL}[ \t]*=[ \t]*"(?:[^"\\]|\\.)*\\?$'
_PAIR_TOKEN = rf"{_LABEL}[ \t]*=[ \t]*{_VALUE}"
_LAST_BRACE = r"\}[^}]*$"
_TAIL = r"^[ \t]*([^ \t]+)?(?:[ \t]+([^ \t]+))?[ \t]*(.*)$"

# DCGM's "no value" markers (dcgm_structs.h). int32 markers are not checked: dcgm-exporter
# prints int fields as int64, and 2147483632 is a plausible real counter value.
INT64_SENTINELS = {
    9223372036854775792: "blank",
    9223372036854775793: "not found",
    9223372036854775794: "not supported",
    9223372036854775795: "not permissioned",
}
FP64_SENTINELS = {
    140737488355328.0: "blank",
    140737488355329.0: "not found",
    140737488355330.0: "not supported",
    140737488355331.0: "not permissioned",
}
DUPLICATE_REASON = "duplicate sample (same series and timestamp as an earlier record)"
# Years 1 to 9999: what a Python datetime holds (Polars' to Python conversion panics outside it).
_MIN_TIMESTAMP_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
_MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def parse_dcgm_file(path: str | Path, scraped_at: dt.datetime | None = None) -> ParseResult:
    """Parse one exposition file; lines without a timestamp get scraped_at, else the file's mtime."""
    path = Path(path)
    if scraped_at is None:
        scraped_at = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    return _parse(path, str(path), scraped_at)


def parse_dcgm_text(
    data: bytes | str, source_file: str, scraped_at: dt.datetime | None = None
) -> ParseResult:
    """Parse dcgm-exporter text into dcgm_samples rows and quarantine.

    A record is a sample line (`# ...` comments and blank lines are not records). scraped_at is
    the time of lines without their own timestamp; without it such lines raise ValueError.
    """
    return _parse(data.encode() if isinstance(data, str) else data, source_file, scraped_at)


def _parse(source: bytes | Path, source_file: str, scraped_at: dt.datetime | None) -> ParseResult:
    scraped = utc_naive(scraped_at) if scraped_at else None
    records = _sample_lines(_read_lines(source))
    series, series_ids = _series_of(records)
    rows = (
        records.with_columns(
            # series_id is the row of `series`: a gather, not a join
            series.get_column(name).gather(series_ids)
            for name in ("rank", "syntax_error", "label_error")
        )
        .lazy()
        .with_columns(
            value=pl.col("v").cast(pl.Float64, strict=False), ts_ms=pl.col("ts").str.to_integer(strict=False)
        )
        .select(
            "line_number",
            "raw",
            "rank",
            "value",
            reason=_reason(),
            sampled_at=pl.coalesce(
                (pl.col("ts_ms") * 1000).cast(pl.Datetime("us")), pl.lit(scraped, dtype=pl.Datetime("us"))
            ),
            no_timestamp=pl.col("ts").is_null(),
        )
        .collect(engine="streaming")
    )
    if scraped is None:
        _require_timestamps(rows, source_file)
    good, duplicates = order_and_dedupe(
        rows.filter(pl.col("reason").is_null()).select("line_number", "rank", "value", "sampled_at", "no_timestamp")
    )
    bad = pl.concat(
        [
            rows.filter(pl.col("reason").is_not_null()).select("line_number", "reason", "raw"),
            duplicates.join(rows.select("line_number", "raw"), on="line_number").select(
                "line_number", "reason", "raw"
            ),
        ]
    ).sort("line_number")
    return samples_result(SOURCE, source_file, series, good, bad, rows.height)


def samples_result(
    source: str,
    source_file: str,
    series: pl.DataFrame,
    good: pl.DataFrame,
    bad: pl.DataFrame,
    records_read: int,
    notes: list[str] | None = None,
) -> ParseResult:
    """Expand each loaded sample's series attributes (by rank) and package the parse result. No record read
    (only comments, or a query that matched no series) is a well-formed answer without one: a quiet scrape;
    a line that is not a sample is a record, quarantined."""
    attributes = series.filter(pl.col("rank").is_not_null()).unique("rank").sort("rank")
    samples = attributes.select(pl.all().gather(good.get_column("rank"))).with_columns(
        good.select("value", "sampled_at"), source=pl.lit(source), source_file=pl.lit(source_file)
    )
    return ParseResult(
        tables={"dcgm_samples": contract("dcgm_samples").conform(samples)},
        quarantine=quarantine_frame(
            source, source_file, bad.get_column("line_number"), bad.get_column("reason"), bad.get_column("raw")
        ),
        records_read=records_read,
        records_loaded=good.height,
        notes=notes or [],
        untimed={"dcgm_samples": good.get_column("no_timestamp")} if "no_timestamp" in good.columns else {},
        empty_answer=records_read == 0,
    )


def _series_of(records: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """The distinct series (parsed; row i is series_id i) and each record's series_id.

    Keys are matched by a 64-bit hash (one pass over the key bytes instead of hashing them for
    a unique and again for a join); each key is then compared with its series' key, and on a
    hash collision the exact string match is used instead.
    """
    keyed = records.select("key", hash=_key_hash())
    firsts = keyed.unique("hash", keep="first", maintain_order=True).with_row_index("series_id")
    ids = keyed.join(firsts, on="hash", how="left", maintain_order="left", suffix="_series")
    if not (ids.get_column("key") == ids.get_column("key_series")).all():
        firsts = keyed.select("key").unique(maintain_order=True).with_row_index("series_id")
        ids = keyed.join(firsts, on="key", how="left", maintain_order="left")
    series = (
        firsts.select("series_id", "key")
        .join(_parse_series(firsts.get_column("key")), on="key")
        .sort("series_id")
    )
    return series, ids.get_column("series_id")


def _key_hash() -> pl.Expr:
    return pl.col("key").hash()


def _require_timestamps(rows: pl.DataFrame, source_file: str) -> None:
    missing = rows.filter(pl.col("reason").is_null() & pl.col("no_timestamp"))
    if missing.height:
        raise ValueError(
            f"{source_file}: {missing.height} sample lines carry no timestamp (first: line "
            f"{missing.item(0, 'line_number')}) and no scraped_at was given"
        )


def order_and_dedupe(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Sort loadable rows by series and time; of equal (series, time) the first line loads and
    the later ones come back as duplicates. One stable sort on a combined integer key, where the
    series count times the time span fits in an int64 (always, in practice)."""
    micros = pl.col("sampled_at").cast(pl.Int64)
    low, high, ranks = rows.select(
        micros.min().alias("low"), micros.max().alias("high"), pl.col("rank").max()
    ).row(0)
    if rows.height and (ranks + 1) * (high - low + 1) < 2**62:
        rows = rows.sort(
            pl.col("rank").cast(pl.Int64) * (high - low + 1) + (micros - low), maintain_order=True
        )
    else:
        rows = rows.sort("rank", "sampled_at", maintain_order=True)
    repeat = (pl.col("rank") == pl.col("rank").shift(1)) & (
        pl.col("sampled_at") == pl.col("sampled_at").shift(1)
    )
    rows = rows.with_columns(repeat=repeat.fill_null(False))
    duplicates = rows.filter(pl.col("repeat")).with_columns(reason=pl.lit(DUPLICATE_REASON))
    return rows.filter(~pl.col("repeat")).drop("repeat"), duplicates.drop("repeat")


# -- lines -------------------------------------------------------------------------------------
def _read_lines(source: bytes | Path) -> pl.DataFrame:
    """line_number (1-based), line (null when empty; CRLF and a UTF-8 BOM removed), bad_utf8.

    A file is handed to the CSV reader by path (memory-mapped, not copied into Python).
    """
    if isinstance(source, bytes):
        source = source.removeprefix(b"\xef\xbb\xbf")
    try:
        # The CSV reader splits lines in parallel; \x1f (unit separator) does not occur in
        # exposition text, and where it does the fallback below reads the bytes instead.
        lines = pl.read_csv(
            io.BytesIO(source) if isinstance(source, bytes) else source,
            has_header=False,
            separator="\x1f",
            quote_char=None,
            new_columns=["line"],
            schema={"line": pl.String},
            glob=False,
            raise_if_empty=False,
        ).with_columns(bad_utf8=pl.lit(False))
    except (pl.exceptions.ComputeError, pl.exceptions.SchemaError):
        data = source if isinstance(source, bytes) else source.read_bytes().removeprefix(b"\xef\xbb\xbf")
        lines = _read_lines_binary(data)
    return lines.with_row_index("line_number", offset=1).with_columns(pl.col("line_number").cast(pl.Int32))


def _read_lines_binary(data: bytes) -> pl.DataFrame:
    """Split at newlines over the raw bytes, for input that is not UTF-8 or holds \\x1f. A line
    that is not valid UTF-8 comes back with U+FFFD in place of the bad bytes, flagged bad_utf8
    (its bytes differ from those of the repaired text; repair never adds or removes a newline)."""
    repaired = data.decode("utf-8", errors="replace").encode()
    original, text = _split_bytes(data), _split_bytes(repaired)
    return pl.DataFrame(
        {
            "line": text.cast(pl.String).str.strip_suffix("\n").str.strip_suffix("\r"),
            "bad_utf8": original != text,
        }
    ).with_columns(line=pl.when(pl.col("line") != "").then(pl.col("line")))


def _split_bytes(data: bytes) -> pl.Series:
    """One binary value per line, newline included (the offsets are those of the newlines)."""
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n")) + 1
    if data and not data.endswith(b"\n"):
        ends = np.append(ends, len(data))
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    array = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    return pl.Series("line", array, dtype=pl.Binary)


def _sample_lines(lines: pl.DataFrame) -> pl.DataFrame:
    """Sample lines in line order: line_number, raw, bad_utf8, key (`name{labels}` or `name`),
    v (value text), ts (timestamp text), rest (text after the timestamp, normally empty).

    The fast path, streamed over both cores, cuts each line after its first '}' (memchr) and
    splits the tail at single spaces, as dcgm-exporter writes it. Lines where that is not enough
    (a '}' inside a label value, no '}', leading blanks, other spacing) are redone below.
    """
    cut = (pl.col("line").str.find("}", literal=True) + 1).cast(pl.UInt32)
    split = (
        lines.lazy()
        .with_columns(first=pl.col("line").str.head(1))
        .filter(pl.col("line").is_not_null() & (pl.col("first") != "#"))
        .with_columns(padded=pl.col("first").is_in([" ", "\t"]), cut=cut)
        .with_columns(tail=pl.col("line").cast(pl.Binary).bin.slice(pl.col("cut")).cast(pl.String))
        .pipe(_split_tail)
        .with_columns(
            odd=pl.col("padded") | pl.col("cut").is_null() | pl.col("tail").str.contains("}", literal=True)
        )
        .collect(engine="streaming")
    )
    split = split.with_columns(key=_prefixes(split.get_column("line"), split.get_column("cut")))
    if not split.select(pl.col("odd").any() | ~pl.col("regular").all()).item():
        return _finish(split)
    fine = split.filter(~pl.col("odd") & pl.col("regular"))
    # Irregular spacing after a sound cut: only the tail is read again, with a regex.
    spaced = split.filter(~pl.col("odd") & ~pl.col("regular"))
    redo = (
        split.filter(pl.col("odd"))
        .select("line_number", "line", "bad_utf8", stripped=pl.col("line").str.strip_chars_start(" \t"))
        .filter((pl.col("stripped") != "") & ~pl.col("stripped").str.starts_with("#"))
    )
    last_brace = pl.col("stripped").str.find(_LAST_BRACE)
    # No '}' at all: `name value [ts]`, or a label block cut off (kept whole as the key, so the
    # series parser can say what is missing).
    no_brace = (
        pl.when(pl.col("stripped").str.contains("{", literal=True))
        .then(pl.col("stripped").str.len_bytes())
        .otherwise(pl.col("stripped").str.find(r"[ \t]").fill_null(pl.col("stripped").str.len_bytes()))
    )
    binary = pl.col("stripped").cast(pl.Binary)
    recut = _split_tail(
        redo.with_columns(cut=pl.coalesce(last_brace + 1, no_brace).cast(pl.UInt32)).with_columns(
            key=binary.bin.head(pl.col("cut")).cast(pl.String),
            tail=binary.bin.slice(pl.col("cut")).cast(pl.String),
        )
    )
    return _finish(
        pl.concat([fine, _regex_tail(spaced), _regex_tail(recut)], how="diagonal").sort("line_number")
    )


def _prefixes(lines: pl.Series, cut: pl.Series) -> pl.Series:
    """The first `cut` bytes of each line (whole line where cut is null), without copying them.

    Polars keeps strings as Arrow views (length, 4-byte prefix, buffer index, offset); the view
    of a line's first n > 12 bytes is the line's view with a shorter length. So the series keys,
    ~90% of the input, are not copied. Where that does not hold (a key of 12 bytes or less is
    stored inline) the bytes are sliced the ordinary way.
    """
    cut = cut.fill_null(lines.str.len_bytes())
    arrow = lines.to_arrow(compat_level=pl.CompatLevel.newest())
    if not pa.types.is_string_view(arrow.type) or (cut <= 12).any() or lines.null_count():
        return lines.cast(pl.Binary).bin.head(cut).cast(pl.String)
    chunks = arrow.chunks if isinstance(arrow, pa.ChunkedArray) else [arrow]
    cuts, start, out = cut.to_numpy(), 0, []
    for chunk in chunks:
        buffers = chunk.buffers()
        views = np.frombuffer(buffers[1], np.uint32, count=4 * len(chunk), offset=chunk.offset * 16).reshape(
            -1, 4
        )
        views = views.copy()
        views[:, 0] = cuts[start : start + len(chunk)]  # bytes 0-3 of a view hold the length
        start += len(chunk)
        out.append(
            pa.Array.from_buffers(pa.string_view(), len(chunk), [None, pa.py_buffer(views), *buffers[2:]])
        )
    return pl.Series(lines.name, pa.chunked_array(out, type=pa.string_view()))


def _split_tail(frame: FrameT) -> FrameT:
    """v and ts from ` value [timestamp]` split at single spaces; regular is false where that
    split may be wrong (other spacing, tabs, extra tokens)."""
    fields = pl.col("tail").str.split_exact(" ", 2).struct.rename_fields(["lead", "v", "ts"])
    v, ts = pl.col("v"), pl.col("ts")
    # ' v' or ' v ts' exactly: the lengths add up, so the split dropped nothing.
    regular = (
        (pl.col("lead") == "")
        & (v != "")
        & ((ts != "") | ts.is_null())
        & (pl.col("tail").str.len_bytes() == v.str.len_bytes() + 1 + (ts.str.len_bytes() + 1).fill_null(0))
        & ~pl.col("tail").str.contains("\t", literal=True)
    ).fill_null(False)
    return (
        frame.with_columns(fields.alias("fields"))
        .unnest("fields")
        .with_columns(rest=pl.lit(""), regular=regular)
        .drop("lead")
    )


def _regex_tail(split: pl.DataFrame) -> pl.DataFrame:
    groups = pl.col("tail").str.extract_groups(_TAIL).struct.rename_fields(["v", "ts", "rest"])
    return split.drop("v", "ts", "rest").with_columns(groups.alias("groups")).unnest("groups")


def _finish(split: pl.DataFrame) -> pl.DataFrame:
    return split.select("line_number", "bad_utf8", "key", "v", "ts", "rest", raw="line")


# -- series ------------------------------------------------------------------------------------
def _parse_series(keys: pl.Series) -> pl.DataFrame:
    """One row per distinct series key: rank (see labels.with_rank), metric, the contract's
    label columns, extra_labels, syntax_error and label_error (null when fine)."""
    series = (
        pl.DataFrame({"key": keys})
        .with_columns(
            metric=pl.col("key").str.extract(r"^([^{]*)").str.strip_chars(" \t"),
            opened=pl.col("key").str.contains("{", literal=True),
            closed=pl.col("key").str.ends_with("}"),
            content=pl.col("key").str.extract(r"^[^{]*\{(.*)$"),
        )
        .with_columns(
            content=pl.when(pl.col("closed"))
            .then(pl.col("content").str.strip_suffix("}"))
            .otherwise(pl.col("content"))
        )
        .with_columns(
            syntax_error=pl.when(~pl.col("metric").str.contains(f"^{_NAME}$"))
            .then(pl.format("invalid metric name '{}'", pl.col("metric")))
            .when(pl.col("opened") & pl.col("content").str.contains(_VALUE_OPEN))
            .then(pl.lit("label value not closed"))
            .when(pl.col("opened") & ~pl.col("closed"))
            .then(pl.lit("label block not closed"))
            .when(pl.col("opened") & ~pl.col("content").str.contains(_BLOCK_OK))
            .then(pl.lit("malformed label block"))
        )
        .with_columns(content=pl.col("content").fill_null(""))
    )
    # Label blocks repeat across metrics (one per GPU): parse each distinct block once.
    blocks = (
        series.filter(pl.col("syntax_error").is_null())
        .select("content")
        .unique(maintain_order=True)
        .with_row_index("series_id")
    )
    pairs = _label_pairs(blocks)
    mapped = blocks.join(map_labels(blocks.get_column("series_id"), pairs), on="series_id").drop("series_id")
    series = series.join(mapped, on="content", how="left", maintain_order="left").with_columns(
        series_error=pl.coalesce("syntax_error", "label_error")
    )
    return with_rank(series).select(
        "key", "rank", "metric", *MAPPED_COLUMNS, "extra_labels", "syntax_error", "label_error"
    )


def _label_pairs(blocks: pl.DataFrame) -> pl.DataFrame:
    """One row per label of each block (PAIRS_SCHEMA, series_id being the block's), in order."""
    tokens = (
        blocks.select("series_id", token=pl.col("content").str.extract_all(_PAIR_TOKEN))
        .explode("token")
        .drop_nulls("token")
        .with_row_index("position")
    )
    raw_value = pl.col("token").str.extract(r'"((?:[^"\\]|\\.)*)"$')
    key = pl.col("token").str.extract(f"^({_LABEL})")
    return tokens.select(
        pl.col("series_id").cast(pl.UInt32),
        pl.col("position").cast(pl.UInt32),
        key=key,
        value=unescape_label_value(raw_value),
        text=pl.format('{}="{}"', key, raw_value),
    ).match_to_schema(PAIRS_SCHEMA)


# -- per line ----------------------------------------------------------------------------------
def value_reason(text: pl.Expr, value: pl.Expr) -> pl.Expr:
    """What is wrong with a sample value (its text, and as a Float64), in words; null when it
    loads. Shared with the Prometheus parser."""
    reason = (
        pl.when(text.is_null())
        .then(pl.lit("no value"))
        .when(value.is_null())
        .then(pl.format("value is not a number: '{}'", text))
        .when(value.is_nan())
        .then(pl.lit("value is NaN"))
        .when(value.is_infinite())
        .then(pl.format("value is {} (not a finite number)", text))
    )
    as_int = text.str.to_integer(strict=False)
    for sentinel, meaning in INT64_SENTINELS.items():
        reason = reason.when(as_int == sentinel).then(pl.lit(f"DCGM int64 {meaning} sentinel {sentinel}"))
    # dcgm_structs.h: DCGM_INT64_IS_BLANK(v) is v >= DCGM_INT64_BLANK.
    reason = reason.when(as_int >= min(INT64_SENTINELS)).then(
        pl.format(f"DCGM int64 blank sentinel range (>= {min(INT64_SENTINELS)}): {{}}", text)
    )
    for sentinel, meaning in FP64_SENTINELS.items():
        reason = reason.when(value == sentinel).then(pl.lit(f"DCGM fp64 {meaning} sentinel {sentinel:.1f}"))
    # As float64 (Prometheus storage) the four int64 sentinels are all 2**63.
    return (
        reason.when((value == 2.0**63) & as_int.is_null())
        .then(
            pl.lit("DCGM int64 sentinel 2^63 as float (blank, not found, not supported or not permissioned)")
        )
        .otherwise(None)
    )


def _reason() -> pl.Expr:
    """The first problem with a sample line, in words; null when it loads."""
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
        .otherwise(
            pl.coalesce(
                value_reason(pl.col("v"), pl.col("value")),
                pl.when(ts.is_not_null() & ts_ms.is_null())
                .then(pl.format("timestamp is not an integer (milliseconds): '{}'", ts))
                .when(~ts_ms.is_between(_MIN_TIMESTAMP_MS, _MAX_TIMESTAMP_MS))
                .then(pl.format("timestamp out of range: {}", ts)),
            )
        )
    )
