"""Jobs: failures by reason, retries and the GPU-hours they burned, jobs past their declared run
time (and what the overrun policy did about them), oversized requests, and checkpoints: policy
breaches, the work lost at interruptions, the artifacts finished training jobs left, the stalest
checkpoints of running ones. Reads metrics.job_period, failure_reasons, task_daily, job_summary,
governance_actions, spec_gaps, checkpoint_policy_breaches, work_lost, artifact_status and checkpoint_age."""
import altair as alt
import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import column_word, t

ROWS = 200
TOP_REASONS = 15
STALEST = 30
ARTIFACT_STATUSES = ("registered", "logged_only", "none")


def headline() -> None:
    period = data.view("job_period", "template = 'all'")
    if period.is_empty():
        return
    p = period.row(0, named=True)
    st.caption(t("jobs_window"))
    cols = st.columns(4)
    ui.kpi(cols[0], "failure_rate_pct", "job_period", p["failure_rate_pct"])
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
        x=alt.X("failed_jobs:Q", title=column_word("jobs")),
        y=alt.Y("failure_reason:N", sort="-x", title=None, axis=alt.Axis(labelLimit=420)),
        color=alt.Color("final_state:N", title=None),
        tooltip=["failure_reason", "final_state", "failed_jobs", "allocated_gpu_hours"])
    ui.show(chart, t("ch_fail_reasons", n=TOP_REASONS), t("good_lower"))
    by_day = data.failed_gpu_hours_daily(clause, params)
    ui.bars(by_day, "day:T", "allocated_gpu_hours:Q", "final_state:N", t("gpu_hours_unit"), title=t("ch_failed_hours"),
            note=t("good_lower"))


def retries(f: filters.Filters) -> None:
    st.subheader(ui.metric_label("retry_gpu_hours", "task_daily"))
    ui.definition("retry_gpu_hours", "task_daily")
    clause, params = f.clause()
    daily = data.retries_daily(clause, params)
    if ui.empty(daily):
        return
    ui.bars(daily, "day:T", "retry_gpu_hours:Q", "template:N", t("gpu_hours_unit"),
            title=t("ch_by_day", what=ui.metric_label("retry_gpu_hours", "task_daily"), by=t("template")),
            note=t("good_lower"))
    clause, params = f.clause(day="submitted_at", queue="queue", gpu_model="gpu_model")
    top = data.view("job_summary", filters.where(clause, "retries > 0"), params, order=f"retry_gpu_hours desc limit {ROWS}",
                    columns="job_id, tenant, queue, template, user_name, job_name, gpu_model, gpus_requested, status, "
                            "attempts, retries, preemptions, requeues, failure_reason, allocated_gpu_hours, "
                            "retry_gpu_hours, interrupted_gpu_hours, submitted_at")
    with st.expander(t("retry_jobs", n=ROWS)):
        if not ui.empty(top):
            ui.show_table(top, "job_summary")


def overruns(f: filters.Filters) -> None:
    st.subheader(t("past_declared_time"))
    ui.definition("run_time_s", "job_summary")
    clause, params = f.clause()
    steps = data.governance_steps_daily(filters.where(clause, "policy = ?"), (*params, "overrun"))
    if not steps.is_empty():
        ui.bars(steps, "day:T", "actions:Q", "outcome:N", t("steps_axis"), title=t("ch_overrun_steps"))
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
    ui.show_table(late, "job_summary")


def oversized(f: filters.Filters) -> None:
    st.subheader(t("oversized_requests"))
    ui.definition("rightsizable_gpu_hours", "spec_gaps")
    clause, params = f.clause(tenant=None, gpu_model="gpu_model")
    daily = data.rightsizable_daily(clause, params)
    if ui.empty(daily):
        return
    st.caption(t("pool_level_only"))
    ui.bars(daily, "day:T", "rightsizable_gpu_hours:Q", "gpu_model:N", t("gpu_hours_unit"),
            title=t("ch_by_day_model", what=ui.metric_label("rightsizable_gpu_hours", "spec_gaps")), note=t("good_lower"))
    shapes = data.rightsizable_shapes(clause, params)
    ui.show_table(shapes, "spec_gaps")


