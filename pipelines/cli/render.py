"""The one table renderer of the CLI (issue 33): `gpupool sql`'s results and every table a command prints
(`sources`, `releases`, `export`, the capacity curve) go through `table()`.

A table fits the terminal: the width is $COLUMNS, else the terminal's, else 80. Numbers, dates and
booleans are never cut; text is cut with an ellipsis; columns that do not fit at a readable width
are left out and named under the table. Each value is formatted by its column's unit: the catalog's
unit where the column carries a catalog metric (models/catalog/*.yml, e.g. `allocation_rate_pct`:
percent, `queue_wait_p95_s`: seconds), else the unit its name says (`_pct`, `_s`, `_gpu_hours`,
`_usd`, `_bytes`), else by its type (floats rounded to the decimals the column needs, thousands
separators). NULL is shown as `–`, never `None`; a timestamp stays on one line.

rich draws the table; the widths are computed here and each cell is cut to its width before rich sees
it, so that what is shown does not depend on rich's own shrinking.
"""
from __future__ import annotations

import datetime as dt
import io
import json
import math
import shutil
import textwrap
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache

import polars as pl
from rich import box
from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

NULL = "–"  # how a NULL reads in a table (markdown too); never "None"
MAX_TEXT = 60  # a text column is never wider than this: longer values end in an ellipsis
MIN_TEXT = 8  # nor narrower than this (or its widest value), so that what is shown can be read
MIN_HEADER = 32  # a header is cut only past this width (then with an ellipsis); with wrap, it wraps
GAP = 3  # characters between two columns (rich's padding and the box's separator); 2 without a box
ELLIPSIS = "…"

# The unit a column's name says, for columns that carry no catalog metric (the models' naming rules:
# "units in names where ambiguous").
SUFFIX_UNITS = (("_pct", "percent"), ("_seconds", "seconds"), ("_s", "seconds"), ("_gpu_hours", "gpu_hours"),
                ("_usd", "usd"), ("_bytes_per_s", "bytes per second"), ("_bytes", "bytes"), ("_mib", "mib"),
                ("_gib", "gib"), ("_hours", "hours"), ("_kwh", "kwh"))
# integer columns that are names rather than amounts: no thousands separator
_ID_NAMES = ("id", "year", "pid", "port", "gpu", "rank", "index", "release")


def terminal_width() -> int:
    """$COLUMNS, else the terminal's width, else 80."""
    return max(20, shutil.get_terminal_size((80, 24)).columns)


@lru_cache(maxsize=1)
def catalog_units() -> dict[str, str]:
    """Column name -> the catalog's unit, for every column that carries a catalog metric (one unit per name;
    a name two metrics give different units is left out). Empty when the catalog cannot be read."""
    from pipelines.catalog import CatalogError, load_catalog

    try:
        catalog = load_catalog()
    except (CatalogError, OSError):
        return {}
    units: dict[str, set[str]] = {}
    for metric in catalog.metrics:
        for _view, column in metric.locations:
            units.setdefault(column, set()).add(metric.unit)
    return {column: next(iter(found)) for column, found in units.items() if len(found) == 1}


def column_unit(column: str) -> str:
    """The unit of a column: the catalog's, else its name's suffix, else ""."""
    unit = catalog_units().get(column)
    if unit:
        return unit
    return next((unit for suffix, unit in SUFFIX_UNITS if column.endswith(suffix)), "")


# -- values -------------------------------------------------------------------------------------------
def duration(seconds: float) -> str:
    """Seconds as a person reads them: "45.2 s", "7 min 34 s", "3 h 05 min", "2 d 03 h"."""
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    if s < 60:
        return f"{sign}{s:.1f} s" if s < 10 and not float(s).is_integer() else f"{sign}{s:.0f} s"
    if s < 3600:
        minutes, rest = divmod(round(s), 60)
        return f"{sign}{minutes} min {rest:02d} s"
    if s < 86400:
        hours, minutes = divmod(round(s / 60), 60)
        return f"{sign}{hours} h {minutes:02d} min"
    days, hours = divmod(round(s / 3600), 24)
    return f"{sign}{days:,} d {hours:02d} h"


