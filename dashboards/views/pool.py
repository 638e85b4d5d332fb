"""Pool overview: every GPU in one view, allocation and utilisation over time, the pooling-stage
scorecard. Reads metrics.gpu_status, pool_period, pool_daily, pooling_scorecard."""
import altair as alt
import polars as pl
import streamlit as st

from dashboards import data, filters, fmt, ui
from dashboards.i18n import lang, t

STAGE_KEYS = ("project_owned", "shared_queues", "elastic_sharing", "resource_operations")
# not scored inputs: the row's keys, and the targets the other pages draw (the rule states them)
NOT_INPUTS = {"month", "stage", "stage_order", "criterion", "score_pct", "score_rule", "first_day", "last_day",
              "utilisation_target_pct", "wait_p95_target_s"}


def headline(f: filters.Filters) -> None:
    period = data.view("pool_period", "gpu_model = ?", (f.gpu_model or "all",))
    if ui.empty(period, t("no_data_period")):
        return
    p = period.row(0, named=True)
    cols = st.columns(4)
    ui.kpi(cols[0], "allocation_rate_pct", "pool_period", p["allocation_rate_pct"])
    ui.kpi(cols[1], "utilisation_of_allocated_pct", "pool_period", p["utilisation_of_allocated_pct"])
    ui.kpi(cols[2], "pool_utilisation_pct", "pool_period", p["pool_utilisation_pct"])
    ui.kpi(cols[3], "idle_allocated_gpu_hours", "pool_period", p["idle_allocated_gpu_hours"])
    st.caption(t("pool_window_caption", first=p["first_day"], last=p["last_day"], model=p["gpu_model"]))


def over_time(f: filters.Filters) -> None:
    where, params = f.clause(gpu_model="gpu_model", tenant=None)
    daily = data.view("pool_daily", where, params, order="day, gpu_model",
                      columns="day, gpu_model, allocation_rate_pct, utilisation_of_allocated_pct")
    st.subheader(ui.metric_label("allocation_rate_pct", "pool_daily"))
    ui.definition("allocation_rate_pct", "pool_daily")
    if ui.empty(daily):
        return
    rate = ui.metric_label("allocation_rate_pct", "pool_daily")
    ui.line(daily, "day:T", "allocation_rate_pct:Q", "gpu_model:N", f"{rate} (%)",
            title=t("ch_by_day_model", what=rate))
    st.subheader(ui.metric_label("utilisation_of_allocated_pct", "pool_daily"))
    ui.definition("utilisation_of_allocated_pct", "pool_daily")
    used = ui.metric_label("utilisation_of_allocated_pct", "pool_daily")
    target = data.targets().utilisation_pct  # the scorecard's; None before a month is scored: no band
    ui.line(daily, "day:T", "utilisation_of_allocated_pct:Q", "gpu_model:N", f"{used} (%)",
            title=t("ch_by_day_model", what=used),
            good=None if target is None else ui.Good(target, t("good_util", pct=target), to=100),
            note=t("no_target") if target is None else None)


def gpus(f: filters.Filters, user) -> None:
    st.subheader(t("gpus"))
    rows = data.view("gpu_status", "? is null or gpu_model = ?", (f.gpu_model, f.gpu_model),
                     order="host, gpu, gpu_instance_id")
    if ui.empty(rows, t("no_gpus")):
        return
    if not user.is_operator:  # who holds a GPU is tenant-level: only their own tenant's holders are named
        rows = rows.with_columns(
            pl.when(pl.col("tenant") == user.tenant).then(pl.col(c)).otherwise(None).alias(c)
            for c in ("job_id", "tenant", "queue", "template"))
    st.caption(t("gpus_caption", n=rows.height, as_of=rows["as_of_at"].max()))
    ui.show_table(rows.select("host", "gpu", "gpu_instance_id", "gpu_model", "share_mode", "gpu_instance_profile",
                              "is_allocated", "tenant", "queue", "job_id", "held_since_at",
                              (pl.col("last_activity") * 100).alias("last_activity_pct"), "last_fb_used_mib",
                              "is_reporting", "last_telemetry_at"), "gpu_status")


def scorecard(f: filters.Filters) -> None:
    st.subheader(t("scorecard"))
    ui.definition("score_pct", "pooling_scorecard")
    # the scorecard is per month: the month of the period's last day, else the latest scored month
    score = data.scorecard(f.end)
    if ui.empty(score, t("no_scorecard")):
        return
    score = score.with_columns(stage_label=pl.col("stage").replace_strict(
        {k: f"{i + 1}. {t('stage_' + k)}" for i, k in enumerate(STAGE_KEYS)}, default=pl.col("stage")))
    chart = alt.Chart(score.select("stage_label", "score_pct", "criterion").to_pandas()).mark_bar().encode(
        x=alt.X("score_pct:Q", title=t("score_axis"), scale=alt.Scale(domain=[0, 100])),
        y=alt.Y("stage_label:N", title=None, sort=None, axis=alt.Axis(labelLimit=300)),
        tooltip=["stage_label:N", "criterion:N", "score_pct:Q"])
    ui.show(alt.layer(chart, *ui.good_marks(ui.Good(100, t("good_score")), "x")), t("ch_scorecard"))
    st.caption(t("scorecard_caption", first=score["first_day"][0], last=score["last_day"][0]))
    for row in score.iter_rows(named=True):
        with st.expander(f"{row['stage_label']} · {row['score_pct']:.0f}%"):
            inputs = [(ui.metric_label(k, "pooling_scorecard"), _fmt(k, v)) for k, v in row.items()
                      if k not in NOT_INPUTS and k != "stage_label" and v is not None]
            ui.show_table(pl.DataFrame(inputs, schema=["input", "value"], orient="row"))
            st.caption(f"{t('rule')}: {row['score_rule']}")


def _fmt(column: str, value) -> str:
    """A scorecard input by its unit (the catalog's, else its name's)."""
    entry = data.metric(column, "pooling_scorecard")
    return fmt.value(value, fmt.unit_of(column, (entry or {}).get("unit")), lang())


def draw() -> None:
    user = ui.page_user()
    ui.title("page_pool")
    f = filters.sidebar(user, tenant=False, queue=False)
    headline(f)
    over_time(f)
    gpus(f, user)
    scorecard(f)


ui.guarded(draw)
