"""Idle and reclaim: allocations idle now with their evidence, the period's idle windows, the
governance steps and enforcement actions with their states, the reclaim ledger (GPU-hours
recovered and reused, false positives, users who released after a reminder) and the exemptions
with their expiry. Reads metrics.idle_allocations, tenant_daily, governance_actions,
enforcement_actions, reclaim_ledger and governance_period; the exemptions as the last model build
loaded them (governance.policy_exemptions, data.exemptions)."""
import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import column_word, t

ROWS = 200  # longest tables are cut to the latest / largest rows
# activity is a fraction of the time busy (0-1), a threshold likewise: shown as plain figures
ACTIVITY_UNITS = {"mean_activity": None, "activity_threshold": None, "fraction": None}


def idle_now(f: filters.Filters) -> None:
    st.subheader(t("idle_now"))
    ui.definition("idle_gpu_hours", "idle_allocations")
    clause, params = f.clause(day=None, queue="queue", gpu_model="gpu_model")
    rows = data.view("idle_allocations", filters.where("is_ongoing", clause), params, order="idle_gpu_hours desc",
                     columns="job_id, tenant, queue, template, user_name, host, gpu, gpu_instance_id, gpu_model, "
                             "fraction, window_start_at, idle_minutes, idle_gpu_hours, mean_activity, peak_fb_used_mib, "
                             "policy_scope, activity_threshold, window_minutes, memory_floor_mib")
    if ui.empty(rows, t("idle_none_now")):
        return
    st.caption(t("idle_now_caption", n=rows.height))
    ui.show_table(rows, "idle_allocations", units=ACTIVITY_UNITS)


def idle_period(f: filters.Filters) -> None:
    st.subheader(ui.metric_label("idle_allocated_gpu_hours", "tenant_daily"))
    ui.definition("idle_allocated_gpu_hours", "tenant_daily")
    clause, params = f.clause(gpu_model="gpu_model")
    daily = data.idle_by_tenant(clause, params)
    if not ui.empty(daily):
        ui.bars(daily, "day:T", "idle_allocated_gpu_hours:Q", "tenant:N", t("gpu_hours_unit"),
                title=t("ch_by_day", what=ui.metric_label("idle_allocated_gpu_hours", "tenant_daily"), by=column_word("tenant")),
                note=t("good_lower"))
    clause, params = f.clause(day="window_start_at", queue="queue", gpu_model="gpu_model")
    windows = data.view("idle_allocations", clause, params, order=f"idle_gpu_hours desc limit {ROWS}",
                        columns="window_start_at, window_end_at, job_id, tenant, queue, template, host, gpu, "
                                "gpu_instance_id, gpu_model, fraction, idle_minutes, idle_gpu_hours, mean_activity, "
                                "peak_fb_used_mib, is_ongoing, policy_scope")
    with st.expander(t("idle_windows_largest", n=ROWS)):
        if not ui.empty(windows):
            ui.show_table(windows, "idle_allocations", units=ACTIVITY_UNITS)


def actions(f: filters.Filters) -> None:
    st.subheader(t("governance_steps"))
    ui.definition("actions", "governance_actions")
    clause, params = f.clause()
    by_day = data.governance_steps_daily(clause, params)
    if ui.empty(by_day, t("no_governance")):
        return
    ui.bars(by_day, "day:T", "actions:Q", "outcome:N", t("steps_axis"), title=t("ch_gov_steps"))
    by_policy = data.governance_steps_by_policy(clause, params)
    ui.show_table(by_policy, "governance_actions")

    st.subheader(t("enforcement_actions"))
    kinds = data.action_kinds()
    kind = st.selectbox(t("action_kind"), [t("all"), *kinds], key="idle_action_kind")
    clause, params = f.clause(tenant="object_namespace")
    if kind != t("all"):
        clause, params = filters.where(clause, "action_kind = ?"), (*params, kind)
    latest = data.view("enforcement_actions", clause, params, order=f"occurred_at desc limit {ROWS}",
                       columns="occurred_at, action_kind, decision, object_namespace as tenant, object_name, job_id, "
                               "policy, reason, gpus_released, recovered_gpu_hours, reused_gpu_hours, "
                               "is_false_positive, recovery_basis")
    if not ui.empty(latest):
        st.caption(t("latest_rows", n=min(latest.height, ROWS)))
        ui.show_table(latest, "enforcement_actions")


def ledger(f: filters.Filters) -> None:
    st.subheader(t("reclaim_ledger"))
    period = data.view("governance_period", "tenant = ?", (f.tenant or "all",))
    if not period.is_empty():
        p = period.row(0, named=True)
        st.caption(t("ledger_window", first=p["first_day"], last=p["last_day"], tenant=p["tenant"]))
        cols = st.columns(5)
        ui.kpi(cols[0], "recovered_gpu_hours", "governance_period", p["recovered_gpu_hours"])
        ui.kpi(cols[1], "reused_gpu_hours", "governance_period", p["reused_gpu_hours"])
        ui.kpi(cols[2], "reuse_share_pct", "governance_period", p["reuse_share_pct"])
        ui.kpi(cols[3], "false_positive_rate_pct", "governance_period", p["false_positive_rate_pct"])
        ui.kpi(cols[4], "self_release_rate_pct", "governance_period", p["self_release_rate_pct"])
        st.caption(t("ledger_counts", reclaims=p["reclaims"], fp=p["false_positives"], reminders=p["reminders"],
                     released=p["released_after_reminder"]))
        d1, d2 = st.columns(2)
        with d1:
            ui.definition("recovered_gpu_hours", "reclaim_ledger")
        with d2:
            ui.definition("false_positive_rate_pct", "governance_period")

    clause, params = f.clause(queue="queue", gpu_model="gpu_model")
    daily = data.reclaimed_daily(clause, params)
    if ui.empty(daily, t("no_reclaims")):
        return
    long = daily.unpivot(index="day", variable_name="measure", value_name="gpu_hours").with_columns(
        pl.col("measure").replace({c: ui.metric_label(c, "reclaim_ledger")
                                   for c in ("recovered_gpu_hours", "reused_gpu_hours")}))
    ui.line(long, "day:T", "gpu_hours:Q", "measure:N", t("gpu_hours_unit"), title=t("ch_reclaimed"))
    rows = data.view("reclaim_ledger", clause, params, order=f"acted_at desc limit {ROWS}",
                     columns="acted_at, action_kind, tenant, queue, job_id, policy, gpu_model, gpus_freed, "
                             "would_end_at, would_end_basis, recovered_gpu_hours, reused_gpu_hours, reuse_share_pct, "
                             "is_false_positive, resubmitted_job_id, is_released_after_reminder, actor")
    with st.expander(t("ledger_rows", n=ROWS)):
        ui.show_table(rows, "reclaim_ledger")


def exemptions(f: filters.Filters) -> None:
    st.subheader(t("exemptions"))
    st.caption(t("exemptions_source"))
    problem = data.exemptions_problem()
    if problem:
        st.warning(f"{t('exemptions_unreadable')} {problem}")
    rows = data.exemptions()
    if f.tenant:
        rows = rows.filter(pl.col("tenant") == f.tenant)
    if ui.empty(rows, t("no_exemptions")):
        return
    ui.show_table(rows, labels={"is_expired": t("expired"), "days_left": t("days_left")}, units={"days_left": "days"})


def draw() -> None:
    user = ui.page_user()
    ui.title("page_idle")
    f = filters.sidebar(user)
    idle_now(f)
    idle_period(f)
    actions(f)
    ledger(f)
    exemptions(f)


ui.guarded(draw)
