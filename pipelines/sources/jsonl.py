"""Reading JSON Lines and JSON documents into records, and checking the fields of a record.

`read_json_lines` turns bytes into (line number, raw text, parsed value) records; a line that is
not UTF-8 or not JSON goes to a `Rejects` collector with its line number and the reason. Blank
lines carry no record and are skipped. `Columns` gathers a table's column lists record by record
and builds the frame once. The field getters raise `RecordError`, whose message is
the quarantine reason ("field 'attempt' is string, expected integer").
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import polars as pl

from pipelines.sources.base import ParseResult, quarantine_frame


class RecordError(ValueError):
    """A record that cannot be loaded; str(error) is the quarantine reason."""


class DocumentError(RecordError):
    """A JSON document that cannot be parsed; line_number is where the syntax error is, if known."""

    def __init__(self, reason: str, line_number: int | None = None) -> None:
        super().__init__(reason)
        self.line_number = line_number


@dataclass(frozen=True)
class JsonRecord:
    line_number: int
    raw: str
    value: object


@dataclass
class Rejects:
    """Quarantined records collected while parsing, turned into one ops.quarantine frame.

    stage is "parse" for records that could not be read (not JSON, wrong field count) and
    "validate" for records read but refused (missing field, bad type or value).
    """

    line_numbers: list[int | None] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    raws: list[str | None] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)

    def add(self, line_number: int | None, reason: str, raw: str | None, stage: str = "validate") -> None:
        self.line_numbers.append(line_number)
        self.reasons.append(reason)
        self.raws.append(raw)
        self.stages.append(stage)

    def __len__(self) -> int:
        return len(self.reasons)

    def frame(self, source: str, source_file: str) -> pl.DataFrame:
        frame = quarantine_frame(source, source_file, self.line_numbers, self.reasons, self.raws)
        return frame.with_columns(stage=pl.Series(self.stages, dtype=pl.String)).sort(
            "line_number", nulls_last=False, maintain_order=True
        )


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent; one too large for a double (1e400) is refused,
    not read as infinity."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} is out of range for a double")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _loads(text: str) -> object:
    """json.loads, refusing NaN/Infinity, nesting too deep for the parser (RecursionError) and strings
    with a lone UTF-16 surrogate escape ("\\ud800": not Unicode, no column can hold it) as ValueError."""
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if _SURROGATE_ESCAPE.search(text):  # a pair is fine; a lone half fails to encode
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"lone UTF-16 surrogate {error.object[error.start]!r}: not Unicode") from None
        except RecursionError:
            raise ValueError("nested too deeply") from None
    return value


def read_lines(data: bytes | str, rejects: Rejects) -> list[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers (CRLF and a byte order mark allowed).

    A line that is not UTF-8 goes to `rejects`; blank lines carry no record and are skipped.
    """
    raw = data.encode() if isinstance(data, str) else data
    lines = []
    for index, line in enumerate(raw.removeprefix(b"\xef\xbb\xbf").split(b"\n")):
        line = line.removesuffix(b"\r")
        if not line.strip():
            continue
        try:
            lines.append((index + 1, line.decode("utf-8")))
        except UnicodeDecodeError as error:
            rejects.add(index + 1, f"not valid UTF-8 at byte {error.start}", line.decode("utf-8", "replace"), "parse")
    return lines


def read_json_lines(data: bytes | str, rejects: Rejects) -> list[JsonRecord]:
    """Parse each non-blank line; bad lines go to `rejects` (records read = returned + added)."""
    raw = data.encode() if isinstance(data, str) else data
    unterminated = None if raw.endswith(b"\n") else raw.count(b"\n") + 1  # a cut-off last line
    records: list[JsonRecord] = []
    for number, text in read_lines(raw, rejects):
        try:
            value = _loads(text)
        except json.JSONDecodeError as error:
            hint = " (last line has no newline: truncated?)" if number == unterminated else ""
            rejects.add(number, f"invalid JSON: {error.msg} at column {error.colno}{hint}", text, "parse")
            continue
        except ValueError as error:
            rejects.add(number, f"invalid JSON: {error}", text, "parse")
            continue
        records.append(JsonRecord(number, text, value))
    return records


def decode_document(data: bytes | str) -> str:
    """The text of a whole-file document (UTF-8, byte order mark dropped)."""
    try:
        return data.decode("utf-8-sig") if isinstance(data, bytes) else data.removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise DocumentError(f"not valid UTF-8 at byte {error.start}") from error


def load_json_document(text: str) -> object:
    """Parse one JSON document; DocumentError names the position of a syntax error."""
    try:
        return _loads(text)
    except json.JSONDecodeError as error:
        raise DocumentError(
            f"invalid JSON document: {error.msg} at line {error.lineno} column {error.colno}", error.lineno
        ) from error
    except ValueError as error:
        raise DocumentError(f"invalid JSON document: {error}") from error


def compact_json(value: object) -> str:
    """Deterministic compact JSON text (sorted keys) for *_json columns."""
    try:
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    except RecursionError:
        raise RecordError("value nested too deeply to write as JSON") from None


_JSON_TYPE_NAMES: dict[type, str] = {
    str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array",
}


def json_type(value: object) -> str:
    return "null" if value is None else _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _is_kind(value: object, kind: str) -> bool:
    match kind:
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
    raise ValueError(f"unknown JSON kind {kind!r}")


