"""What every page shares: the guard (warehouse missing, no data), the definition of a metric
one click away, number formatting and chart helpers (Altair: every chart titled in the page's language, units in the axis
titles, at most MAX_SERIES colours, and a mark of what good looks like where the pool states one)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import altair as alt
import polars as pl
import streamlit as st

from dashboards import data, fmt
from dashboards.auth import User, current_user
from dashboards.i18n import described, label, lang, t
from pipelines.clock import duration_text, utc_naive


def page_user() -> User:
    """The signed-in user (the entry file only shows pages to one); stops the page otherwise."""
    user = current_user()
    if user is None:
        st.info(t("sign_in_needed"))
        st.stop()
    return user


def guarded(draw: Callable[[], None]) -> None:
    """Run a page's drawing; a missing warehouse, or a query stopped at a limit (time, memory, temporary disk,
    rows), becomes a message that says what to do."""
    try:
        draw()
    except data.WarehouseMissing as exc:
        st.warning(f"**{t('no_warehouse')}.** {exc}")
    except data.QueryLimitExceeded as exc:
        st.error(str(exc))


def data_as_of() -> None:
    """The sidebar's line on every page: the data's end and the release, and a warning when they are stale."""
    try:
        seen = data.as_of()
    except (data.WarehouseMissing, data.QueryLimitExceeded):
        return  # the page itself says so
    end = seen.telemetry_at or seen.published_at
    st.sidebar.caption(t("data_as_of", at=f"{end:%Y-%m-%d %H:%M}", release=seen.release,
                         published=f"{seen.published_at:%Y-%m-%d %H:%M}"))
    stale = seen.stale_by(utc_naive())
    if stale is not None:
        st.sidebar.warning(t("data_stale", age=duration_text(stale.total_seconds())) if seen.telemetry_at
                           else t("no_telemetry_yet"))


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
        st.write(described(entry))
        st.code(entry["formula"], language=None)
        st.caption(f"metrics.{view_name}.{column} · {t('definition')} v{entry['metric_version']} · "
                   f"catalog {entry['catalog_version']}")


def metric_label(column: str, view_name: str) -> str:
    return label(data.metric(column, view_name), column)


def kpi(col, column: str, view_name: str, value, unit: str | None = None, delta=None) -> None:
    """A headline tile: a short label (i18n `kpi_<column>`, else the catalog's label), the figure by its unit
    (fmt.headline: short enough to fit, no unit word for counts and GPU-hours) and the unit in the help with
    the catalog's definition. `unit` overrides the catalog's (a fmt unit: "seconds", "percent", ...)."""
    entry = data.metric(column, view_name)
    unit = unit or fmt.unit_of(column, (entry or {}).get("unit"))
    tile(col, short_label(column, entry), value, unit, described(entry), delta=delta)


def tile(col, title: str, value, unit: str | None = None, help: str | None = None, delta=None) -> None:
    """Any headline tile of the dashboards: the figure formatted by `unit` (fmt.headline), the unit's name
    added to the help."""
    name = fmt.unit_name(unit, lang())
    note = "\n\n".join(filter(None, [help, f"{t('col_unit')}: {name}" if name else None]))
    col.metric(title, fmt.headline(value, unit, lang()), delta=delta, help=note or None)


def short_label(column: str, entry: dict | None = None) -> str:
    """A tile's label: the interface's short word (`kpi_<column>`) where the catalog's label is long."""
    word = t(f"kpi_{column}")
    return word if word != f"kpi_{column}" else label(entry, column) if entry else column_label(column)


MAX_SERIES = 8  # more colours than this cannot be told apart at a glance (issue 18)
GOOD_COLOR = "#2e7d32"


@dataclass(frozen=True)
class Good:
    """What good looks like on a chart's value axis: a line at `at`, or a band from `at` to `to`, named by
    `label`. `better` says which side is good ("high", "low", or "near" the mark): a heatmap colours by it."""
    at: float
    label: str
    to: float | None = None
    better: str = "high"


def _field(shorthand: str) -> str:
    return shorthand.split(":")[0]


def _is_day(shorthand: str) -> bool:
    return shorthand.endswith(":T")


def day_format() -> str:
    """Day tick labels in the page's language: "Oct 05" or "10月05日"."""
    return "%m月%d日" if lang() == "zh" else "%b %d"


def day_x(shorthand: str, title: str | None = None) -> alt.X:
    """A day axis: one band per UTC day (bars and cells a day wide), labels that do not overlap."""
    return alt.X(f"yearmonthdate({_field(shorthand)}):T", title=title or t("day_axis"),
                 axis=alt.Axis(format=day_format(), labelAngle=0, labelOverlap="greedy", labelSeparation=8,
                               tickCount=alt.TickCount(interval="day", step=1)))  # no half-day ticks named twice


def tooltip(*shorthands: str) -> list:
    return [alt.Tooltip(_field(s), type="temporal", format="%Y-%m-%d") if _is_day(s) else s
            for s in shorthands if s]


def top_n(frame: pl.DataFrame, series: str, value: str, keys: list[str], n: int = MAX_SERIES) -> pl.DataFrame:
    """At most `n` series: the n-1 with the most `value` in the frame, the rest summed into one "others"
    series per `keys` row. Only for additive values (GPU-hours, counts, USD): a sum of ratios means nothing.
    A reshape for the chart, not a new figure: the total per key is unchanged."""
    series, value, keys = _field(series), _field(value), [_field(k) for k in keys]
    kept = series_order(frame, series, value)
    if len(kept) <= n:
        return frame
    kept = kept[:n - 1]
    rest = frame.filter(~pl.col(series).is_in(kept)).group_by(keys).agg(pl.col(value).sum()) \
        .with_columns(pl.lit(t("others")).alias(series))
    return pl.concat([frame.filter(pl.col(series).is_in(kept)).select(*keys, series, value),
                      rest.select(*keys, series, value)])


def series_order(frame: pl.DataFrame, series: str, value: str) -> list[str]:
    """Series by their total `value`, largest first, "others" last: the legend's order."""
    totals = frame.group_by(_field(series)).agg(pl.col(_field(value)).sum().alias("_total"))
    names = totals.sort(["_total", _field(series)], descending=[True, False])[_field(series)].to_list()
    return [s for s in names if s != t("others")] + [s for s in names if s == t("others")]


def good_marks(good: Good | None, axis: str = "y") -> list[alt.Chart]:
    """The "what good looks like" layers on the value axis (`axis`): a green band or dashed line, labelled
    at the chart's edge."""
    if good is None:
        return []
    frame = pl.DataFrame({"at": [good.at], "to": [good.at if good.to is None else good.to],
                          "label": [good.label]}).to_pandas()
    at = alt.Y("at:Q") if axis == "y" else alt.X("at:Q")
    base = alt.Chart(frame)
    mark = base.mark_rule(color=GOOD_COLOR, strokeDash=[6, 3], strokeWidth=2).encode(**{axis: at}) \
        if good.to is None else base.mark_rect(color=GOOD_COLOR, opacity=0.12).encode(**{axis: at, f"{axis}2": "to:Q"})
    # the label sits on the mark at the start of the other axis: above a line, left of a column
    text = base.mark_text(color=GOOD_COLOR, fontWeight="bold", baseline="bottom",
                          align="left" if axis == "y" else "right", dx=4 if axis == "y" else -4, dy=-3 if axis == "y" else 12)
    return [mark, text.encode(**{axis: at, ("x" if axis == "y" else "y"): alt.value(0)}, text="label:N")]


def chart_title(title: str, note: str | None = None) -> alt.TitleParams:
    return alt.TitleParams(title, subtitle=note or "", anchor="start", fontSize=15, subtitleFontSize=12,
                           subtitleColor="#555")


def show(chart, title: str, note: str | None = None, *, stretch: bool = True) -> None:
    """Every chart of the dashboards goes out here: titled in the page's language, with an optional note
    (what good looks like, what the colours mean) under the title."""
    st.altair_chart(chart.properties(title=chart_title(title, note)), width="stretch" if stretch else "content")


def line(frame: pl.DataFrame, x: str, y: str, color: str | None, y_title: str, *, title: str,
         x_title: str | None = None, good: Good | None = None, note: str | None = None) -> None:
    """Lines over days; with more than MAX_SERIES series the same figures as a heatmap (series x day)."""
    if color and frame[_field(color)].n_unique() > MAX_SERIES:
        heatmap(frame, x, color, y, title=title, value_title=y_title, good=good, note=note)
        return
    base = alt.Chart(frame.to_pandas()).mark_line(point=frame.height <= 40 * max(1, _series(frame, color))).encode(
        x=day_x(x, x_title) if _is_day(x) else alt.X(x, title=x_title),
        y=alt.Y(y, title=y_title),
        **({"color": alt.Color(color, title=None, sort=sorted(frame[_field(color)].unique().to_list()))}
           if color else {}),
        tooltip=tooltip(x, y, color or ""))
    show(alt.layer(base, *good_marks(good)), title, note)


def _series(frame: pl.DataFrame, color: str | None) -> int:
    return frame[_field(color)].n_unique() if color else 1


def bars(frame: pl.DataFrame, x: str, y: str, color: str | None, y_title: str, *, title: str,
         x_title: str | None = None, horizontal: bool = False, stack: bool = True, good: Good | None = None,
         note: str | None = None) -> None:
    """Bars per day (or per category); stacked bars add up, so past MAX_SERIES colours the smallest series
    are summed into "others" (top_n)."""
    enc = {}
    if color:
        if stack and frame[_field(color)].n_unique() > MAX_SERIES:
            frame = top_n(frame, color, y, [x])
            note = "  ·  ".join(filter(None, [note, t("top_note", n=MAX_SERIES - 1)]))
        enc["color"] = alt.Color(color, title=None, sort=series_order(frame, color, y),
                                 legend=alt.Legend(labelLimit=260))
    category = day_x(x, x_title) if _is_day(x) else alt.X(x, title=x_title, axis=alt.Axis(labelLimit=260))
    if horizontal:
        enc |= {"x": alt.X(y, title=y_title, stack=stack),
                "y": alt.Y(_field(x), type="nominal", title=x_title, sort="-x", axis=alt.Axis(labelLimit=260))}
    else:
        enc |= {"x": category, "y": alt.Y(y, title=y_title, stack=stack)}
    base = alt.Chart(frame.to_pandas()).mark_bar().encode(**enc, tooltip=tooltip(x, y, color or ""))
    show(alt.layer(base, *good_marks(good, "x" if horizontal else "y")), title, note)


def heatmap(frame: pl.DataFrame, x: str, y: str, value: str, *, title: str, value_title: str,
            y_title: str | None = None, good: Good | None = None, note: str | None = None) -> None:
    """One row per series, one cell per day, the value as colour: many series readable at once. With a
    `good` mark the colours diverge from it (green the good side, or white at the mark when "near" is good)."""
    scale = alt.Scale(scheme="viridis", reverse=True)
    if good is not None:
        scale = alt.Scale(scheme="blueorange", domainMid=good.at) if good.better == "near" else \
            alt.Scale(scheme="redyellowgreen", domainMid=good.at, reverse=good.better == "low")
    chart = alt.Chart(frame.to_pandas()).mark_rect().encode(
        x=day_x(x),
        y=alt.Y(y, title=y_title, sort="ascending", axis=alt.Axis(labelLimit=260, labelOverlap=False)),
        color=alt.Color(value, title=value_title, scale=scale, legend=alt.Legend(format=",.0f", gradientLength=160)),
        tooltip=tooltip(x, y, value))
    show(chart.properties(height=alt.Step(20)), title, "  ·  ".join(filter(None, [good.label if good else None, note])))


def title(key: str) -> None:
    st.title(t(key))
    st.html(f'<span data-testid="gpupool-page" data-page="{key}" data-lang="{lang()}"></span>')


UNLABELLED: set[str] = set()  # columns shown without a label of their own (a test keeps this empty)


def column_label(column: str, view_name: str | None = None) -> str:
    """A column's heading in the page's language: the catalog's label of the view's metric, else the
    interface's word (i18n `col_<column>`, or pipelines/labels.py), else the catalog's label of a column of
    that name in another view; never the raw key (a column with none of these reads as words, and is
    noted in UNLABELLED, which the tests keep empty)."""
    entry = data.metric(column, view_name) if view_name else None
    if entry:
        return label(entry, column)
    word = t(f"col_{column}")
    if word != f"col_{column}":
        return word
    entry = data.metric_of_column(column)
    if entry:
        return label(entry, column)
    UNLABELLED.add(column)
    return column.replace("_", " ").strip().capitalize()


def show_table(frame: pl.DataFrame, view_name: str | None = None, *, labels: dict[str, str] | None = None,
               units: dict[str, str | None] | None = None, key: str | None = None, stretch: bool = True, **select):
    """Every table of the dashboards goes out here: each column headed by its label in the page's language
    (column_label; `labels` overrides), each value written by its unit (fmt.value: durations, %, GPU-hours,
    USD, ✓/–, – for nothing; `units` overrides the catalog's and the name's), the catalog's definition as
    the heading's help. The frame shown keeps the columns' keys (the labels are the column_config's), so
    a row picked (`on_select`, `selection_mode` in `select`) is the same row of `frame`."""
    labels, units = labels or {}, units or {}
    language = lang()
    shown, config = {}, {}
    for column in frame.columns:
        series = frame[column]
        entry = (data.metric(column, view_name) if view_name else None) or data.metric_of_column(column)
        unit = units[column] if column in units else fmt.unit_of(column, (entry or {}).get("unit"), str(series.dtype))
        shown[column] = [fmt.value(v, unit, language) for v in series.to_list()]
        numeric = series.dtype.is_numeric() and unit not in ("flag",)
        config[column] = st.column_config.TextColumn(
            labels.get(column) or column_label(column, view_name), help=described(entry),
            alignment="right" if numeric else "center" if unit == "flag" else None)
    table = pl.DataFrame(shown, schema={c: pl.String for c in frame.columns})
    return st.dataframe(table, hide_index=True, width="stretch" if stretch else "content", key=key,
                        column_config=config, **select)
