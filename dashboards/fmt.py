"""Values as a reader reads them, in the page's language (issue 33): a duration as "7 min 33 s", a share as
"12.5 %", GPU-hours, US dollars, bytes, a yes/no as ✓ / –, a missing value as – (never "None" or "nan").
Pure: no Streamlit, so the rules are tested on their own (tests/dashboards/test_fmt.py); dashboards/ui.py
applies them to every table and headline tile.

A column's unit is the catalog's (`unit` of its metrics.catalog entry) where it has one, else read from
its name the way the models name units (`_s`, `_min`, `_h`, `_pct`, `_gpu_hours`, `_usd`, `_mib`,
`_bytes`, `_bytes_per_s`, `is_`/`has_`; pipelines' naming conventions), else from its type."""
from __future__ import annotations

import datetime as dt
import json
import math

MISSING = "–"
YES, NO = "✓", "–"

# catalog units that are counts of things: whole numbers, the thing named by the column's label
COUNT_UNITS = {"gpus", "records", "jobs", "attempts", "actions", "windows", "recommendations", "hosts", "gaps",
               "findings", "faults", "count", "rows", "steps"}
# a column's unit from its name, first match wins (suffixes); prefixes below
SUFFIX_UNITS = (
    ("_gpu_hours_per_week", "gpu_hours per week"), ("_gpus_per_week", "gpus per week"),
    ("_gpu_hours", "gpu_hours"), ("_gpu_h", "gpu_hours"), ("_usd", "usd"), ("_pct", "percent"),
    ("_bytes_per_s", "bytes per second"), ("_mb_per_s", "megabytes per second"), ("_bytes", "bytes"),
    ("_mib", "mib"), ("_gib", "gib"), ("_kwh", "kwh"),
    ("_seconds", "seconds"), ("_s", "seconds"), ("_minutes", "minutes"), ("_min", "minutes"),
    ("_hours", "hours"), ("_h", "hours"), ("_days", "days"), ("_at", "timestamp"), ("_gpus", "gpus"),
    ("_share", "fraction"), ("_r2", "ratio"),
)
FLAG_PREFIXES = ("is_", "has_")
MONTH_COLUMNS = {"month", "period_month"}

UNIT_WORDS = {
    "gpu_hours": {"en": "GPU-h", "zh": "GPU小时"},
    "gpu_hours per week": {"en": "GPU-h/week", "zh": "GPU小时/周"},
    "gpus per week": {"en": "GPUs/week", "zh": "GPU/周"},
}
DURATION_WORDS = {"en": ("d", "h", "min", "s"), "zh": ("天", "小时", "分", "秒")}
# the units' names in a tile's help text ("Unit: GPU-hours")
UNIT_NAMES = {
    "percent": {"en": "%", "zh": "%"},
    "gpu_hours": {"en": "GPU-hours", "zh": "GPU小时"},
    "usd": {"en": "US dollars", "zh": "美元"},
    "seconds": {"en": "time (d h min s)", "zh": "时长（天/小时/分/秒）"},
    "minutes": {"en": "time (d h min s)", "zh": "时长（天/小时/分/秒）"},
    "hours": {"en": "time (d h min s)", "zh": "时长（天/小时/分/秒）"},
    "gpus": {"en": "GPUs", "zh": "GPU数"},
}


def unit_of(column: str, catalog_unit: str | None = None, dtype: str | None = None) -> str | None:
    """A column's unit: the catalog's, else from its name, else from its type (`dtype`: a Polars type's
    name such as "Boolean", "Datetime", "Date"); None for text and plain numbers."""
    if catalog_unit:
        return "flag" if catalog_unit == "flag" else catalog_unit
    if dtype == "Boolean" or column.startswith(FLAG_PREFIXES):
        return "flag"
    if column in MONTH_COLUMNS:
        return "month"
    for suffix, unit in SUFFIX_UNITS:
        if column.endswith(suffix):
            return unit
    if dtype and dtype.startswith("Datetime"):
        return "timestamp"
    if dtype == "Date":
        return "date"
    return None


def number(value: float, decimals: int = 1) -> str:
    """1,234.5; a whole number without decimals; a very small one with its first figures (0.0042)."""
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if value != 0 and abs(value) < 10 ** -decimals:
        return f"{value:.2g}"
    return f"{value:,.{decimals}f}"