def size(n: float, per: str = "") -> str:
    """Bytes in binary units: "512 B", "1.5 KiB", "3.2 GiB" (per: "/s" for a rate)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:,.0f} {unit}{per}" if unit == "B" else f"{value:,.1f} {unit}{per}"
        value /= 1024
    raise AssertionError("unreachable")


def _number(v: object, integral: bool) -> float | int:
    """An int for a column of whole numbers (integers, decimals of scale 0), else a float."""
    if isinstance(v, Decimal):
        return int(v) if integral else float(v)
    return v  # type: ignore[return-value]


def _decimals(values: pl.Series) -> int:
    """The decimals a column of floats needs: none for whole numbers, 1 from 100, 2 from 1, else enough
    for 3 significant digits of its largest value (at most 6)."""
    finite = values.cast(pl.Float64, strict=False).drop_nulls()
    finite = finite.filter(finite.is_finite())
    if finite.is_empty() or (finite == finite.round(0)).all():
        return 0
    largest = float(finite.abs().max())  # type: ignore[arg-type]
    if largest >= 100:
        return 1
    if largest >= 1 or largest == 0:
        return 2
    return min(6, 2 - math.floor(math.log10(largest)))


def _is_id(column: str) -> bool:
    name = column.lower()
    return name in _ID_NAMES or name.endswith(("_id", "_year"))


def formatter(series: pl.Series, unit: str | None = None) -> Callable[[object], str]:
    """How each value of `series` reads (NULL is handled by the caller). unit: default column_unit(name)."""
    dtype = series.dtype
    unit = column_unit(series.name) if unit is None else unit
    if dtype == pl.Boolean:
        return lambda v: "true" if v else "false"
    if dtype.is_numeric():
        return _number_formatter(series, unit)
    if dtype == pl.Datetime:
        return _timestamp
    if dtype in (pl.Date, pl.Time):
        return lambda v: v.isoformat()  # type: ignore[attr-defined]
    if dtype == pl.Duration:
        return lambda v: duration(v.total_seconds())  # type: ignore[attr-defined]
    if dtype == pl.String or dtype == pl.Categorical or dtype == pl.Enum:
        return _text
    if dtype == pl.Binary:
        return lambda v: "0x" + bytes(v).hex()  # type: ignore[arg-type]
    return lambda v: json.dumps(v, ensure_ascii=False, default=str)  # lists, structs: one line of JSON


def _timestamp(v: object) -> str:
    assert isinstance(v, dt.datetime)
    return v.isoformat(sep=" ", timespec="seconds")  # to the second: csv and json keep the fractions


def _text(v: object) -> str:
    return str(v).replace("\r\n", "↵").replace("\n", "↵").replace("\r", "↵").replace("\t", " ")


def _number_formatter(series: pl.Series, unit: str) -> Callable[[object], str]:
    integral = series.dtype.is_integer() or (series.dtype == pl.Decimal and getattr(series.dtype, "scale", 1) == 0)
    if series.dtype == pl.Decimal and not integral:  # the decimals a column needs are those of its floats
        series = series.cast(pl.Float64)
    places = _decimals(series)

    def plain(v: object) -> str:  # no unit: the decimals the column needs, thousands separators but in ids
        n = _number(v, integral)
        if isinstance(n, float):
            return f"{n:,.{places}f}" if math.isfinite(n) else str(n)
        return str(n) if _is_id(series.name) else f"{n:,}"

    def by_unit(v: object) -> str:
        n = _number(v, integral)
        if isinstance(n, float) and not math.isfinite(n):
            return str(n)
        if unit == "percent":
            return f"{n:,.1f}%"
        if unit == "seconds":
            return duration(float(n))
        if unit == "usd":
            return ("-" if n < 0 else "") + f"${abs(n):,.2f}"
        if unit == "bytes":
            return size(n)
        if unit == "bytes per second":
            return size(n, "/s")
        if unit == "mib":
            return size(float(n) * 2**20)
        if unit == "gib":
            return size(float(n) * 2**30)
        if isinstance(n, float):  # GPU-hours, hours, GPUs, kWh, counts: one decimal
            return f"{n:,.1f}"
        return f"{n:,}"

    if not unit or unit == "flag":
        return plain
    return by_unit


def cells(frame: pl.DataFrame, units: Mapping[str, str] | None = None) -> list[list[str | None]]:
    """The frame's values as text, column by column (None for NULL)."""
    out = []
    for series in frame.get_columns():
        show = formatter(series, (units or {}).get(series.name))
        out.append([None if v is None else show(v) for v in series.to_list()])
    return out


