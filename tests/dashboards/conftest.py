"""Dashboard tests: the app in Streamlit's AppTest against a small built warehouse, signed in as an
operator or a tenant member (users from GPUPOOL_DASHBOARD_USERS)."""
from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
import streamlit as st
from streamlit import config as streamlit_config
from streamlit.testing.v1 import AppTest

from dashboards import fmt
from dashboards.auth import hash_password
from pipelines.cli.dashboard import STREAMLIT_OPTIONS
from pipelines.pack import store
from pipelines.paths import REPO_ROOT
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home

APP = str(REPO_ROOT / "dashboards" / "app.py")
for option, value in STREAMLIT_OPTIONS.items():  # AppTest runs the app as `gpupool dashboard` serves it
    streamlit_config.set_option(option, value)
PASSWORD = "pool-secret"
USERS = [
    {"name": "ops", "role": "operator", "password_hash": hash_password(PASSWORD, "00ff00ff00ff00ff")},
    {"name": "vic", "role": "tenant_member", "tenant": "vision", "password_hash": hash_password(PASSWORD, "0011223344556677")},
]


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory, advised_demo_home) -> Path:
    """A copy of the small demo month (3 days, 64 GPUs) with its capacity advice (no replay)."""
    return copy_home(advised_demo_home, tmp_path_factory.mktemp("dash") / "gpupool")


@pytest.fixture
def dashboard_env(monkeypatch, demo_home):
    monkeypatch.setenv("GPUPOOL_HOME", str(demo_home))
    monkeypatch.setenv("GPUPOOL_DASHBOARD_USERS", json.dumps(USERS))
    return demo_home


def signed_in(name: str, page: str | None = None, **params: str) -> AppTest:
    """The app signed in as `name`, on `page` (a dashboards/views file stem), with URL parameters."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["gpupool_user"] = name
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    if page is not None:
        at.switch_page(f"views/{page}.py")
        at.run()
    return at


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error] + [str(x.value) for x in at.exception]


@pytest.fixture
def fresh_cache():
    """Cached queries cleared before and after a test that changes what a warehouse holds."""
    st.cache_data.clear()
    yield
    st.cache_data.clear()


def frames(at: AppTest) -> list:
    return [d.value for d in at.dataframe]


def tenants_shown(at: AppTest) -> set[str]:
    """Every tenant named in the page's tables."""
    seen: set[str] = set()
    for df in frames(at):
        if "tenant" in df.columns:
            seen |= set(df["tenant"].dropna().unique()) - {fmt.MISSING}
    return seen


def labels(element) -> dict[str, str]:
    """A table's headings as the page shows them (its column_config's labels), by column key."""
    config = json.loads(element.proto.columns) if element.proto.columns else {}
    return {key: c["label"] for key, c in config.items() if c.get("label")}


def labelled(element):
    """A table's frame with its headings as shown (ui.show_table keeps the keys and labels the columns)."""
    return element.value.rename(columns=labels(element))


DURATION = re.compile(r"^(?:(\d+) d)? ?(?:(\d+) h)? ?(?:(\d+) min)? ?(?:(\d+) s)?$")


def shown_number(text: str) -> float | None:
    """A figure as a table or tile shows it (dashboards/fmt.py), read back: a duration in seconds ("2 h 5 min"),
    "12.5 %", "$1,234.56", "1,234.5 GPU-h", "1,234"; None for "–"."""
    if text == fmt.MISSING:
        return None
    match = DURATION.match(text)
    if match and any(match.groups()):
        d, h, m, s = (int(g or 0) for g in match.groups())
        return ((d * 24 + h) * 60 + m) * 60 + s
    return float(re.sub(r"[^0-9.\-]", "", text.removesuffix(" GPU-h")))


def shown_numbers(column) -> list[float | None]:
    return [shown_number(v) for v in column]


def shown_day(text: str) -> dt.date:
    """The day of a shown timestamp or date ("2026-11-02 14:03")."""
    return dt.date.fromisoformat(text[:10])


def add_tenant_pack(home: Path, month: dt.date, tenant: str, pdf: bytes, html: bytes) -> Path:
    """Record a tenant's pack in ops.review_packs with the given files (their contents are the pack
    builder's business, tests/pack/); returns its PDF."""
    out = store.new_version_dir(home, month, "en", tenant)
    (out / "pack.pdf").write_bytes(pdf)
    (out / "pack.html").write_bytes(html)
    store.record_pack(Warehouse(home), store.PackRecord(
        month=month, version=out.name, lang="en", catalog_version="test", built_at=dt.datetime(2026, 12, 1, 6),
        html_path=str(out.relative_to(home) / "pack.html"), pdf_path=str(out.relative_to(home) / "pack.pdf"),
        build_seconds=0.1, release_id=1, tenant=tenant))
    return out / "pack.pdf"
