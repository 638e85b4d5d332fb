"""Tenants and quota: usage against quota and borrowing (metrics.tenant_quota per day,
metrics.quota_fit over the loaded window), cost attribution adding up to the pool total
(metrics.cost_attribution) and the task-type mix (metrics.task_daily). A tenant member sees only
their tenant's rows (filters pin the tenant) and the pool-level totals: the pool's cost and the
pool's task-type mix."""
import altair as alt
import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import column_word, t


def quota(f: filters.Filters) -> None:
    st.subheader(t("quota_usage"))
    left, right = st.columns(2)
    with left:
        ui.definition("quota_usage_pct", "tenant_quota")
    with right:
        ui.definition("borrowed_gpu_hours", "tenant_quota")
    clause, params = f.clause(gpu_model="gpu_model")
    daily = data.view("tenant_quota", filters.where(clause, "quota_gpu_hours > 0"), params, order="day, tenant, gpu_model",
                      columns="day, tenant, gpu_model, tenant || ' · ' || gpu_model as tenant_model, quota_gpus, "
                              "quota_gpu_hours, allocated_gpu_hours, quota_usage_pct, borrowed_gpu_hours, "
                              "unused_quota_gpu_hours")
    if ui.empty(daily, t("no_quota")):
        return
    usage, borrowed = st.tabs([ui.metric_label("quota_usage_pct", "tenant_quota"),
                               ui.metric_label("borrowed_gpu_hours", "tenant_quota")])
    with usage:
        # a ratio per tenant and model: a heatmap, whose colours turn at the quota (usage 100 %)
        ui.heatmap(daily, "day:T", "tenant_model:N", "quota_usage_pct:Q", title=t("ch_quota_usage"),
                   value_title=t("quota_pct_axis"), y_title=t("tenant_model"),
                   good=ui.Good(100, t("good_quota"), better="near"))
    with borrowed:
        ui.bars(daily, "day:T", "borrowed_gpu_hours:Q", "tenant_model:N", t("gpu_hours_unit"),
                title=t("ch_by_day", what=ui.metric_label("borrowed_gpu_hours", "tenant_quota"), by=t("tenant_model")))


def quota_fit(f: filters.Filters) -> None:
    st.subheader(t("quota_fit"))
    ui.definition("in_quota_gpu_hours", "quota_fit")
    clause, params = f.clause(day=None, gpu_model="gpu_model")
    fit = data.view("quota_fit", clause, params, order="tenant, gpu_model",
                    columns="tenant, gpu_model, queues, quota_gpus, quota_gpu_hours, in_quota_gpu_hours, "
                            "borrowed_gpu_hours, quota_less_gpu_hours, idle_quota_gpu_hours, need_gpu_hours, "
                            "quota_used_pct, idle_quota_share_pct, is_starved, is_donor")
    if ui.empty(fit, t("no_quota")):
        return
    st.caption(t("quota_fit_caption"))
    part_columns = ("in_quota_gpu_hours", "borrowed_gpu_hours", "quota_less_gpu_hours", "idle_quota_gpu_hours")
    names = {c: ui.metric_label(c, "quota_fit") if data.metric(c, "quota_fit") else t(f"col_{c}") for c in part_columns}
    parts = fit.select("tenant", "gpu_model", *part_columns) \
        .with_columns(row=pl.col("tenant") + " · " + pl.col("gpu_model")) \
        .unpivot(index=["row", "tenant", "gpu_model"], variable_name="part", value_name="gpu_hours") \
        .with_columns(pl.col("part").replace(names))
    chart = alt.Chart(parts.to_pandas()).mark_bar().encode(
        x=alt.X("gpu_hours:Q", title=t("gpu_hours_unit")),
        y=alt.Y("row:N", title=t("tenant_model"), axis=alt.Axis(labelLimit=260)),
        color=alt.Color("part:N", title=None, sort=list(names.values()), legend=alt.Legend(orient="bottom", labelLimit=300)),
        tooltip=["tenant:N", "gpu_model:N", "part:N", alt.Tooltip("gpu_hours:Q", format=",.1f")])
    ui.show(chart, t("ch_quota_fit"))
    ui.show_table(fit, "quota_fit")


