"""Capacity: the month's recommendations with their evidence and the what-if replay's predicted
effect, headroom at the hourly peak and p95 per GPU model (and per queue against its quota), and
the weekly trend with its straight-line forecast. Reads metrics.capacity_recommendations,
capacity_headroom and capacity_trend."""
import json

import altair as alt
import polars as pl
import streamlit as st

from dashboards import data, filters, fmt, ui
from dashboards.i18n import lang, t
from pipelines.labels import COVERAGE_KINDS, COVERAGE_WORDS, coverage_phrase

CONFIDENCE_COLORS = {"high": "#2e7d32", "medium": "#f9a825", "low": "#c62828"}


def _figures(evidence: dict, language: str = "en") -> pl.DataFrame:
    """An object of figures as rows (figure, value): the figure's key (the page names it, ui.column_label),
    its value written by the unit its name says; lists are joined, nested objects flattened."""
    rows: list[dict] = []

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        else:
            rows.append({"figure": prefix, "value": fmt.value(value, fmt.unit_of(prefix.rsplit(".", 1)[-1]), language)})

    walk("", evidence)
    return pl.DataFrame(rows, schema={"figure": pl.String, "value": pl.String})


def _coverage(coverage: dict, language: str = "en") -> tuple[str, pl.DataFrame]:
    """An advice's data coverage (pipelines/coverage.py, Coverage.as_dict): the period's line, and one row
    per kind of source the release holds or the figures require: its name, days with data, whether the
    figures require it, its ingest sources."""
    period = coverage_phrase(coverage["days_with_data"], coverage["days_in_period"], language)
    line = f"{period} · {coverage['first_day']} – {coverage['last_day']} · {coverage['view']}"
    rows = [{"kind": COVERAGE_KINDS.get(kind, COVERAGE_KINDS["other"])[language],
             "days_with_data": (fmt.value(k["days_with_data"], None, language) if k["collected"]
                                else COVERAGE_WORDS["not_collected"][language]),
             "required": fmt.value(k["required"], "flag", language),
             "coverage_sources": fmt.value(k["sources"], None, language)}
            for kind, k in coverage["by_source"].items() if k["collected"] or k["required"]]
    return line, pl.DataFrame(rows, schema={c: pl.String for c in ("kind", "days_with_data", "required",
                                                                   "coverage_sources")})


def _whatif(text: str, language: str = "en") -> pl.DataFrame:
    """The what-if result as a baseline / changed (/ observed) table, one measure a row: its key (the page
    names it, _measure) and its values written by its unit (minutes of wait as durations, %, GPU-hours)."""
    doc = json.loads(text)
    rows = []
    for key, value in doc.items():
        if isinstance(value, dict) and key != "search":
            unit = fmt.unit_of(key)
            rows.append({"measure": key,
                         **{c: fmt.value(value.get(c), unit, language) for c in ("baseline", "changed", "observed")}})
    return pl.DataFrame(rows, schema={c: pl.String for c in ("measure", "baseline", "changed", "observed")})


def _measure(key: str) -> str:
    """A what-if measure's name; one model's wait (`wait_p95_<model>_min`) names the model."""
    if key.startswith("wait_p95_") and key not in ("wait_p95_min",):
        return t("col_wait_p95_model_min", model=key.removeprefix("wait_p95_").removesuffix("_min"))
    return ui.column_label(key)


def _wait_cause(cause: str | None) -> str:
    """A wait cause (capacity_bound, quota_bound, fragmentation, policy) in words."""
    if cause is None:
        return fmt.MISSING
    return t("policy") if cause == "policy" else t(f"wait_{cause}")


def _flags(text: str) -> str:
    """The what-if's flags in words: "Confirms: ✓ · Replay time: 7 min 33 s"."""
    flags = {k: v for k, v in json.loads(text).items() if not isinstance(v, dict)}
    return " · ".join(f"{ui.column_label(k)}: {fmt.value(v, fmt.unit_of(k), lang())}" for k, v in flags.items())


def _search_curve(text: str) -> tuple[dict, pl.DataFrame] | None:
    """The smallest-change search stored with the advice (pipelines.capacity.recommend.search_summary):
    its summary and the curve it replayed, one row per size; None when the advice was not searched."""
    search = json.loads(text).get("search")
    if not search:
        return None
    decided_by = search["decided_by"]
    columns = ["change", decided_by, "wait_p95_min", "pool_utilisation_pct", "share_of_full_effect", "sufficient"]
    curve = pl.DataFrame(search["curve"]).select(list(dict.fromkeys(columns)))  # the pool's own wait: once
    return search, curve


