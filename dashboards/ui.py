"""What every page shares: the guard (warehouse missing, no data), the definition of a metric
one click away, number formatting and chart helpers (Altair, with units in the axis titles)."""
from __future__ import annotations

from collections.abc import Callable

import altair as alt
import polars as pl
import streamlit as st

from dashboards import data
from dashboards.auth import User, current_user
from dashboards.i18n import label, lang, t


def page_user() -> User:
    """The signed-in user (the entry file only shows pages to one); stops the page otherwise."""
    user = current_user()
    if user is None:
        st.info(t("sign_in_needed"))
        st.stop()
    return user


def guarded(draw: Callable[[], None]) -> None:
    """Run a page's drawing; a missing warehouse becomes a message that says what to do."""
    try:
        draw()
    except data.WarehouseMissing as exc:
        st.warning(f"**{t('no_warehouse')}.** {exc}")


def empty(frame: pl.DataFrame, why: str | None = None) -> bool:
    """True (and says why) when there is nothing to show."""
    if frame.is_empty():
        st.info(why or t("no_data_period"))
        return True
    return False


def definition(column: str, view_name: str) -> None:
    """The catalog's definition of a metric behind a small popover."""
    entry = data.metric(column, view_name)
    if entry is None:
        return
    with st.popover(f"ⓘ {label(entry, column)}", width="content"):
        st.markdown(f"**{label(entry, column)}** ({entry['unit']})")
        st.write(entry["description"])
        st.code(entry["formula"], language=None)
        st.caption(f"metrics.{view_name}.{column} · {t('definition')} v{entry['metric_version']} · "
                   f"catalog {entry['catalog_version']}")


def metric_label(column: str, view_name: str) -> str:
    return label(data.metric(column, view_name), column)


def kpi(col, column: str, view_name: str, value, unit: str = "", delta=None) -> None:
    text = "n/a" if value is None else (f"{value:,.1f}{unit}" if isinstance(value, float) else f"{value:,}{unit}")
    col.metric(metric_label(column, view_name), text, delta=delta,
               help=(data.metric(column, view_name) or {}).get("description"))


def line(frame: pl.DataFrame, x: str, y: str, color: str | None, y_title: str, x_title: str = "") -> None:
    chart = alt.Chart(frame.to_pandas()).mark_line(point=False).encode(
        x=alt.X(x, title=x_title or None), y=alt.Y(y, title=y_title),
        **({"color": alt.Color(color, title=None)} if color else {}),
        tooltip=list(filter(None, [x, y, color])),
    )
    st.altair_chart(chart, width="stretch")


def bars(frame: pl.DataFrame, x: str, y: str, color: str | None, y_title: str, *, horizontal: bool = False,
         stack: bool = True) -> None:
    enc = {"x": alt.X(y, title=y_title, stack=stack), "y": alt.Y(x, title=None, sort="-x")} if horizontal else \
        {"x": alt.X(x, title=None), "y": alt.Y(y, title=y_title, stack=stack)}
    if color:
        enc["color"] = alt.Color(color, title=None)
    chart = alt.Chart(frame.to_pandas()).mark_bar().encode(**enc, tooltip=list(filter(None, [x, y, color])))
    st.altair_chart(chart, width="stretch")


def title(key: str) -> None:
    st.title(t(key))
    st.html(f'<span data-testid="gpupool-page" data-page="{key}" data-lang="{lang()}"></span>')


def column_labels(view_name: str, columns: list[str], **formats: str) -> dict:
    """st.dataframe column_config naming each of a view's columns by its catalog label, else by the
    interface's word for it (i18n `col_<column>`; the raw name when neither has one), with number
    formats by column where given."""
    config = {}
    for column in columns:
        entry = data.metric(column, view_name)
        name = label(entry, column) if entry else t(f"col_{column}")
        name = column if name == f"col_{column}" else name
        config[column] = (st.column_config.NumberColumn(name, format=formats[column]) if column in formats
                          else st.column_config.Column(name, help=(entry or {}).get("description")))
    return config
