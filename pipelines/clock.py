"""Time as the project keeps it: every timestamp is naive UTC (DuckDB `timestamp`, Polars `Datetime`
without a zone). The allocator, which never imports the pipeline, keeps its own (allocator.service.utcnow)."""
from __future__ import annotations

import datetime as dt


def utc_naive(moment: dt.datetime | None = None) -> dt.datetime:
    """`moment` (default: now) in UTC without its zone; a naive moment is taken to be UTC already."""
    moment = moment or dt.datetime.now(dt.UTC)
    return moment.astimezone(dt.UTC).replace(tzinfo=None) if moment.tzinfo else moment


def parse_utc(text: str) -> dt.datetime:
    """An ISO 8601 time as an API writes it ('...Z', '...+02:00', or without a zone: UTC) as naive UTC.
    An offset is converted, not dropped: '10:00+02:00' is 08:00."""
    return utc_naive(dt.datetime.fromisoformat(str(text)))


def duration_text(seconds: float) -> str:
    """'45 s', '15 min', '2 h', '1 h 30 min', '3 d 4 h'."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h" + (f" {rest} min" if rest else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")
