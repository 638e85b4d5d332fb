"""Health and failures: why attempts ended (failures and GPU-hours lost by cause, the share that was
not the user's fault), the bad GPUs (hardware faults, repeat offenders, fault history), the mean time
between hardware faults per GPU model, the hosts' CPU, memory, network and storage per day, the
drains and undrains the gpu-health policy decided (shadow ones labelled: what it would have done) and
the drains the engines audited. Reads metrics.failure_causes, gpu_faults, gpu_model_reliability,
host_daily, drain_decisions and enforcement_actions."""
import altair as alt
import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import column_word, t

ROWS = 200
TOP_HOSTS = 30  # a heatmap row per host stays readable up to about this many
HOST_MEASURES = ("cpu_busy_pct_mean", "cpu_busy_pct_p95", "memory_used_bytes_mean", "memory_used_bytes_peak",
                 "network_receive_bytes_per_s_mean", "network_transmit_bytes_per_s_mean",
                 "disk_read_bytes_per_s_mean", "disk_written_bytes_per_s_mean")


def _cause_names(frame: pl.DataFrame) -> pl.DataFrame:
    """The causes as words of the interface (the view holds their keys)."""
    return frame.with_columns(pl.col("cause").map_elements(lambda c: t(f"cause_{c}"), return_dtype=pl.String))


def causes(f: filters.Filters) -> None:
    st.subheader(t("h_causes"))
    st.caption(t("h_causes_caption", first=f.start.replace(day=1), last=f.end))
    clause, params = f.clause(day=None)
    rows = data.failure_causes(f.start, f.end, clause, params)
    if ui.empty(rows, t("h_no_attempts")):
        return
    total = rows.filter(pl.col("cause") == "all").row(0, named=True)
    cols = st.columns(4)
    ui.kpi(cols[0], "failures", "failure_causes", total["failures"])
    ui.kpi(cols[1], "failure_rate_pct", "failure_causes", total["failure_rate_pct"])
    ui.kpi(cols[2], "gpu_hours_lost", "failure_causes", total["gpu_hours_lost"])
    ui.kpi(cols[3], "not_user_fault_pct", "failure_causes", total["not_user_fault_pct"])
    failed = _cause_names(rows.filter((pl.col("cause") != "all") & (pl.col("failures") > 0)))
    if ui.empty(failed, t("h_no_failures")):
        return
    left, right = st.columns(2)
    for col, measure, unit in ((left, "failures", column_word("attempts")), (right, "gpu_hours_lost", "GPU-h")):
        with col:
            chart = alt.Chart(failed.to_pandas()).mark_bar().encode(
                x=alt.X(f"{measure}:Q", title=unit),
                y=alt.Y("cause:N", sort="-x", title=t("cause"), axis=alt.Axis(labelLimit=240)),
                tooltip=["cause", "attempts", "failures", "failure_rate_pct", "gpu_hours_lost", "not_user_fault_pct"])
            ui.show(chart, ui.metric_label(measure, "failure_causes"), t("good_lower"))
    d1, d2 = st.columns(2)
    with d1:
        ui.definition("gpu_hours_lost", "failure_causes")
    with d2:
        ui.definition("not_user_fault_pct", "failure_causes")
    columns = ["cause", "attempts", "failures", "failure_rate_pct", "gpu_hours_lost", "not_user_fault_pct"]
    ui.show_table(_cause_names(rows).select(columns), "failure_causes", labels={"cause": t("cause")})
    per_tenant = data.failure_causes_per_tenant(f.start, f.end, clause, params)
    shares = per_tenant.filter((pl.col("cause") == "all") & pl.col("not_user_fault_pct").is_not_null())
    if shares.height > 1:
        ui.bars(shares, "tenant:N", "not_user_fault_pct:Q", None, f"{ui.metric_label('not_user_fault_pct', 'failure_causes')} (%)",
                title=t("h_not_user_fault_tenant"), x_title=t("tenant"), horizontal=True)
    with st.expander(t("h_per_tenant")):
        ui.show_table(_cause_names(per_tenant), "failure_causes", labels={"cause": t("cause")})


def bad_gpus(f: filters.Filters) -> None:
    st.subheader(t("h_bad_gpus"))
    st.caption(t("h_bad_gpus_caption"))
    clause, params = f.clause(day=None, tenant=None, gpu_model="gpu_model")
    counts = data.gpu_fault_counts(filters.where(clause), params).row(0, named=True)
    cols = st.columns(3)
    ui.tile(cols[0], t("h_gpus_with_faults"), counts["gpus_with_faults"], "gpus")
    ui.tile(cols[1], t("h_repeat_gpus"), counts["repeat_offender_gpus"], "gpus")
    ui.tile(cols[2], t("h_repeat_nodes"), counts["repeat_offender_nodes"], "hosts")
    ui.definition("is_repeat_offender", "gpu_faults")
    columns = ["host", "gpu", "gpu_model", "is_repeat_offender", "is_node_repeat_offender", "hardware_faults",
               "hardware_faults_last_30d", "first_fault_at", "last_fault_at", "hardware_xids", "application_xids",
               "xids_seen", "ecc_dbe_errors", "ecc_sbe_errors", "warning_minutes"]
    rows = data.view("gpu_faults", clause, params, columns=", ".join(columns),
                     order=f"is_repeat_offender desc, hardware_faults desc, application_xids desc, host, gpu "
                           f"limit {ROWS}")
    st.markdown(f"**{t('h_fault_history')}**")
    if ui.empty(rows, t("h_no_health")):
        return
    ui.show_table(rows, "gpu_faults")


