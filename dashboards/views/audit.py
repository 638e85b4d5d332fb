"""Audit: permission and quota changes, approvals and enforcement, searchable by actor, action, object
and reason (the search and the category are kept in the URL: `?q=reclaim&category=enforcement`).
Reads metrics.audit_daily (operators: the pool's counts per day) and metrics.audit_events; a tenant
member sees only the records on their tenant's objects (object_namespace). The schedulers' own admin
changes (Slurm sacctmgr transactions; Kueue ClusterQueues and ResourceFlavors) have their own section."""
import json

import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.auth import tenant_scope
from dashboards.i18n import t

ROW_LIMIT = 1000
CATEGORIES = ("permission_change", "quota_change", "approval", "enforcement", "queue_change", "other_change",
              "read", "other")
COUNTS = ("permission_changes", "quota_changes", "approvals", "enforcement_actions", "denied_requests")
CHARTED = COUNTS[:-1]  # categories add up per day; denied requests cut across them
SHOWN = ["occurred_at", "source", "category", "action", "actor", "actor_role", "object_kind", "object_namespace",
         "object_name", "decision", "is_denied", "reason", "audit_id"]


def _category_words(frame: pl.DataFrame) -> pl.DataFrame:
    """The categories in the page's language (the view holds their keys)."""
    return frame.with_columns(pl.col("category").replace({c: t(f"cat_{c}") for c in CATEGORIES}))


def counts(f: filters.Filters) -> None:
    """The pool's audit counts per day (operators): metrics.audit_daily, additive per day."""
    where, params = f.clause(tenant=None)
    daily = data.view("audit_daily", where, params, order="day, source")
    if daily.is_empty():
        return
    cols = st.columns(len(COUNTS))
    for col, column in zip(cols, COUNTS, strict=True):
        ui.kpi(col, column, "audit_daily", int(daily[column].sum()))
    st.subheader(t("a_counts"))
    ui.definition("audit_records", "audit_daily")
    long = daily.unpivot(index=["day"], on=list(CHARTED), variable_name="what", value_name="records") \
        .with_columns(pl.col("what").replace({c: ui.metric_label(c, "audit_daily") for c in CHARTED}))
    ui.bars(long, "day:T", "records:Q", "what:N", t("a_records"), title=t("ch_audit"))


def records(user, f: filters.Filters, query: str, category: str | None) -> None:
    st.subheader(t("a_records"))
    where, params = f.clause(tenant=None)
    total, rows = data.audit_records(where, params, namespace=tenant_scope(user) or f.tenant, category=category,
                                     search=query, columns=[*SHOWN, "before_json", "after_json"], limit=ROW_LIMIT)
    if ui.empty(rows, t("a_no_records")):
        return
    st.caption(t("showing_rows", shown=rows.height, total=total) + " " + t("a_detail"))
    picked = ui.show_table(_category_words(rows.select(SHOWN)), "audit_events", key="a_table", on_select="rerun",
                           selection_mode="single-row")
    selected = picked.selection.rows if picked is not None and hasattr(picked, "selection") else []
    if selected:
        row = rows.row(selected[0], named=True)
        left, right = st.columns(2)
        for col, key, column in ((left, "a_before", "before_json"), (right, "a_after", "after_json")):
            col.markdown(f"**{t(key)}**")
            col.json(json.loads(row[column]) if row[column] else {})


def scheduler_changes(user, f: filters.Filters) -> None:
    """Slurm's account, user, association and QOS transactions and Kueue's quota objects' changes:
    actor, time, object and the values set (metrics.audit_events)."""
    st.subheader(t("a_scheduler"))
    st.caption(t("a_scheduler_caption"))
    where, params = f.clause(tenant=None)
    total, rows = data.scheduler_admin_changes(where, params, namespace=tenant_scope(user) or f.tenant,
                                               limit=ROW_LIMIT)
    if ui.empty(rows, t("a_no_scheduler")):
        return
    st.caption(t("showing_rows", shown=rows.height, total=total))
    ui.show_table(_category_words(rows), "audit_events", key="a_scheduler_table", units={"occurred_at": "timestamp_s"})


def draw() -> None:
    user = ui.page_user()
    ui.title("page_audit")
    f = filters.sidebar(user, tenant=True, queue=False, gpu_model=False)
    if tenant_scope(user) is not None:
        st.caption(t("a_scope"))
    if data.audit_records_known() == 0:
        st.info(t("a_no_audit"))
        return
    if user.is_operator:
        counts(f)
    query, category = filters.search_and_choice(t("a_search"), t("category"), CATEGORIES, param="category",
                                                key="a_category", choice_label_of=lambda c: t(f"cat_{c}"))
    records(user, f, query, category)
    scheduler_changes(user, f)


ui.guarded(draw)
