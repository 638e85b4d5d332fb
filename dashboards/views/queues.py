"""Queues and waiting: wait p50/p95 per queue over time with the waiting work beside them (jobs
still waiting and jobs cancelled while queued, with their pending age), pending demand by GPU model
against free capacity, waited GPU-hours by cause, preemptions and requeues. Reads metrics.job_period,
queue_daily, spec_gaps and wait_causes. queue_daily has one row per day, queue and tenant (a shared
queue has one per tenant): queue rows are the tenant's own for a tenant member (filters pin the
tenant); pending demand and the pool's wait percentiles and waiting work are pool-level."""
import altair as alt
import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import column_word, t

GAP_ROWS = 50  # the spec-gap table shows the largest gaps only


def headline(f: filters.Filters) -> None:
    pool = data.view("job_period", "template = 'all'")
    clause, params = f.clause(queue="queue")
    counts = data.queue_interruptions(filters.where(clause), params)
    cols = [*st.columns(3), *st.columns(3)]  # six tiles in two rows: a sixth of the page cuts "2 h 56 min"
    p = pool.row(0, named=True) if pool.height else {}
    wait_p50, wait_p95 = p.get("queue_wait_p50_s"), p.get("queue_wait_p95_s")
    ui.kpi(cols[0], "queue_wait_p50_s", "job_period", wait_p50)
    ui.kpi(cols[1], "queue_wait_p95_s", "job_period", wait_p95)
    # beside the percentiles, the waiting work they cannot see (PRODUCT.md "Waiting work")
    ui.kpi(cols[2], "jobs_waiting", "job_period", p.get("jobs_waiting"))
    ui.kpi(cols[3], "cancelled_while_queued", "job_period", p.get("cancelled_while_queued"))
    c = counts.row(0, named=True)
    ui.kpi(cols[4], "preemptions", "queue_daily", None if c["preemptions"] is None else int(c["preemptions"]))
    ui.kpi(cols[5], "requeues", "queue_daily", None if c["requeues"] is None else int(c["requeues"]))
    st.caption(t("queues_headline_caption"))


def waits(f: filters.Filters) -> None:
    st.subheader(t("wait_per_queue"))
    left, right = st.columns(2)
    with left:
        ui.definition("queue_wait_p95_s", "queue_daily")
    with right:
        ui.definition("queue_wait_p50_s", "queue_daily")
    clause, params = f.clause(queue="queue")
    # a shared queue has a row per tenant: the series is the queue and tenant
    daily = data.view("queue_daily", filters.where(clause, "jobs_started > 0"), params, order="day, queue, tenant",
                      columns="day, queue, tenant, queue || ' · ' || coalesce(tenant, '?') as queue_tenant, "
                              "jobs_started, queue_wait_p50_s / 60.0 as queue_wait_p50_min, "
                              "queue_wait_p95_s / 60.0 as queue_wait_p95_min")
    if not ui.empty(daily, t("no_waits")):
        p95, p50 = st.tabs(["p95", "p50"])
        target = data.targets().wait_p95_min  # the scorecard's; None before a month is scored: no target
        many = daily["queue_tenant"].n_unique() > ui.MAX_SERIES  # a heatmap: the target is a colour, not a line
        with p95:
            ui.line(daily, "day:T", "queue_wait_p95_min:Q", "queue_tenant:N", t("wait_axis_min"),
                    title=t("ch_wait_p95"),
                    good=None if target is None else ui.Good(
                        target, t("good_wait_heat" if many else "good_wait", minutes=target), better="low"),
                    note=t("no_target") if target is None else None)
        with p50:
            ui.line(daily, "day:T", "queue_wait_p50_min:Q", "queue_tenant:N", t("wait_axis_min"),
                    title=t("ch_wait_p50"), note=t("good_lower"))
    waiting_work(clause, params)


def waiting_work(clause: str, params: tuple) -> None:
    """Jobs still waiting at each day's end and jobs cancelled while queued, with their pending age,
    as metrics.queue_daily has them (ages are not combined across rows here)."""
    st.markdown(f"**{t('waiting_work')}**")
    cols = st.columns(2)
    with cols[0]:
        ui.definition("waiting_age_p95_s", "queue_daily")
    with cols[1]:
        ui.definition("cancelled_pending_age_p95_s", "queue_daily")
    pending = data.view("queue_daily", filters.where(clause, "jobs_waiting > 0 or cancelled_while_queued > 0"), params,
                        order="day, queue, tenant",
                        columns="day, queue, tenant, jobs_waiting, waiting_age_p95_s, waiting_age_max_s, "
                                "cancelled_while_queued, cancelled_pending_age_p95_s")
    if ui.empty(pending, t("no_waiting_work")):
        return
    ui.show_table(pending, "queue_daily")