def recommendations(f: filters.Filters) -> None:
    st.subheader(t("recommendations"))
    ui.definition("recommendation", "capacity_recommendations")
    months = data.recommendation_months()
    if ui.empty(months, t("no_recommendations")):
        return
    month = st.selectbox(t("month"), months[:, 0].to_list(), format_func=lambda d: d.strftime("%Y-%m"),
                         key="cap_month")
    # quota advice names tenants: a tenant member sees the pool-wide advice and the advice about their tenant
    scope = "tenant is null or tenant = ? or json_extract_string(evidence_json, '$.donor_tenant') = ?"
    clause, params = filters.where("period_month = ?", "? is null or gpu_model is null or gpu_model = ?",
                           f"? is null or {scope}"), (month, f.gpu_model, f.gpu_model, f.tenant, f.tenant, f.tenant)
    recs = data.view("capacity_recommendations", clause, params, order="rank")
    if ui.empty(recs, t("no_recommendations")):
        return
    text_col = "recommendation_zh" if lang() == "zh" else "recommendation"
    chart = alt.Chart(recs.select("rank", "target", "kind", "confidence", "impact_gpu_hours").to_pandas()).mark_bar()
    chart = chart.encode(
        x=alt.X("impact_gpu_hours:Q", title=f"{ui.metric_label('recommendation', 'capacity_recommendations')} "
                                            f"({t('impact_gpu_hours')}, GPU-h)"),
        y=alt.Y("target:N", sort=alt.SortField("rank"), title=None, axis=alt.Axis(labelLimit=260)),
        color=alt.Color("confidence:N", scale=alt.Scale(domain=list(CONFIDENCE_COLORS),
                                                        range=list(CONFIDENCE_COLORS.values())), title=None),
        tooltip=["rank", "kind", "target", "confidence", "impact_gpu_hours"])
    ui.show(chart, t("ch_recs"))
    for rec in recs.iter_rows(named=True):
        head = f"#{rec['rank']} · {rec['kind']} · {rec['target']} · {t('confidence')}: {rec['confidence']}"
        with st.expander(head, expanded=rec["rank"] == recs["rank"].min()):
            st.markdown(rec[text_col] or rec["recommendation"])
            cols = st.columns(4)
            cols[0].metric(t("quantity"), fmt.quantity(rec["quantity"], rec["unit"], lang()))
            ui.tile(cols[1], t("kpi_impact_gpu_hours"), rec["impact_gpu_hours"], "gpu_hours",
                    help=t("col_impact_gpu_hours"))
            cols[2].metric(t("confidence"), f"{t('conf_' + rec['confidence'])} ({rec['confidence_score']:.2f})")
            cols[3].metric(t("wait_cause"), _wait_cause(rec["wait_cause"]))
            left, right = st.columns(2)
            with left:
                st.markdown(f"**{t('evidence')}**")
                evidence = json.loads(rec["evidence_json"]) if rec["evidence_json"] else {}
                coverage = evidence.pop("coverage", None)
                figures = _figures(evidence, lang())
                ui.show_table(figures.with_columns(pl.Series("figure", [ui.column_label(k.rsplit(".", 1)[-1])
                                                                        for k in figures["figure"]], pl.String)),
                              labels={"figure": t("figure"), "value": t("value")})
                if coverage:
                    line, kinds = _coverage(coverage, lang())
                    (st.warning if coverage["partial"] else st.markdown)(f"**{t('coverage')}**: {line}")
                    ui.show_table(kinds, labels={"kind": t("coverage_kind"), "coverage_sources": t("coverage_sources")})
            with right:
                st.markdown(f"**{t('whatif')}**")
                if rec["whatif_json"]:
                    measures = _whatif(rec["whatif_json"], lang())
                    measures = measures.with_columns(pl.Series("measure", [_measure(k) for k in measures["measure"]],
                                                               pl.String))
                    ui.show_table(measures, labels={
                        "measure": t("measure"), "baseline": t("wi_baseline"), "changed": t("wi_changed"),
                        "observed": t("observed")})
                    st.caption(_flags(rec["whatif_json"]))
                else:
                    st.caption(t("not_replayed"))
            searched = _search_curve(rec["whatif_json"]) if rec["whatif_json"] else None
            if searched:
                search, curve = searched
                st.markdown(f"**{t('smallest_change')}**: {search['smallest_change'] or t('no_sufficient_change')}")
                decided_by = search["decided_by"]
                ui.show_table(curve, labels={decided_by: _measure(decided_by)}, units={decided_by: "minutes"})
            st.caption(f"{rec['recommendation_id']} · rules {rec['rules_version']} · {rec['recommended_at']:%Y-%m-%d %H:%M} UTC")


