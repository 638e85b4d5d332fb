"""Data quality and freshness: the last ingest per source, records loaded and quarantined (with the
reasons), asset-check results, telemetry gaps of the scrapes, and where allocations and telemetry
disagree. Reads metrics.ingest_freshness, ingest_daily, quarantine_reasons, check_results,
scrape_gaps and telemetry_reconciliation."""
import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import column_word, t

ROW_LIMIT = 500


def freshness(user) -> None:
    st.subheader(t("q_freshness"))
    ui.definition("hours_since_last_ingest", "ingest_freshness")
    fresh = data.view("ingest_freshness", order="ingest_source")
    if ui.empty(fresh, t("q_no_ingest")):
        return
    ui.show_table(fresh.select("ingest_source", "last_ingested_at", "hours_since_last_ingest", "first_day", "last_day",
                               "days_loaded", "runs", "records_read", "records_loaded", "records_quarantined",
                               "quarantined_pct"), "ingest_freshness", key="q_fresh", stretch=False)


def loaded(f: filters.Filters) -> None:
    st.subheader(t("q_loaded"))
    where, params = f.clause(tenant=None)
    daily = data.view("ingest_daily", where, params, order="day, ingest_source")
    if ui.empty(daily, t("q_no_ingest")):
        return
    cols = st.columns(3)
    # records are additive: the period's figure is the sum of the days'
    ui.kpi(cols[0], "records_loaded", "ingest_daily", int(daily["records_loaded"].sum()))
    ui.kpi(cols[1], "records_quarantined", "ingest_daily", int(daily["records_quarantined"].sum()))
    with cols[2]:
        ui.definition("quarantined_pct", "ingest_daily")
    long = daily.unpivot(index=["day", "ingest_source"], on=["records_loaded", "records_quarantined"],
                         variable_name="what", value_name="records")
    loaded_label = ui.metric_label("records_loaded", "ingest_daily")
    ui.bars(long.filter(pl.col("what") == "records_loaded"), "day:T", "records:Q", "ingest_source:N",
            f"{loaded_label} ({t('records')})", title=t("ch_by_day", what=loaded_label, by=column_word("source")))
    if daily["records_quarantined"].sum() > 0:
        quarantined = ui.metric_label("records_quarantined", "ingest_daily")
        ui.bars(long.filter(pl.col("what") == "records_quarantined"), "day:T", "records:Q", "ingest_source:N",
                f"{quarantined} ({t('records')})", title=t("ch_by_day", what=quarantined, by=column_word("source")),
                note=t("good_lower"))


def quarantine(user, f: filters.Filters) -> None:
    st.subheader(t("q_quarantine"))
    ui.definition("quarantined_rows", "quarantine_reasons")
    where, params = f.clause(tenant=None)
    reasons = data.view("quarantine_reasons", where, params, order="quarantined_rows desc, day desc")
    if reasons.is_empty():
        st.success(t("q_no_quarantine"))
        return
    shown = ["day", "ingest_source", "source", "stage", "reason", "quarantined_rows", "files", "example_file",
             "example_line"]
    if user.is_operator:  # the raw record may name another tenant's job
        shown.append("example_raw")
    ui.show_table(reasons.head(ROW_LIMIT).select(shown), "quarantine_reasons", key="q_reasons", stretch=False)
    if reasons.height > ROW_LIMIT:
        st.caption(t("showing_rows", shown=ROW_LIMIT, total=reasons.height))


def checks(user, f: filters.Filters) -> None:
    st.subheader(t("q_checks"))
    ui.definition("unexpected_count", "check_results")
    where, params = f.clause(tenant=None)
    # unpartitioned checks (the warehouse-wide ones) have no day: they always apply
    results = data.view("check_results", f"({where}) or day is null", params,
                        order="is_failed desc, day desc nulls first, check_name, asset")
    if ui.empty(results, t("q_no_checks")):
        return
    failed = results.filter(pl.col("is_failed"))
    cols = st.columns(2)
    ui.tile(cols[0], t("q_checks_run"), results.height, "count")
    ui.tile(cols[1], t("q_checks_failed"), failed.height, "count")
    if failed.is_empty():
        st.success(t("q_all_passed"))
    shown = ["check_name", "asset", "day", "passed", "severity", "unexpected_count", "checked_at"]
    if user.is_operator:
        shown.append("metadata_json")
    ui.show_table(results.head(ROW_LIMIT).select(shown), "check_results", key="q_checks", stretch=False)


def scrape_gaps(f: filters.Filters) -> None:
    st.subheader(t("q_gaps"))
    ui.definition("gaps", "scrape_gaps")
    where, params = f.clause(tenant=None)
    gaps = data.view("scrape_gaps", where, params, order="day, target, error_kind")
    if ui.empty(gaps, t("q_no_gaps")):
        return
    gaps_label = ui.metric_label("gaps", "scrape_gaps")
    ui.bars(gaps, "day:T", "gaps:Q", "error_kind:N", f"{gaps_label} ({t('gaps_unit')})",
            title=t("ch_by_day", what=gaps_label, by=t("error_kind")), note=t("good_lower"))
    ui.show_table(gaps.sort("gaps", descending=True).head(ROW_LIMIT), "scrape_gaps", key="q_gaps", stretch=False)


def reconciliation(user, f: filters.Filters) -> None:
    st.subheader(t("q_reconciliation"))
    ui.definition("gpu_hours", "telemetry_reconciliation")
    where, params = f.clause(tenant=None, gpu_model="gpu_model")
    findings = data.view("telemetry_reconciliation", where, params, order="gpu_hours desc")
    if findings.is_empty():
        st.success(t("q_no_findings"))
        return
    # pool-level: GPU-hours per finding and day (additive), without naming anyone
    findings_label = ui.metric_label("gpu_hours", "telemetry_reconciliation")
    ui.bars(findings.select("day", "finding", "gpu_hours"), "day:T", "gpu_hours:Q", "finding:N",
            f"{findings_label} ({t('gpu_hours_unit')})", title=t("ch_by_day", what=findings_label, by=t("finding")),
            note=t("good_lower"))
    columns = ["finding", "day", "host", "gpu", "gpu_instance_id", "gpu_model", "minutes", "gpu_hours",
               "mean_activity", "tenant", "job_id", "allocation_id", "telemetry_hpc_job", "telemetry_k8s_pod",
               "detail", "first_at", "last_at"]
    if user.is_operator:
        rows = findings
    else:  # only findings on their own tenant's allocations
        st.caption(t("q_own_findings"))
        rows = findings.filter(pl.col("tenant") == user.tenant)
        if ui.empty(rows, t("q_no_findings")):
            return
    ui.show_table(rows.head(ROW_LIMIT).select(columns), "telemetry_reconciliation", key="q_findings", stretch=False,
                  units={"mean_activity": None})
    if rows.height > ROW_LIMIT:
        st.caption(t("showing_rows", shown=ROW_LIMIT, total=rows.height))


def draw() -> None:
    user = ui.page_user()
    ui.title("page_quality")
    f = filters.sidebar(user, tenant=False, queue=False, gpu_model=True)
    freshness(user)
    loaded(f)
    quarantine(user, f)
    checks(user, f)
    scrape_gaps(f)
    reconciliation(user, f)


ui.guarded(draw)
