"""Jobs: failures by reason, retries and the GPU-hours they burned, jobs past their declared run
time (and what the overrun policy did about them), and oversized requests. Reads
metrics.job_period, failure_reasons, task_daily, job_summary, governance_actions and spec_gaps."""
import altair as alt
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import t

ROWS = 200
TOP_REASONS = 15


def headline() -> None:
    period = data.view("job_period", "template = 'all'")
    if period.is_empty():
        return
    p = period.row(0, named=True)
    st.caption(t("jobs_window"))
    cols = st.columns(4)
    ui.kpi(cols[0], "failure_rate_pct", "job_period", p["failure_rate_pct"], "%")
    # the same definitions at the window's grain: their catalog entries live on metrics.task_daily
    ui.kpi(cols[1], "failed_jobs", "task_daily", p["failed_jobs"])
    ui.kpi(cols[2], "retries", "task_daily", p["retries"])
    ui.kpi(cols[3], "preemptions", "task_daily", p["preemptions"])


def failures(f: filters.Filters) -> None:
    st.subheader(t("failures_by_reason"))
    ui.definition("failed_jobs", "failure_reasons")
    clause, params = f.clause()
    reasons = data.failure_reasons_top(clause, params, TOP_REASONS)
    if ui.empty(reasons, t("no_failures")):
        return
    st.caption(t("top_reasons", n=TOP_REASONS))
    chart = alt.Chart(reasons.to_pandas()).mark_bar().encode(
        x=alt.X("failed_jobs:Q", title=t("jobs_axis")),
        y=alt.Y("failure_reason:N", sort="-x", title=None, axis=alt.Axis(labelLimit=420)),
        color=alt.Color("final_state:N", title=None),
        tooltip=["failure_reason", "final_state", "failed_jobs", "allocated_gpu_hours"])
    st.altair_chart(chart, width="stretch")
    by_day = data.failed_gpu_hours_daily(clause, params)
    st.markdown(f"**{t('failed_gpu_hours')}**")
    ui.bars(by_day, "day:T", "allocated_gpu_hours:Q", "final_state:N", "GPU-h")


def retries(f: filters.Filters) -> None:
    st.subheader(ui.metric_label("retry_gpu_hours", "task_daily"))
    ui.definition("retry_gpu_hours", "task_daily")
    clause, params = f.clause()
    daily = data.retries_daily(clause, params)
    if ui.empty(daily):
        return
    ui.bars(daily, "day:T", "retry_gpu_hours:Q", "template:N", "GPU-h")
    clause, params = f.clause(day="submitted_at", queue="queue", gpu_model="gpu_model")
    top = data.view("job_summary", filters.where(clause, "retries > 0"), params, order=f"retry_gpu_hours desc limit {ROWS}",
                    columns="job_id, tenant, queue, template, user_name, job_name, gpu_model, gpus_requested, status, "
                            "attempts, retries, preemptions, requeues, failure_reason, allocated_gpu_hours, "
                            "retry_gpu_hours, interrupted_gpu_hours, submitted_at")
    with st.expander(t("retry_jobs", n=ROWS)):
        if not ui.empty(top):
            st.dataframe(top, width="stretch", hide_index=True)


def overruns(f: filters.Filters) -> None:
    st.subheader(t("past_declared_time"))
    ui.definition("run_time_s", "job_summary")
    clause, params = f.clause()
    steps = data.governance_steps_daily(filters.where(clause, "policy = ?"), (*params, "overrun"))
    if not steps.is_empty():
        st.markdown(f"**{t('overrun_steps')}**")
        ui.bars(steps, "day:T", "actions:Q", "outcome:N", t("steps_axis"))
    clause, params = f.clause(day="submitted_at", queue="queue", gpu_model="gpu_model")
    late = data.view(
        "job_summary", filters.where(clause, "run_time_s > coalesce(expected_runtime_s, time_limit_s)"), params,
        order=f"submitted_at desc limit {ROWS}",
        columns="job_id, tenant, queue, template, user_name, job_name, gpu_model, gpus_held, status, "
                "expected_runtime_s, time_limit_s, run_time_s, allocated_gpu_hours, utilisation_of_allocated_pct, "
                "submitted_at, finished_at")
    if ui.empty(late, t("no_overruns")):
        return
    st.caption(t("overrun_caption", n=min(late.height, ROWS)))
    st.dataframe(late, width="stretch", hide_index=True, column_config={
        c: st.column_config.NumberColumn(format="%d s") for c in ("expected_runtime_s", "time_limit_s", "run_time_s")})


def oversized(f: filters.Filters) -> None:
    st.subheader(t("oversized_requests"))
    ui.definition("rightsizable_gpu_hours", "spec_gaps")
    clause, params = f.clause(tenant=None, gpu_model="gpu_model")
    daily = data.rightsizable_daily(clause, params)
    if ui.empty(daily):
        return
    st.caption(t("pool_level_only"))
    ui.bars(daily, "day:T", "rightsizable_gpu_hours:Q", "gpu_model:N", "GPU-h")
    shapes = data.rightsizable_shapes(clause, params)
    st.dataframe(shapes, width="stretch", hide_index=True)


def draw() -> None:
    user = ui.page_user()
    ui.title("page_jobs")
    f = filters.sidebar(user)
    headline()
    failures(f)
    retries(f)
    overruns(f)
    oversized(f)


ui.guarded(draw)
