"""Time as the project keeps it: every timestamp is naive UTC (DuckDB `timestamp`, Polars `Datetime`
without a zone). The allocator, which never imports the pipeline, keeps its own (allocator.service.utcnow)."""
from __future__ import annotations

import datetime as dt


def utc_naive(moment: dt.datetime | None = None) -> dt.datetime:
    """`moment` (default: now) in UTC without its zone; a naive moment is taken to be UTC already."""
    moment = moment or dt.datetime.now(dt.UTC)
    return moment.astimezone(dt.UTC).replace(tzinfo=None) if moment.tzinfo else moment
