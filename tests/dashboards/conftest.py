"""Dashboard tests: the app in Streamlit's AppTest against a small built warehouse, signed in as an
operator or a tenant member (users from GPUPOOL_DASHBOARD_USERS)."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboards.auth import hash_password
from pipelines.pack import store
from pipelines.paths import REPO_ROOT
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home

APP = str(REPO_ROOT / "dashboards" / "app.py")
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
            seen |= set(df["tenant"].dropna().unique())
    return seen


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
