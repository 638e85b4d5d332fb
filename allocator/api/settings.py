"""What `allocator.service.create_app` configures, in one object (`app.state.settings`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from allocator.auth import TokenTable
from allocator.telemetry import ActivityProfile


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class Settings:
    tokens: TokenTable  # who may call, with which role and tenant
    clock: Callable[[], dt.datetime] = utcnow  # the engine's `now`, tz-naive UTC
    tick_interval_s: float | None = 1.0  # the background timer's period; None: off (tests tick by hand)
    profiles: Mapping[str, ActivityProfile] | None = None  # node metrics' activity per job id