def duration(seconds: float, lang: str = "en") -> str:
    """'45 s', '7 min 33 s', '2 h 5 min', '3 d 4 h' (Chinese: '45秒', '7分33秒', '2小时5分', '3天4小时')."""
    d, h, m, s = DURATION_WORDS.get(lang, DURATION_WORDS["en"])
    sep = "" if lang == "zh" else " "
    sign = "-" if seconds < 0 else ""
    total = round(abs(seconds))
    minutes, secs = divmod(total, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        parts = [(days, d), (hours, h)]
    elif hours:
        parts = [(hours, h), (minutes, m)]
    elif minutes:
        parts = [(minutes, m), (secs, s)]
    else:
        parts = [(secs, s)]
    shown = [parts[0]] + [p for p in parts[1:] if p[0]]
    return sign + (" " if lang != "zh" else "").join(f"{n}{sep}{word}" for n, word in shown)


def nbytes(value: float, binary: bool = True) -> str:
    """1.5 GiB (binary) or 12.3 MB (decimal)."""
    base, names = (1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB")) if binary else \
        (1000, ("B", "kB", "MB", "GB", "TB", "PB"))
    size, i = float(value), 0
    while abs(size) >= base and i < len(names) - 1:
        size, i = size / base, i + 1
    return f"{size:,.0f} {names[i]}" if i == 0 else f"{size:,.1f} {names[i]}"


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def value(v, unit: str | None = None, lang: str = "en") -> str:
    """One value as text by its unit in `lang`; a missing value (None, NaN) as –."""
    if _missing(v):
        return MISSING
    if unit == "flag" or isinstance(v, bool):
        return YES if v else NO
    if isinstance(v, dt.datetime):
        return {"month": f"{v:%Y-%m}", "date": f"{v:%Y-%m-%d}", "timestamp_s": f"{v:%Y-%m-%d %H:%M:%S}"}.get(
            unit or "", f"{v:%Y-%m-%d %H:%M}")
    if isinstance(v, dt.date):
        return f"{v:%Y-%m}" if unit == "month" else f"{v:%Y-%m-%d}"
    if isinstance(v, dt.timedelta):
        return duration(v.total_seconds(), lang)
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x, None, lang) for x in v) or MISSING
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False, default=str)
    if not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if unit == "seconds":
        return duration(v, lang)
    if unit == "minutes":
        return duration(v * 60, lang)
    if unit == "hours":
        return duration(v * 3600, lang)
    if unit == "days":
        return duration(v * 86400, lang)
    if unit == "percent":
        return f"{number(v)}{'%' if lang == 'zh' else ' %'}"
    if unit == "fraction":  # a share 0-1, read as a percentage
        return value(v * 100, "percent", lang)
    if unit == "usd":
        return f"{'-' if v < 0 else ''}${abs(v):,.2f}"
    if unit in UNIT_WORDS:
        return f"{number(v)} {UNIT_WORDS[unit].get(lang, UNIT_WORDS[unit]['en'])}"
    if unit == "bytes":
        return nbytes(v)
    if unit == "mib":
        return nbytes(v * 2**20)
    if unit == "gib":
        return nbytes(v * 2**30)
    if unit == "bytes per second":
        return f"{nbytes(v, binary=False)}/s"
    if unit == "megabytes per second":
        return f"{number(v)} MB/s"
    if unit == "kwh":
        return f"{number(v)} kWh"
    if unit in COUNT_UNITS:
        return number(v)
    return number(v, 2)


def headline(v, unit: str | None = None, lang: str = "en") -> str:
    """A headline tile's figure: short enough for a sixth of a wide page. Counts and GPU-hours without a
    unit word (the unit is in the tile's help) and without decimals from 1,000 up; %, durations and USD
    keep their short sign."""
    if _missing(v):
        return MISSING
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if unit in ("seconds", "minutes", "hours", "days", "percent"):
            return value(v, unit, lang)
        if unit == "usd":
            return f"{'-' if v < 0 else ''}${abs(v):,.0f}" if abs(v) >= 1000 else value(v, unit, lang)
        if unit in ("bytes", "mib", "gib", "bytes per second", "kwh"):
            return value(v, unit, lang)
        return f"{v:,.0f}" if abs(v) >= 1000 else number(v)
    return value(v, unit, lang)


def unit_name(unit: str | None, lang: str = "en") -> str | None:
    """The unit's name for a tile's help ("GPU-hours"); None when there is nothing to say."""
    if not unit or unit == "flag":
        return None
    words = UNIT_NAMES.get(unit)
    return words.get(lang, words["en"]) if words else unit.replace("_", " ")


PLURALS = {
    "node": "nodes", "GPU": "GPUs", "job": "jobs", "day": "days", "hour": "hours", "host": "hosts",
    "attempt": "attempts", "tenant": "tenants", "queue": "queues", "record": "records", "row": "rows",
}


def count(n: int, noun: str, lang: str = "en", zh_noun: str | None = None) -> str:
    """'1 node', '2 nodes' (English: singular for exactly one; PLURALS, else noun + s); Chinese has no
    plural form: '2 个节点' is written with the same noun whatever n ('zh_noun')."""
    if lang == "zh":
        return f"{n:,} {zh_noun or noun}"
    return f"{n:,} {noun if n == 1 else PLURALS.get(noun, noun + 's')}"


# a capacity advice's quantity units (pipelines/capacity/recommend.py): singular, plural, Chinese
QUANTITY_UNITS = {
    "nodes": ("node", "nodes", "个节点"), "GPUs": ("GPU", "GPUs", "块GPU"),
    "quota GPUs": ("quota GPU", "quota GPUs", "块配额GPU"), "jobs": ("job", "jobs", "个作业"),
    "GPU-hours": ("GPU-hour", "GPU-hours", "GPU小时"), "hours": ("hour", "hours", "小时"),
}


def quantity(n: float, unit: str, lang: str = "en") -> str:
    """An advice's quantity with its unit, plural right: '1 node', '2 nodes', '2 个节点' (no plural in Chinese)."""
    one, many, zh = QUANTITY_UNITS.get(unit, (unit, unit, unit))
    shown = number(round(n, 1))
    if lang == "zh":
        return f"{shown} {zh}"
    return f"{shown} {one if n == 1 else many}"