def mtbf(f: filters.Filters) -> None:
    st.subheader(t("h_mtbf"))
    st.caption(t("h_mtbf_caption"))
    clause, params = f.clause(day=None, tenant=None, gpu_model="gpu_model")
    columns = ["gpu_model", "gpus", "observed_gpu_hours", "hardware_faults", "gpus_with_faults", "mtbf_gpu_hours"]
    rows = data.view("gpu_model_reliability", clause, params, columns=", ".join(columns), order="gpu_model")
    if ui.empty(rows):
        return
    ui.definition("mtbf_gpu_hours", "gpu_model_reliability")
    with_mtbf = rows.filter(pl.col("mtbf_gpu_hours").is_not_null())
    if with_mtbf.height:
        ui.bars(with_mtbf, "gpu_model:N", "mtbf_gpu_hours:Q", None,
                ui.metric_label("mtbf_gpu_hours", "gpu_model_reliability") + " (GPU-h)", horizontal=True,
                title=t("ch_by", what=ui.metric_label("mtbf_gpu_hours", "gpu_model_reliability"), by=t("gpu_model")),
                x_title=t("gpu_model"))
    ui.show_table(rows, "gpu_model_reliability")


def hosts(f: filters.Filters) -> None:
    st.subheader(t("h_hosts"))
    clause, params = f.clause(tenant=None)
    total = data.hosts_known(clause, params)
    if total == 0:
        st.info(t("h_no_hosts"))
        return
    measure = st.selectbox(t("h_measure"), HOST_MEASURES, key="h_measure",
                           format_func=lambda c: ui.metric_label(c, "host_daily"))
    ui.definition(measure, "host_daily")
    cells = data.host_measure_days(measure, clause, params, TOP_HOSTS)
    st.caption(t("h_hosts_caption", shown=cells["host"].n_unique(), total=total))
    unit = (data.metric(measure, "host_daily") or {}).get("unit", "")
    percent = unit == "percent"
    chart = alt.Chart(cells.to_pandas()).mark_rect().encode(
        x=ui.day_x("day:T"),
        y=alt.Y("host:N", title=column_word("host"), sort=alt.EncodingSortField("value", op="max", order="descending")),
        color=alt.Color("value:Q", title=f"{ui.metric_label(measure, 'host_daily')} ({unit})",
                        scale=alt.Scale(scheme="orangered", **({"domain": [0, 100]} if percent else {})),
                        legend=alt.Legend(format=".0f" if percent else ".3s")),
        tooltip=[*ui.tooltip("day:T", "host:N"), alt.Tooltip("value:Q", format=".1f" if percent else ".4s")])
    ui.show(chart.properties(height=alt.Step(22)), t("ch_host_day", what=ui.metric_label(measure, "host_daily")))
    with st.expander(t("h_host_rows")):
        columns = ["day", "host", *HOST_MEASURES, "cpus", "memory_total_bytes", "minutes_with_data"]
        rows = data.view("host_daily", clause, params, columns=", ".join(columns),
                         order=f"day desc, cpu_busy_pct_p95 desc limit {ROWS}")
        ui.show_table(rows, "host_daily")


DRAIN_COLUMNS = ["decided_at", "action", "mode", "target", "target_kind", "engine", "outcome", "fault_minutes",
                 "faulty_gpus", "last_fault_at", "status_reason", "reason"]


def _drain_words(frame: pl.DataFrame) -> pl.DataFrame:
    """A decision column in words in front: a shadow step reads "would drain", never "drained"."""
    words = {f"{a}_{m}": t(f"h_{a}_{m}") for a in ("drain", "undrain") for m in ("shadow", "enforce")}
    decision = pl.concat_str("action", pl.lit("_"), "mode").replace_strict(words, default=pl.col("action"))
    return frame.select(decision.alias("decision"), pl.all())


def drains(f: filters.Filters) -> None:
    st.subheader(t("h_drains"))
    st.caption(t("h_drains_caption"))
    clause, params = f.clause(tenant=None)
    counts = data.drain_counts(filters.where(clause), params)
    cols = st.columns(3)
    ui.kpi(cols[0], "drains_decided", "drain_decisions", counts["drains_decided"])
    ui.kpi(cols[1], "drains_applied", "drain_decisions", counts["drains_applied"])
    ui.tile(cols[2], t("h_shadow_drains"), counts["shadow_drains"], "actions", help=t("h_shadow_drains_help"))
    rows = data.view("drain_decisions", clause, params, order=f"decided_at desc, target limit {ROWS}",
                     columns=", ".join(DRAIN_COLUMNS))
    if not ui.empty(rows, t("h_no_drain_decisions")):
        ui.show_table(_drain_words(rows), "drain_decisions", labels={"decision": t("decision")})
    with st.expander(t("h_drains_audited")):
        audited = data.view("enforcement_actions", filters.where(clause, "action_kind in ('drain', 'undrain')"),
                            params, order=f"occurred_at desc limit {ROWS}",
                            columns="occurred_at, action_kind, decision, object_kind, object_name, actor, policy, reason")
        if not ui.empty(audited, t("h_no_drains")):
            ui.show_table(audited, "enforcement_actions")


def draw() -> None:
    user = ui.page_user()
    ui.title("page_health")
    f = filters.sidebar(user, queue=False)
    causes(f)
    bad_gpus(f)
    mtbf(f)
    hosts(f)
    drains(f)


ui.guarded(draw)