def headroom(f: filters.Filters) -> None:
    st.subheader(t("headroom"))
    ui.definition("headroom_at_p95_gpus", "capacity_headroom")
    model, model_params = "? is null or gpu_model = ?", (f.gpu_model, f.gpu_model)
    period = data.view("capacity_headroom", filters.where("window_kind = 'period'", "queue = 'all'", model), model_params,
                       order="gpu_model")
    if ui.empty(period, t("no_headroom")):
        return
    p = period.row(0, named=True)
    st.caption(t("headroom_window", start=p["window_start_at"], end=p["window_end_at"], hours=p["hours"]))
    long = period.select("gpu_model", "capacity_gpus", "peak_allocated_gpus", "p95_allocated_gpus",
                         "p95_demand_gpus").unpivot(index="gpu_model", variable_name="measure", value_name="gpus")
    names = {c: ui.metric_label(c, "capacity_headroom") for c in ("p95_allocated_gpus", "p95_demand_gpus")}
    names |= {"capacity_gpus": t("capacity_gpus"), "peak_allocated_gpus": t("peak_allocated_gpus")}
    long = long.with_columns(pl.col("measure").replace(names))
    chart = alt.Chart(long.to_pandas()).mark_bar().encode(
        x=alt.X("gpu_model:N", title=t("gpu_model"), axis=alt.Axis(labelAngle=0)), xOffset="measure:N",
        y=alt.Y("gpus:Q", title="GPUs"),
        color=alt.Color("measure:N", title=None, legend=alt.Legend(labelLimit=300)),
        tooltip=["gpu_model", "measure", "gpus"])
    ui.show(chart, t("ch_headroom_p95"))
    ui.show_table(period.select("gpu_model", "capacity_gpus", "peak_allocated_gpus", "p95_allocated_gpus",
                                "headroom_at_peak_gpus", "headroom_at_p95_gpus", "utilisation_at_peak_pct",
                                "utilisation_at_p95_pct", "p95_demand_gpus", "mean_pending_gpus"), "capacity_headroom")

    weeks = data.view("capacity_headroom", filters.where("window_kind = 'week'", "queue = 'all'", model), model_params,
                      order="gpu_model, weeks_before_end desc",
                      columns="gpu_model, window_start_at, headroom_at_p95_gpus, is_complete_week")
    if not weeks.is_empty():
        headroom = ui.metric_label("headroom_at_p95_gpus", "capacity_headroom")
        ui.line(weeks, "window_start_at:T", "headroom_at_p95_gpus:Q", "gpu_model:N", f"{headroom} (GPUs)",
                title=t("ch_per_week_model", what=headroom), x_title=t("week_axis"),
                good=ui.Good(0, t("good_headroom")))

    clause = filters.where("window_kind = 'period'", "queue <> 'all'", model, "? is null or tenant = ?")
    queues = data.view("capacity_headroom", clause, (*model_params, f.tenant, f.tenant), order="gpu_model, queue",
                       columns="gpu_model, queue, tenant, quota_gpus, peak_allocated_gpus, p95_allocated_gpus, "
                               "quota_headroom_at_peak_gpus, quota_headroom_at_p95_gpus, quota_usage_at_p95_pct")
    st.markdown(f"**{t('queue_headroom')}**")
    ui.definition("quota_headroom_at_p95_gpus", "capacity_headroom")
    if not ui.empty(queues):
        ui.show_table(queues, "capacity_headroom")


def trend(f: filters.Filters) -> None:
    st.subheader(t("trend"))
    ui.definition("trend_demand_gpu_hours", "capacity_trend")
    weeks = data.view("capacity_trend", "? is null or gpu_model = ?", (f.gpu_model, f.gpu_model),
                      order="gpu_model, week_x")
    if ui.empty(weeks, t("no_trend")):
        return
    series = {"allocated_gpu_hours": ("allocated", "observed"), "demand_gpu_hours": ("demand", "observed"),
              "trend_allocated_gpu_hours": ("allocated", "trend_line"), "trend_demand_gpu_hours": ("demand", "trend_line")}
    # a partial week's GPU-hours are not comparable with a whole one's (the fit leaves it out too)
    long = weeks.filter(pl.col("is_complete_week")).select("gpu_model", "week_start_at", "is_forecast", *series).unpivot(
        index=["gpu_model", "week_start_at", "is_forecast"], variable_name="column", value_name="gpu_hours").drop_nulls(
        "gpu_hours").with_columns(
        measure=pl.col("column").replace({k: t(v[0]) for k, v in series.items()}),
        line=pl.col("column").replace({k: t(v[1]) for k, v in series.items()}))
    if ui.empty(long, t("no_trend")):
        return
    chart = alt.Chart(long.to_pandas()).mark_line(point=True).encode(
        x=alt.X("week_start_at:T", title=t("week_axis"), axis=alt.Axis(format=ui.day_format(), labelOverlap="greedy")),
        y=alt.Y("gpu_hours:Q", title=t("gpu_hours_per_week")),
        color=alt.Color("measure:N", title=None), strokeDash=alt.StrokeDash("line:N", title=None),
        tooltip=["gpu_model", "week_start_at", "measure", "line", "gpu_hours", "is_forecast"],
    ).properties(height=160).facet(row=alt.Row("gpu_model:N", title=None))
    ui.show(chart, t("ch_trend"), stretch=False)
    fit = weeks.filter(pl.col("weeks_before_end") == 0).select(
        "gpu_model", "capacity_gpus", "trend_weeks_used", "allocated_slope_gpu_hours_per_week", "allocated_trend_r2",
        "p95_slope_gpus_per_week", "p95_trend_r2", "demand_slope_gpu_hours_per_week", "demand_trend_r2")
    st.caption(t("trend_caption"))
    ui.show_table(fit, "capacity_trend")


def draw() -> None:
    user = ui.page_user()
    ui.title("page_capacity")
    f = filters.sidebar(user, queue=False)
    recommendations(f)
    headroom(f)
    trend(f)


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import the JSON readers above
    ui.guarded(draw)