def get(obj: Mapping[str, object], key: str, kind: str, *, required: bool = False, where: str = "") -> Any:
    """obj[key] checked against a JSON kind (string, integer, number, boolean, object, array).

    A null value counts as absent. Returns None for an absent optional field.
    """
    name = f"{where}{key}"
    value = obj.get(key)
    if value is None:
        if required:
            raise RecordError(f"field '{name}' is {'null' if key in obj else 'missing'}")
        return None
    if not _is_kind(value, kind):
        raise RecordError(f"field '{name}' is {json_type(value)}, expected {kind}")
    if kind == "string" and required and not value.strip():
        raise RecordError(f"field '{name}' is empty")
    if kind == "number" and isinstance(value, int) and not -(2**1023) < value < 2**1023:  # float() would overflow
        raise RecordError(f"field '{name}' is {str(value)[:40]}..., out of range for a number")
    return value


def get_str(obj: Mapping[str, object], key: str, *, required: bool = False, where: str = "") -> str | None:
    return get(obj, key, "string", required=required, where=where)


def get_int(
    obj: Mapping[str, object],
    key: str,
    *,
    required: bool = False,
    where: str = "",
    minimum: int | None = None,
    bits: int = 32,
) -> int | None:
    """An integer field that fits the column (INTEGER is 32-bit, BIGINT 64-bit) and is >= minimum."""
    value: int | None = get(obj, key, "integer", required=required, where=where)
    if value is None:
        return None
    check_int(value, f"{where}{key}", minimum=minimum, bits=bits)
    return value


def check_int(value: int, name: str, *, minimum: int | None = None, bits: int = 32) -> int:
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise RecordError(f"field '{name}' is {value}, out of range for a {bits}-bit integer")
    if minimum is not None and value < minimum:
        raise RecordError(f"field '{name}' is {value}, expected at least {minimum}")
    return value


def get_enum(
    obj: Mapping[str, object], key: str, allowed: tuple[str, ...], *, required: bool = False, where: str = ""
) -> str | None:
    value = get_str(obj, key, required=required, where=where)
    if value is not None and value not in allowed:
        raise RecordError(f"field '{where}{key}' is {value!r}, expected one of {', '.join(allowed)}")
    return value


_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def parse_rfc3339(text: str, name: str) -> datetime:
    """RFC 3339 time with a zone designator → naive UTC datetime (microseconds; extra digits cut)."""
    if not _RFC3339.fullmatch(text):
        raise RecordError(f"field '{name}' is {text!r}, expected an RFC 3339 time with Z or an offset")
    try:
        return datetime.fromisoformat(text).astimezone(UTC).replace(tzinfo=None)
    except (ValueError, OverflowError) as error:  # OverflowError: year 1 or 9999 moved out of range by the offset
        raise RecordError(f"field '{name}' is {text!r}: {error}") from error


# The times a record can plausibly carry (naive UTC, [earliest, latest)): before the first of these
# systems or past this century is a wrong clock or a forged record, and loading it would open a day
# partition in year 1 or 9999 (sources that check: Kubernetes audit events, sacctmgr transactions,
# Kueue objects).
EARLIEST_PLAUSIBLE_TIME = datetime(2000, 1, 1)
LATEST_PLAUSIBLE_TIME = datetime(2100, 1, 1)


def plausible_time(value: datetime, name: str) -> datetime:
    """value, or a RecordError when it lies outside [EARLIEST_PLAUSIBLE_TIME, LATEST_PLAUSIBLE_TIME)."""
    if not EARLIEST_PLAUSIBLE_TIME <= value < LATEST_PLAUSIBLE_TIME:
        raise RecordError(
            f"field '{name}' is {value.isoformat()}Z, outside the plausible times {EARLIEST_PLAUSIBLE_TIME:%Y-%m-%d} "
            f"to {LATEST_PLAUSIBLE_TIME:%Y-%m-%d}: check the clock of what wrote it"
        )
    return value


def get_time(obj: Mapping[str, object], key: str, *, required: bool = False, where: str = "") -> datetime | None:
    text = get_str(obj, key, required=required, where=where)
    return None if text is None else parse_rfc3339(text, f"{where}{key}")


class Columns:
    """Column lists for one table, filled record by record and turned into one frame at the end."""

    def __init__(self, schema: pl.Schema) -> None:
        self.schema = schema
        self.data: dict[str, list[object]] = {name: [] for name in schema}

    def append(self, **values: object) -> None:
        unknown = values.keys() - self.data.keys()
        if unknown:
            raise TypeError(f"columns not in the table: {sorted(unknown)}")
        for name, column in self.data.items():
            column.append(values.get(name))

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.data, schema=self.schema)


def parse_record_lines(data: bytes | str, source_file: str, source: str, table: str, schema: pl.Schema,
                       to_row: Callable[[JsonRecord], dict]) -> ParseResult:
    """JSON Lines of one record kind into one table: each line through `to_row`; a line that is not
    JSON, or whose fields `to_row` rejects with a RecordError, is quarantined with the reason."""
    rejects = Rejects()
    records = read_json_lines(data, rejects)
    read = len(records) + len(rejects)
    rows = Columns(schema)
    for record in records:
        try:
            row = to_row(record)
        except RecordError as error:
            rejects.add(record.line_number, str(error), record.raw)
            continue
        rows.append(**row, source_file=source_file)
    return ParseResult(tables={table: rows.frame()}, quarantine=rejects.frame(source, source_file),
                       records_read=read, records_loaded=read - len(rejects))