def pending_demand(f: filters.Filters) -> None:
    st.subheader(t("pending_by_model"))
    ui.definition("pending_gpus_avg", "spec_gaps")
    ui.definition("gap_gpus_peak_hour", "spec_gaps")
    clause, params = f.clause(tenant=None, gpu_model="gpu_model")
    demand = data.view("spec_gaps", filters.where(clause, "pending_gpus_avg > 0"), params, order="day, gpu_model",
                       columns="day, gpu_model, coalesce(mig_profile, share_mode) as shape, gpus_requested, "
                               "pending_gpus_avg")
    if ui.empty(demand, t("no_pending")):
        return
    # pending GPUs of the sizes and shapes of a model add up (means of counts): the bars stack them
    chart = alt.Chart(demand.to_pandas()).mark_bar().encode(
        x=ui.day_x("day:T"),
        y=alt.Y("sum(pending_gpus_avg):Q", title=t("pending_axis")),
        color=alt.Color("gpu_model:N", title=None),
        tooltip=ui.tooltip("day:T", "gpu_model:N", "shape:N", "gpus_requested:Q", "pending_gpus_avg:Q"),
    )
    ui.show(chart, t("ch_pending"), t("good_lower"))
    gaps = data.view("spec_gaps", filters.where(clause, "gap_gpus_peak_hour > 0"), params,
                     order=f"gap_gpus_peak_hour desc, day limit {GAP_ROWS}",
                     columns="day, gpu_model, share_mode, mig_profile, gpus_requested, pending_gpus_peak_hour, "
                             "free_gpus_at_peak_hour, gap_gpus_peak_hour, peak_hour_at, waited_gpu_hours, "
                             "capacity_bound_gpu_hours, fragmentation_gpu_hours")
    with st.expander(t("spec_gaps_largest", n=GAP_ROWS)):
        if not ui.empty(gaps, t("no_spec_gaps")):
            ui.show_table(gaps, "spec_gaps")


def causes(f: filters.Filters) -> None:
    st.subheader(t("wait_by_cause"))
    ui.definition("waited_gpu_hours", "wait_causes")
    clause, params = f.clause(queue="queue", gpu_model="gpu_model")
    by_cause = data.waited_by_cause(filters.where(clause), params)
    if ui.empty(by_cause, t("no_wait_causes")):
        return
    ui.bars(by_cause, "day:T", "waited_gpu_hours:Q", "cause:N", t("gpu_hours_unit"),
            title=t("ch_per_day", what=ui.metric_label("waited_gpu_hours", "wait_causes")),
            note=t("good_lower"))


def interruptions(f: filters.Filters) -> None:
    st.subheader(t("preemptions_requeues"))
    ui.definition("preemptions", "queue_daily")
    clause, params = f.clause(queue="queue")
    daily = data.queue_interruptions_daily(filters.where(clause), params)
    long = daily.unpivot(index="day", on=["preemptions", "requeues"], variable_name="kind", value_name="attempts") \
        .filter(pl.col("attempts") > 0) \
        .with_columns(pl.col("kind").replace({c: ui.metric_label(c, "queue_daily") for c in ("preemptions", "requeues")}))
    if ui.empty(long, t("no_interruptions")):
        return
    ui.bars(long, "day:T", "attempts:Q", "kind:N", column_word("attempts"), title=t("ch_interruptions"),
            note=t("good_lower"))
    per_queue = data.queue_interruptions_per_queue(filters.where(clause), params)
    ui.show_table(per_queue, "queue_daily")


def draw() -> None:
    user = ui.page_user()
    ui.title("page_queues")
    f = filters.sidebar(user)
    if data.bounds() is None:
        st.info(t("no_data_yet"))
        return
    headline(f)
    waits(f)
    pending_demand(f)
    causes(f)
    interruptions(f)


ui.guarded(draw)
