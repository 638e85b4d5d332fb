"""Filters kept in the URL (st.query_params) so a view can be shared: the sidebar's period, tenant,
queue and GPU model (`?from=2026-11-01&to=2026-11-30&tenant=vision&queue=vision-train&model=H100&lang=zh`),
a page's search box beside a single choice (`?q=reclaim&category=enforcement`), and the WHERE
fragments the data.py queries take."""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import streamlit as st

from dashboards import data
from dashboards.auth import User, tenant_scope
from dashboards.i18n import t


@dataclass(frozen=True)
class Filters:
    start: dt.date
    end: dt.date  # inclusive
    tenant: str | None  # None: all (operators only; a tenant member is pinned to theirs)
    queue: str | None
    gpu_model: str | None

    def day_clause(self, column: str = "day") -> tuple[str, tuple]:
        return f"{column} between ? and ?", (self.start, self.end)

    def clause(self, *, day: str | None = "day", tenant: str | None = "tenant", queue: str | None = None,
               gpu_model: str | None = None) -> tuple[str, tuple]:
        """A WHERE fragment and its parameters for the columns a view has (None: it lacks it)."""
        parts, params = [], []
        if day:
            parts.append(f"cast({day} as date) between ? and ?")
            params += [self.start, self.end]
        for column, value in ((tenant, self.tenant), (queue, self.queue), (gpu_model, self.gpu_model)):
            if column and value:
                parts.append(f"{column} = ?")
                params.append(value)
        return " and ".join(parts), tuple(params)


def where(*fragments: str) -> str:
    """The non-empty fragments joined with `and` ("true" when none)."""
    return " and ".join(f"({x})" for x in fragments if x) or "true"


def _param_date(name: str, default: dt.date) -> dt.date:
    try:
        return dt.date.fromisoformat(st.query_params.get(name, ""))
    except ValueError:
        return default


def sidebar(user: User, *, tenant: bool = True, queue: bool = True, gpu_model: bool = True) -> Filters:
    """Draw the filters in the sidebar from (and into) the URL; the period defaults to the data's."""
    first, last = data.bounds() or (dt.date.today(), dt.date.today())
    start = max(_param_date("from", first), first)
    end = min(_param_date("to", last), last)
    if end < start:
        start, end = first, last
    picked = st.sidebar.date_input(t("period"), (start, end), min_value=first, max_value=last, key="f_period")
    if isinstance(picked, tuple) and len(picked) == 2:
        start, end = picked
    st.query_params["from"], st.query_params["to"] = start.isoformat(), end.isoformat()

    def choose(key: str, label: str, options: list[str]) -> str | None:
        current = st.query_params.get(key)
        choices = [t("all"), *options]
        index = choices.index(current) if current in choices else 0
        value = st.sidebar.selectbox(label, choices, index=index, key=f"f_{key}")
        if value == t("all"):
            st.query_params.pop(key, None)
            return None
        st.query_params[key] = value
        return value

    pinned = tenant_scope(user)
    chosen_tenant = pinned
    if tenant and pinned is None:
        chosen_tenant = choose("tenant", t("tenant"), data.tenants())
    elif pinned is not None:
        st.sidebar.caption(t("tenant_scope", tenant=pinned))
    chosen_queue = None
    if queue:
        chosen_queue = choose("queue", t("queue"), data.queues(pinned))
    chosen_model = choose("model", t("gpu_model"), data.gpu_models()) if gpu_model else None
    return Filters(start, end, chosen_tenant, chosen_queue, chosen_model)


def _keep(name: str, value: str) -> None:
    if value:
        st.query_params[name] = value
    else:
        st.query_params.pop(name, None)


def search_and_choice(search_label: str, choice_label: str, choices: Sequence[str], *, param: str, key: str,
                      choice_label_of: Callable[[str], str]) -> tuple[str, str | None]:
    """A search box (`?q=`) beside one choice among `choices` (`?<param>=`; none: all), both kept in
    the URL; returns the stripped search text and the choice (None: all)."""
    search, pick = st.columns([3, 1])
    query = search.text_input(search_label, st.query_params.get("q", ""), key="f_q").strip()
    _keep("q", query)
    current = st.query_params.get(param)
    options = ["", *choices]
    chosen = pick.selectbox(choice_label, options, index=options.index(current) if current in options else 0,
                            format_func=lambda c: choice_label_of(c) if c else t("all"), key=key)
    _keep(param, chosen)
    return query, chosen or None
