"""Access and emptiness: an anonymous visitor sees the sign-in form and no data; a warehouse that
does not exist yet is a clear warning on every page, not an exception."""
from __future__ import annotations

import json

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboards.i18n import STRINGS
from tests.dashboards.conftest import APP, PASSWORD, USERS, errors, signed_in

PAGES = ["pool", "queues", "tenants"]


def data_shown(at) -> int:
    return len(at.dataframe) + len(at.metric) + len(at.get("vega_lite_chart"))


def test_anonymous_sees_only_the_sign_in_form(dashboard_env):
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert at.title[0].value == STRINGS["app_title"]["en"]
    assert [t.label for t in at.text_input] == [STRINGS["user"]["en"], STRINGS["password"]["en"]]
    assert data_shown(at) == 0


@pytest.mark.parametrize("page", PAGES)
def test_anonymous_cannot_open_a_page(dashboard_env, page):
    """A page opened without a session user (a shared link) draws nothing but the sign-in form."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(f"views/{page}.py")
    at.run()
    assert not at.exception
    assert data_shown(at) == 0
    assert [t.label for t in at.text_input] == [STRINGS["user"]["en"], STRINGS["password"]["en"]]


def test_wrong_password_then_sign_in(dashboard_env):
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.text_input[0].input("ops")
    at.text_input[1].input("not-it")
    at.button[0].click().run()
    assert STRINGS["bad_login"]["en"] in [e.value for e in at.error]
    assert data_shown(at) == 0
    at.text_input[0].input("ops")
    at.text_input[1].input(PASSWORD)
    at.button[0].click().run()
    assert at.session_state["gpupool_user"] == "ops"
    assert len(at.text_input) == 0


def test_no_users_configured_says_how(dashboard_env, monkeypatch):
    monkeypatch.delenv("GPUPOOL_DASHBOARD_USERS")
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert STRINGS["no_users"]["en"] in [w.value for w in at.warning]
    assert data_shown(at) == 0


@pytest.mark.parametrize("page", PAGES)
def test_empty_warehouse_is_a_warning(monkeypatch, tmp_path, page):
    monkeypatch.setenv("GPUPOOL_HOME", str(tmp_path))  # no warehouse.duckdb there
    monkeypatch.setenv("GPUPOOL_DASHBOARD_USERS", json.dumps(USERS))
    st.cache_data.clear()  # a clean slate: nothing cached from the other tests
    at = signed_in("ops", page)
    assert errors(at) == []
    warnings = [w.value for w in at.warning]
    assert any(STRINGS["no_warehouse"]["en"] in w and "gpupool demo" in w for w in warnings), warnings
    assert data_shown(at) == 0
    st.cache_data.clear()