def costs(f: filters.Filters, operator: bool) -> None:
    st.subheader(t("cost_attribution"))
    left, right = st.columns(2)
    with left:
        ui.definition("total_cost_usd", "cost_attribution")
    with right:
        ui.definition("pool_total_cost_usd", "cost_attribution")
    clause, params = f.clause(day=None)
    rows = data.tenant_costs(f.start, f.end, clause, params)
    # the pool total is a pool-level figure: one value per month, the same on every tenant's row
    pool = data.pool_costs(f.start, f.end)
    if ui.empty(pool, t("no_costs")):
        return
    latest = pool.tail(3)  # the latest months' pool totals as headline numbers
    for col, month in zip(st.columns(latest.height), latest.iter_rows(named=True), strict=True):
        ui.kpi(col, "pool_total_cost_usd", "cost_attribution", month["pool_total_cost_usd"])
        col.caption(f"{month['month']:%Y-%m}")
    st.caption(t("cost_caption_operator" if operator and f.tenant is None else "cost_caption_scoped"))
    # costs add up: past MAX_SERIES tenants the smallest are summed into "others" (the total stays the pool's)
    shown = ui.top_n(rows, "tenant", "total_cost_usd", ["month"])
    month = alt.X("yearmonth(month):O", title=column_word("month"), axis=alt.Axis(format="%Y-%m", labelAngle=0))
    bars = alt.Chart(shown.to_pandas()).mark_bar().encode(
        x=month, y=alt.Y("total_cost_usd:Q", title="USD", stack=True),
        color=alt.Color("tenant:N", title=None, sort=ui.series_order(shown, "tenant", "total_cost_usd")),
        tooltip=["yearmonth(month):O", "tenant:N", alt.Tooltip("total_cost_usd:Q", format=",.2f")])
    total = alt.Chart(pool.to_pandas()).mark_tick(color="black", thickness=2, size=40).encode(
        x=month, y=alt.Y("pool_total_cost_usd:Q"),
        tooltip=["yearmonth(month):O", alt.Tooltip("pool_total_cost_usd:Q", format=",.2f")])
    ui.show(bars + total, t("ch_costs"), t("cost_tick_note"))
    if not ui.empty(rows, t("no_costs_tenant")):
        ui.show_table(rows, "cost_attribution")


def task_mix(f: filters.Filters) -> None:
    st.subheader(t("task_mix"))
    ui.definition("submissions_share_pct", "task_daily")
    # the pool's mix (all tenants, no names: a pool-level figure), then the chosen / own tenant's
    pool = data.pool_task_mix(f.start, f.end)
    if ui.empty(pool, t("no_jobs")):
        return
    scopes = [(t("pool"), pool)]
    if f.tenant:
        clause, params = f.clause()
        own = data.view("task_daily", clause, params, order="day, template",
                        columns="day, template, submissions, allocated_gpu_hours")
        scopes.append((f.tenant, own))
    for tab, (_, frame) in zip(st.tabs([name for name, _ in scopes]), scopes, strict=True):
        with tab:
            if ui.empty(frame, t("no_jobs")):
                continue
            by_jobs, by_hours = st.columns(2)
            with by_jobs:
                mix(frame, "submissions", t("submissions_share"), t("ch_mix_submissions"))
            with by_hours:
                mix(frame, "allocated_gpu_hours", t("gpu_hours_share"), t("ch_mix_hours"))


def mix(frame: pl.DataFrame, value: str, axis_title: str, title: str) -> None:
    """Each day's bar split by template, normalised to 100% by the chart (a share, not a new figure)."""
    shown = ui.top_n(frame, "template", value, ["day"])
    chart = alt.Chart(shown.to_pandas()).mark_bar().encode(
        x=ui.day_x("day:T"),
        y=alt.Y(f"sum({value}):Q", stack="normalize", title=axis_title, axis=alt.Axis(format="%")),
        # the same template keeps its colour in both charts: names in order, "others" last
        color=alt.Color("template:N", title=None, sort=sorted(shown["template"].unique(), key=lambda n: (n == t("others"), n)),
                        legend=alt.Legend(orient="bottom", columns=4, labelLimit=200)),
        tooltip=ui.tooltip("day:T", "template:N", f"sum({value}):Q"))
    ui.show(chart, title)


def draw() -> None:
    user = ui.page_user()
    ui.title("page_tenants")
    f = filters.sidebar(user, queue=False)
    if data.bounds() is None:
        st.info(t("no_data_yet"))
        return
    quota(f)
    quota_fit(f)
    costs(f, user.is_operator)
    task_mix(f)


ui.guarded(draw)