def checkpoints(f: filters.Filters) -> None:
    """Checkpoint policy breaches and the work lost at interruptions (monthly views: the months the
    period touches, per tenant; queue and GPU model do not apply)."""
    st.subheader(t("checkpoints"))
    st.caption(t("monthly_views"))
    clause, params = f.clause(day=None)
    totals = data.checkpoint_breach_totals(f.start, f.end, clause, params)
    lost = data.work_lost_by_cause(f.start, f.end, clause, params)
    cols = st.columns(4)
    ui.kpi(cols[0], "policy_breach_rate_pct", "checkpoint_policy_breaches", totals["policy_breach_rate_pct"])
    ui.kpi(cols[1], "policy_breaches", "checkpoint_policy_breaches", totals["policy_breaches"])
    ui.kpi(cols[2], "work_lost_gpu_hours", "work_lost", float(lost["work_lost_gpu_hours"].sum()) if lost.height
           else None)
    ui.kpi(cols[3], "attempts_without_checkpoint", "work_lost", int(lost["attempts_without_checkpoint"].sum()))
    st.markdown(f"**{t('breach_offenders')}**")
    ui.definition("policy_breaches", "checkpoint_policy_breaches")
    offenders = data.checkpoint_breach_offenders(f.start, f.end, clause, params)
    if not ui.empty(offenders, t("no_breaches")):
        ui.show_table(offenders, "checkpoint_policy_breaches")
    st.markdown(f"**{t('work_lost_by_cause')}**")
    ui.definition("work_lost_gpu_hours", "work_lost")
    if ui.empty(lost, t("no_work_lost")):
        return
    long = lost.unpivot(index=["cause"], on=["work_lost_with_checkpoint_gpu_hours",
                                             "work_lost_without_checkpoint_gpu_hours"],
                        variable_name="checkpoint", value_name="gpu_hours").with_columns(
        pl.col("cause").replace({c: t(f"cause_{c}") for c in lost["cause"]}),
        pl.col("checkpoint").replace({"work_lost_with_checkpoint_gpu_hours": t("with_checkpoint"),
                                      "work_lost_without_checkpoint_gpu_hours": t("without_checkpoint")}))
    chart = alt.Chart(long.to_pandas()).mark_bar().encode(
        x=alt.X("gpu_hours:Q", title=t("gpu_hours_unit"), stack=True),
        y=alt.Y("cause:N", sort=[t(f"cause_{c}") for c in lost["cause"]], title=None, axis=alt.Axis(labelLimit=300)),
        color=alt.Color("checkpoint:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=400)),
        tooltip=[alt.Tooltip("cause:N", title=t("cause")), alt.Tooltip("checkpoint:N", title=" "),
                 alt.Tooltip("gpu_hours:Q", title=t("gpu_hours_unit"), format=",.1f")])
    ui.show(chart, t("ch_work_lost"), t("good_lower"))


def artifacts(f: filters.Filters) -> None:
    """What finished training jobs left behind: registered model, logged artifact only, or nothing."""
    st.subheader(ui.metric_label("jobs", "artifact_status"))
    ui.definition("jobs", "artifact_status")
    clause, params = f.clause(day=None)
    rows = data.artifact_status_by_tenant(f.start, f.end, clause, params)
    if ui.empty(rows, t("no_artifacts")):
        return
    st.caption(t("artifact_caption"))
    names = {s: t(f"artifact_{s}") for s in ARTIFACT_STATUSES}
    # stacked in the legend's order: registered, logged only, none
    ranked = rows.with_columns(pl.col("artifact_status").replace({s: str(i) for i, s in enumerate(ARTIFACT_STATUSES)})
                               .cast(pl.Int32).alias("rank"), pl.col("artifact_status").replace(names))
    chart = alt.Chart(ranked.to_pandas()).mark_bar().encode(
        x=alt.X("jobs:Q", title=column_word("jobs"), stack=True),
        y=alt.Y("tenant:N", title=None),
        color=alt.Color("artifact_status:N", title=None, sort=list(names.values()),
                        scale=alt.Scale(domain=list(names.values()), range=["#2e7d32", "#f9a825", "#c62828"]),
                        legend=alt.Legend(orient="bottom")),
        order=alt.Order("rank:Q"),
        tooltip=[alt.Tooltip("tenant:N", title=t("tenant")), alt.Tooltip("artifact_status:N", title=" "),
                 alt.Tooltip("jobs:Q", title=column_word("jobs"))])
    ui.show(chart, t("ch_artifacts"))


def stalest(f: filters.Filters) -> None:
    """The running training attempts with the oldest checkpoint at the data's end."""
    st.subheader(t("stalest_checkpoints"))
    ui.definition("checkpoint_age_s", "checkpoint_age")
    clause, params = f.clause(day=None, queue="queue", gpu_model="gpu_model")
    rows = data.stalest_checkpoints(clause, params, STALEST)
    if ui.empty(rows, t("no_running_training")):
        return
    st.caption(t("stalest_caption", n=rows.height))
    # ages as durations ("3 h 20 min"); a missing checkpoint said in words
    shown = rows.with_columns(
        pl.col("last_ok_checkpoint_at").dt.strftime("%Y-%m-%d %H:%M").fill_null(t("no_checkpoint_yet"))) \
        .select("job_id", "attempt", "tenant", "queue", "gpu_model", "gpus", "checkpoint_policy",
                "last_ok_checkpoint_at", "checkpoint_age_s", "is_checkpoint_overdue")
    ui.show_table(shown, "checkpoint_age")

def draw() -> None:
    user = ui.page_user()
    ui.title("page_jobs")
    f = filters.sidebar(user)
    headline()
    failures(f)
    retries(f)
    overruns(f)
    oversized(f)
    checkpoints(f)
    artifacts(f)
    stalest(f)


ui.guarded(draw)
