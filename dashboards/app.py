"""The entry file: language, sign-in, the data's "as of" line and navigation only; each page lives in dashboards/views/
(not pages/: a folder of that name switches Streamlit to its file-based navigation).

    streamlit run dashboards/app.py     (or `gpupool dashboard`)
"""
from __future__ import annotations

import streamlit as st

from dashboards.auth import (
    UsersError,
    configured_users,
    current_user,
    sign_in,
    sign_out,
    sso_configured,
    write_cookie,
)
from dashboards.i18n import LANGUAGES, lang, t
from dashboards.ui import data_as_of

st.set_page_config(page_title="gpupool", page_icon=":material/grid_view:", layout="wide")

choice = st.sidebar.selectbox(t("language"), list(LANGUAGES), index=list(LANGUAGES).index(lang()),
                              format_func=LANGUAGES.get, key="lang_choice")
if choice != lang():
    st.query_params["lang"] = choice
    st.rerun()

try:
    users = configured_users()
except UsersError as exc:
    st.error(f"{exc} (docs/dashboards.md)")
    st.stop()

PAGES = [
    ("views/pool.py", "page_pool", ":material/grid_view:"),
    ("views/queues.py", "page_queues", ":material/hourglass_top:"),
    ("views/tenants.py", "page_tenants", ":material/groups:"),
    ("views/idle.py", "page_idle", ":material/bedtime:"),
    ("views/jobs.py", "page_jobs", ":material/work:"),
    ("views/health.py", "page_health", ":material/health_and_safety:"),
    ("views/capacity.py", "page_capacity", ":material/trending_up:"),
    ("views/quality.py", "page_quality", ":material/verified:"),
    ("views/audit.py", "page_audit", ":material/policy:"),
    ("views/catalog.py", "page_catalog", ":material/menu_book:"),
    ("views/packs.py", "page_packs", ":material/picture_as_pdf:"),
]
try:
    user = current_user()  # this session's sign-in, else the signed session cookie of a reload or a new tab
except UsersError as exc:
    st.error(f"{exc} (docs/dashboards.md)")
    st.stop()
with st.sidebar:
    write_cookie()  # set after a sign-in, deleted after a sign-out
# declared before the sign-in form, so that a shared link's page is the one shown after signing in
navigation = st.navigation([st.Page(path, title=t(key), icon=icon, url_path=key.removeprefix("page_"))
                            for path, key, icon in PAGES],
                           position="sidebar" if user else "hidden")
if user is None:
    st.title(t("app_title"))
    if not users:
        st.warning(t("no_users"))
        st.stop()
    if sso_configured() and st.button(t("sign_in_sso")):
        st.login()
    with st.form("sign_in"):
        name = st.text_input(t("user"))
        password = st.text_input(t("password"), type="password")
        if st.form_submit_button(t("sign_in")):
            if sign_in(name, password):
                st.rerun()
            st.error(t("bad_login"))
    st.stop()

st.sidebar.caption(f"{t('signed_in_as')} **{user.name}** · "
                   + (t("operator_scope") if user.is_operator else t("tenant_scope", tenant=user.tenant)))
if st.sidebar.button(t("sign_out")):
    sign_out()
    st.rerun()
data_as_of()

navigation.run()
