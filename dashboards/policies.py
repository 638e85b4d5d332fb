"""The governance exemptions (allow-list) as the dashboards show them.

Exemptions are configuration, not warehouse data: they live in models/policies/exemptions.yml (or
the file gpupool.yml's `governance.exemptions` names) and no pipeline step loads them into DuckDB,
so the Idle and reclaim page reads them through the policy catalog's own loader
(pipelines/policies/catalog.py `load_catalog().exemptions`, validated the same way the governance
tick reads them), cached like the warehouse queries. Nothing here computes a metric: the frame is
the file's entries with their expiry read against the clock.
"""
from __future__ import annotations

import datetime as dt

import polars as pl
import streamlit as st

from dashboards.data import TTL_S
from pipelines.config import ConfigError
from pipelines.policies.catalog import CatalogError, load_catalog

SCHEMA = {
    "tenant": pl.String, "policy": pl.String, "queue": pl.String, "job_id": pl.String, "reason": pl.String,
    "granted_by": pl.String, "expires_at": pl.Datetime("us"), "is_expired": pl.Boolean, "days_left": pl.Float64,
}


class ExemptionsUnreadable(RuntimeError):
    """The exemptions file (or gpupool.yml's governance section) does not validate; the message says
    where and why."""


@st.cache_data(ttl=TTL_S, show_spinner=False)
def exemptions(now: dt.datetime | None = None) -> pl.DataFrame:
    """Every exemption with its expiry (UTC) and, against `now` (default: the clock, UTC), whether it
    has expired and the days left; the latest expiry first."""
    try:
        entries = load_catalog().exemptions
    except (CatalogError, ConfigError) as exc:
        raise ExemptionsUnreadable(str(exc)) from None
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    rows = [{
        "tenant": e.tenant, "policy": e.policy, "queue": e.queue, "job_id": e.job_id, "reason": e.reason,
        "granted_by": e.granted_by, "expires_at": e.expires_at, "is_expired": e.expires_at <= now,
        "days_left": round(max((e.expires_at - now).total_seconds(), 0) / 86400, 1),
    } for e in entries]
    return pl.DataFrame(rows, schema=SCHEMA).sort("expires_at", descending=True)
