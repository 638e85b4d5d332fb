"""Metric catalog: every metric's definition (in the page's language), formula, unit, grain, the view and column that hold it,
and its labels in English and Chinese (metrics.catalog, built from models/catalog/), searchable and
grouped (resource, task, governance). The search and the group are kept in the URL
(`?q=wait&group=resource`)."""
import polars as pl
import streamlit as st

from dashboards import data, filters, ui
from dashboards.i18n import described, description_column, lang, t

GROUPS = ("resource", "task", "governance")
SEARCHED = ("metric_name", "label_en", "label_zh", "description", "description_zh", "formula", "view_name",
            "column_name", "also_in", "source_fields", "grain", "unit")


def matching(catalog: pl.DataFrame, query: str, group: str | None) -> pl.DataFrame:
    """Catalog rows whose text contains the query (case-insensitive), in the group if one is chosen."""
    rows = catalog if group is None else catalog.filter(pl.col("metric_group") == group)
    words = query.strip().lower().split()
    if not words:
        return rows
    text = pl.concat_str([pl.col(c).fill_null("") for c in SEARCHED], separator=" ").str.to_lowercase()
    return rows.filter(pl.all_horizontal(text.str.contains(w, literal=True) for w in words))


def table(rows: pl.DataFrame) -> pl.DataFrame:
    """The catalog's rows as the table shows them (keys; ui.show_table heads them in the page's language): the
    definition in the page's language."""
    label = "label_zh" if lang() == "zh" else "label_en"
    definition = description_column()
    return rows.select(
        pl.col(label).alias("metric"), "label_en", "label_zh", "unit", "grain", pl.col("metric_type").alias("type"),
        pl.concat_str("view_name", pl.lit("."), "column_name").alias("where"), "formula", pl.col(definition).alias("description"),
        pl.col("metric_name").alias("name"), pl.col("metric_version").alias("version"))


def detail(rows: pl.DataFrame) -> None:
    """One metric's full card: the definition one click away from the table."""
    names = rows["metric_name"].to_list()
    current = st.query_params.get("metric")
    label = "label_zh" if lang() == "zh" else "label_en"
    labels = dict(zip(rows["metric_name"], rows[label], strict=True))
    name = st.selectbox(t("c_detail"), names, index=names.index(current) if current in names else 0,
                        format_func=lambda n: f"{labels[n]} · {n}", key="c_metric")
    st.query_params["metric"] = name
    m = rows.filter(pl.col("metric_name") == name).row(0, named=True)
    with st.container(border=True):
        st.markdown(f"#### {m['label_en']} · {m['label_zh']}")
        st.write(described(m))
        st.code(m["formula"], language=None)
        left, right = st.columns(2)
        left.markdown(f"**{t('col_unit')}:** {m['unit']}  \n**{t('col_grain')}:** {m['grain']}  \n"
                      f"**{t('col_type')}:** {m['metric_type']}  \n**{t('col_version')}:** {m['metric_version']}")
        right.markdown(f"**{t('col_where')}:** `{m['view_name']}.{m['column_name']}`  \n"
                       + (f"**{t('col_also_in')}:** {m['also_in']}  \n" if m["also_in"] else "")
                       + f"**{t('col_sources')}:** {m['source_fields']}")


def draw() -> None:
    ui.page_user()
    ui.title("page_catalog")
    catalog = data.catalog()
    if ui.empty(catalog, t("c_no_catalog")):
        return
    st.caption(t("c_version", version=catalog["catalog_version"][0], count=catalog.height))
    query, group = filters.search_and_choice(t("c_search"), t("c_group"), GROUPS, param="group", key="c_group",
                                             choice_label_of=lambda g: t(f"group_{g}"))
    rows = matching(catalog, query, group)
    if ui.empty(rows, t("c_no_match")):
        return
    for g in GROUPS:
        part = rows.filter(pl.col("metric_group") == g)
        if part.is_empty():
            continue
        st.subheader(f"{t(f'group_{g}')} ({part.height})")
        ui.show_table(table(part), key=f"c_table_{g}", stretch=False)
    detail(rows)


ui.guarded(draw)
