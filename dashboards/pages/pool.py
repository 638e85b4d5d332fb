"""Pool overview: every GPU in one view, allocation and utilisation over time, the pooling-stage
scorecard. Reads metrics.gpu_status, pool_period, pool_daily, pooling_scorecard."""
import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import t


def draw() -> None:
    user = ui.page_user()
    ui.title("page_pool")
    f = filters.sidebar(user, tenant=False, queue=False)

    period = data.view("pool_period", "gpu_model = 'all'")
    if not ui.empty(period, t("no_data_period")):
        p = period.row(0, named=True)
        st.caption(f"{p['first_day']} … {p['last_day']} · metrics.pool_period")
        cols = st.columns(4)
        ui.kpi(cols[0], "allocation_rate_pct", "pool_period", p["allocation_rate_pct"], "%")
        ui.kpi(cols[1], "utilisation_of_allocated_pct", "pool_period", p["utilisation_of_allocated_pct"], "%")
        ui.kpi(cols[2], "pool_utilisation_pct", "pool_period", p["pool_utilisation_pct"], "%")
        ui.kpi(cols[3], "idle_allocated_gpu_hours", "pool_period", p["idle_allocated_gpu_hours"], " GPU-h")

    where, params = f.clause(gpu_model="gpu_model", tenant=None)
    daily = data.view("pool_daily", where + (" and gpu_model <> 'all'" if "gpu_model" not in where else ""), params,
                      order="day")
    st.subheader(ui.metric_label("allocation_rate_pct", "pool_daily"))
    ui.definition("allocation_rate_pct", "pool_daily")
    if not ui.empty(daily):
        ui.line(daily, "day:T", "allocation_rate_pct:Q", "gpu_model:N", "%")
        st.subheader(ui.metric_label("utilisation_of_allocated_pct", "pool_daily"))
        ui.definition("utilisation_of_allocated_pct", "pool_daily")
        ui.line(daily, "day:T", "utilisation_of_allocated_pct:Q", "gpu_model:N", "%")

    st.subheader("GPUs")
    gpus = data.view("gpu_status", "? is null or gpu_model = ?", (f.gpu_model, f.gpu_model), order="host, gpu, gpu_instance_id")
    if not ui.empty(gpus, t("no_data_period")):
        if not user.is_operator:  # who holds a GPU is tenant-level: only their own tenant's holders are named
            gpus = gpus.with_columns(
                pl.when(pl.col("tenant") == user.tenant).then(pl.col(c)).otherwise(None).alias(c)
                for c in ("job_id", "tenant", "queue", "template"))
        st.dataframe(gpus.select("host", "gpu", "gpu_instance_id", "gpu_model", "share_mode", "gpu_instance_profile",
                                 "is_allocated", "tenant", "job_id", "last_activity", "last_fb_used_mib",
                                 "is_reporting", "as_of_at"),
                     use_container_width=True, hide_index=True,
                     column_config={"last_activity": st.column_config.ProgressColumn(min_value=0, max_value=1)})

    st.subheader(t("scorecard"))
    score = data.view("pooling_scorecard", order="stage_order")
    if not ui.empty(score):
        ui.bars(score, "stage:N", "score_pct:Q", None, "%")
        st.dataframe(score, use_container_width=True, hide_index=True)


ui.guarded(draw)