def _right(dtype: pl.DataType) -> bool:
    return dtype.is_numeric()


def _justify(justify: str | Sequence[str] | None, i: int, dtype: pl.DataType) -> JustifyMethod:
    if justify is None:
        return "right" if _right(dtype) else "left"
    return (justify if isinstance(justify, str) else justify[i])  # type: ignore[return-value]


def _cut(text: str, width: int) -> str:
    if cell_len(text) <= width:
        return text
    shown = Text(text)
    shown.truncate(width, overflow="ellipsis")
    return shown.plain


# -- the table ----------------------------------------------------------------------------------------
def fit(headers: Sequence[str], columns: Sequence[Sequence[str | None]], cuttable: Sequence[bool],
        width: int, wrap: bool = False, gap: int = GAP) -> list[int]:
    """Each shown column's width: the first columns that fit at a readable width (a column that can be cut:
    MIN_TEXT or its widest value; others: their widest value, header included), the room left shared
    out to the columns that want more, up to MAX_TEXT for text (any width when text wraps)."""
    natural, floor = [], []
    for header, values, cut in zip(headers, columns, cuttable, strict=True):
        widest = max((cell_len(v) for v in values if v is not None), default=0)
        widest = max(widest, cell_len(NULL) if any(v is None for v in values) else 0)
        # a header needs its width, or with wrap its longest word (it wraps onto more lines)
        head = max((cell_len(w) for w in header.split()), default=0) if wrap else min(cell_len(header), MIN_HEADER)
        if cut:
            natural.append(max(widest if wrap else min(widest, MAX_TEXT), min(cell_len(header), MAX_TEXT), 1))
            words = max((cell_len(w) for v in values if v is not None for w in v.split()), default=0)
            floor.append(min(natural[-1], max(head, min(words, MIN_TEXT)) if wrap else max(MIN_TEXT, head)))
        else:
            natural.append(max(widest, min(cell_len(header), MAX_TEXT), 1))
            floor.append(max(widest, head, 1))
    shown: list[int] = []
    used = 0
    for i, w in enumerate(floor):
        need = w + (gap if shown else 0)
        if shown and used + need > width:
            break
        shown.append(i)
        used += need
    widths = [min(floor[i], width) for i in shown]
    spare = width - used
    while spare > 0:
        wanting = [k for k, i in enumerate(shown) if widths[k] < natural[i]]
        if not wanting:
            break
        share = spare if wrap else max(1, spare // len(wanting))  # wrapping: the first columns first
        for k in wanting:
            give = min(share, natural[shown[k]] - widths[k], spare)
            widths[k] += give
            spare -= give
            if spare <= 0:
                break
    return widths


def table(frame: pl.DataFrame, *, units: Mapping[str, str] | None = None, width: int | None = None,
          footer: str | None = None, color: bool = False, header_rule: bool = True, indent: int = 0,
          wrap: bool = False, headers: Sequence[str] | None = None, justify: str | Sequence[str] | None = None,
          hidden_hint: str | None = None) -> str:
    """The frame as a table that fits `width` (default: terminal_width()), with `footer` under it and, when
    columns were left out, a line naming them. `color`: ANSI styles (bold header, dim NULL and footer), for a
    terminal.
    `header_rule`: a line under the header; `indent`: spaces before each line; `wrap`: text wraps onto
    more lines instead of being cut (a command's listing); `headers`: shown instead of the column names;
    `justify`: "right" or "left" for every column, or one per column (default: numbers right, the rest
    left); `hidden_hint`: a
    line under the names of the columns left out, saying how to see them."""
    width = (width or terminal_width()) - indent
    headers = list(headers) if headers is not None else frame.columns
    values = cells(frame, units)
    cuttable = [not (s.dtype.is_numeric() or s.dtype.is_temporal() or s.dtype == pl.Boolean)
                for s in frame.get_columns()]
    widths = fit(headers, values, cuttable, width, wrap, GAP if header_rule else 2) if headers else []
    shown = len(widths)
    grid = Table(box=box.SIMPLE_HEAD if header_rule else None, show_edge=False, pad_edge=False,
                 header_style="bold" if color else "", show_header=True)
    for i, w in enumerate(widths):
        grid.add_column(headers[i] if wrap else _cut(headers[i], w), width=w, no_wrap=not wrap,
                        overflow="fold" if wrap else "ellipsis",
                        justify=_justify(justify, i, frame.dtypes[i]))
    for r in range(frame.height):
        grid.add_row(*(Text(NULL, style="dim" if color else "") if values[i][r] is None
                       else Text(values[i][r] if wrap and cuttable[i] else _cut(values[i][r], widths[i]))  # type: ignore[arg-type]
                       for i in range(shown)))
    lines = []
    pad = " " * indent
    if headers:
        console = Console(file=io.StringIO(), width=width, color_system="standard" if color else None,
                          force_terminal=color, markup=False, emoji=False, highlight=False, legacy_windows=False)
        console.print(grid)
        lines = [pad + line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]
    if shown < len(headers):
        hidden = headers[shown:]
        note = f"{len(hidden)} more column{'s' if len(hidden) > 1 else ''} not shown: {', '.join(hidden)}"
        for text in (note, hidden_hint or ""):
            lines.extend(pad + line for line in textwrap.wrap(text, width, break_on_hyphens=False))
    for line in (wrapped for part in (footer or "").splitlines()
                 for wrapped in textwrap.wrap(part, width, break_on_hyphens=False)):
        lines.append(pad + (f"\x1b[2m{line}\x1b[0m" if color else line))  # dim on a terminal
    return "\n".join(lines)


def rows(headers: Sequence[str], records: Sequence[Sequence[object]], **options: object) -> str:
    """`table()` of plain rows (a command's own listing): each column's type is taken from its values."""
    names = [f"c{i}" for i in range(len(headers))]  # headers may repeat or be empty
    frame = pl.DataFrame([list(r) for r in records], schema=names, orient="row", strict=False) \
        if records else pl.DataFrame(schema={name: pl.String for name in names})
    units = options.pop("units", None) or {}
    by_name = {names[headers.index(h)]: u for h, u in units.items() if h in headers}  # type: ignore[union-attr]
    return table(frame, headers=headers, units={n: by_name.get(n, "") for n in names}, **options)  # type: ignore[arg-type]


# -- markdown -----------------------------------------------------------------------------------------
def markdown(frame: pl.DataFrame, *, units: Mapping[str, str] | None = None) -> str:
    """The frame as a GitHub-flavoured Markdown table, values formatted as in `table()`, nothing cut."""
    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|")

    values = cells(frame, units)
    head = "| " + " | ".join(escape(h) for h in frame.columns) + " |"
    rule = "|" + "|".join("---:" if _right(t) else "---" for t in frame.dtypes) + "|"
    body = ["| " + " | ".join(NULL if values[i][r] is None else escape(values[i][r])  # type: ignore[arg-type]
                              for i in range(frame.width)) + " |" for r in range(frame.height)]
    return "\n".join([head, rule, *body])
