"""Idle policies over telemetry minutes: idle allocation, zombie job, idle interactive session.

All three start from the same per-GPU idle windows (`idle_windows`): gaps and islands over an
allocation's minutes, where a short busy or unreported run (at most spike_max_minutes) between idle
minutes does not break the run, because keep-alive pings and scrape hiccups would otherwise let any
job dodge the policy. Missing telemetry is never evidence of idleness: a window needs min_coverage
of its minutes reported, and a longer gap breaks it. `evaluate` finds the windows of all three in one
pass over the minutes (`shared_windows`), an allocation judged once per distinct rule it is given. Idle allocation then groups a job attempt's
overlapping GPU windows into one finding (so 7 idle GPUs of 8 are one finding, not seven); zombie
and idle interactive need every GPU of the attempt idle at once (`all_idle_spans`).

A zombie is also a training job that stopped checkpointing: every GPU idle for `STALE_IDLE_MINUTES`
while its last ok checkpoint (or its start, without one) is older than its declared interval x
`CHECKPOINT_TOLERANCE` (`checkpoint_interval_s`: hourly, every N s/min/h; step and epoch policies have
no time interval and are not judged), the definition of an overdue checkpoint marts.fct_attempt_checkpoints uses.

The idle rule (threshold, memory floor, spike bridging, coverage, window) has one home, the catalog's
idle_allocation policy (models/policies/policies.yml): `idle_rule_rows` resolves it per queue and
template for the warehouse, whose marts.dim_idle_rules and marts.fct_idle_windows apply the same
definition in SQL as `idle_windows` does here (tests/models/test_idle_rule_agreement.py holds them equal).
"""
from __future__ import annotations

import datetime as dt
import re
from typing import NamedTuple

import numpy as np
import polars as pl

from pipelines.contracts import PolicyKind
from pipelines.policies.catalog import PolicyCatalog
from pipelines.policies.inputs import (
    ATTEMPT_KEY,
    TS,
    PolicyInputs,
    findings,
    held,
    with_rules,
)

IDLE_PARAMS = ("activity_threshold", "memory_floor_mib", "spike_max_minutes", "min_coverage")
WINDOW_SCHEMA: dict[str, pl.DataType] = {
    "allocation_id": pl.String, "window_start_at": TS, "window_end_at": TS, "span_minutes": pl.Float64,
    "telemetry_minutes": pl.Int64, "idle_minutes": pl.Int64, "busy_minutes": pl.Int64, "spikes": pl.Int64,
    "missing_minutes": pl.Int64, "mean_activity": pl.Float64, "peak_fb_used_mib": pl.Float64,
    "reaches_end": pl.Boolean,
}
_MINUTE_US = 60_000_000
_EPOCH = dt.datetime(1970, 1, 1)
CHECKPOINT_TOLERANCE = 1.5  # overdue past the declared interval x this (fct_attempt_checkpoints' gap_tolerance)
STALE_IDLE_MINUTES = 20  # every GPU idle this long, with an overdue checkpoint, is a zombie (before idle-allocation's 30)
_EVERY = re.compile(r"every\s*([0-9]+(?:\.[0-9]+)?)?\s*(s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)")


def idle_rule_rows(catalog: PolicyCatalog) -> list[dict]:
    """The catalog's idle rule resolved for every combination of its queue and template overrides (None:
    any other), as the warehouse reads it (var idle_rules -> marts.dim_idle_rules): queue, template,
    scope, enabled and the rule's parameters. The most specific row matching an allocation is the rule
    `catalog.rule` gives it. Raises ValueError when the catalog has no idle_allocation policy."""
    names = catalog.policies_of(PolicyKind.IDLE_ALLOCATION)
    if not names:
        raise ValueError("the policy catalog has no idle_allocation policy: the warehouse's idle windows "
                         "(marts.fct_idle_windows) take their rule from it; add one (models/policies/policies.yml)")
    policy = names[0]
    scopes = [s.split(":", 1) for s in catalog.scopes(policy) if s != "default"]
    queues = [None, *(value for kind, value in scopes if kind == "queue")]
    templates = [None, *(value for kind, value in scopes if kind == "template")]
    rows = []
    for queue in queues:
        for template in templates:
            rule = catalog.rule(policy, queue=queue, template=template)
            rows.append({"queue": queue, "template": template, "policy": policy, "scope": rule.scope,
                         "enabled": bool(rule.params.get("enabled", True)), "window_minutes": rule.params["window_minutes"],
                         **{p: rule.params.get(p) for p in IDLE_PARAMS}})
    return rows


def checkpoint_interval_s(policy: str | None) -> float | None:
    """A declared checkpoint policy's interval in seconds ("hourly", "every 30 min", "every 2 h"); None for
    a policy without a time interval (steps, epochs, none), as marts.fct_attempt_checkpoints reads it."""
    text = (policy or "").strip().lower()
    if text == "hourly":
        return 3600.0
    match = _EVERY.fullmatch(text)
    if match is None:
        return None
    unit = 3600 if match[2].startswith("h") else 60 if match[2].startswith("m") else 1
    return float(match[1] or 1) * unit


def idle_windows(minutes: pl.DataFrame, params: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """Idle windows per allocation (WINDOW_SCHEMA).

    `minutes`: MINUTE_SCHEMA rows; `params`: one row per allocation with allocation_id,
    activity_threshold, memory_floor_mib (null: memory not considered), spike_max_minutes,
    min_coverage and window_minutes, and optionally started_at and ended_at (the allocation's
    bounds: a window is clipped to them, since a minute bucket can begin before the allocation
    did or end after it). A minute is idle when activity < threshold and, with a memory
    floor, framebuffer use is known and below it. A window runs from an idle minute to an idle
    minute; busy or missing runs of at most spike_max_minutes inside it are bridged (and counted
    in its mean activity); it is kept when it spans at least window_minutes of elapsed time (not
    a count of sampled minutes; span_minutes is the clipped window's length) and at least
    min_coverage of its minutes have telemetry. `reaches_end`: the window is the allocation's
    last telemetry and ends within spike_max_minutes of `now`, i.e. the GPU is idle at the data's end.
    """
    windows = candidate_windows(minutes, params, now)
    lengths = params.select("window_minutes").with_row_index("params_row")
    return (
        windows.join(lengths, on="params_row")
        .filter(pl.col("span_minutes") >= pl.col("window_minutes"))
        .select(list(WINDOW_SCHEMA))
        .sort("allocation_id", "window_start_at")
    )


def candidate_windows(minutes: pl.DataFrame, params: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """The idle windows of each row of `params` before the length rule (window_minutes): WINDOW_SCHEMA
    plus params_row, the row's index in `params`, in the order of the rows and then of the windows. An
    allocation may have several rows, one per parameter set (`shared_windows`), each judged on its own;
    `params` needs allocation_id and IDLE_PARAMS, started_at, ended_at and evaluated_at optional (see
    `idle_windows`; a row with evaluated_at is judged on its minutes before it).

    Computed over arrays: each row's minutes are gathered by position, in the order of the rows and then
    of minute_at, and its runs found by cumulative sums and fills that stop at the row's first minute. A
    pass of the simulated governance judges tens of rows, where each Polars operation's fixed cost was
    most of the time. A comparison with a null (a minute without activity, a rule without a parameter)
    is null, as in Polars and SQL: a minute whose idleness is unknown is kept inside a run it does not
    break, and never starts one."""
    m = _RowMinutes(minutes, params, now)
    at, row, p = m.at, m.row, m.params
    threshold, floor, spike = p["activity_threshold"][row], p["memory_floor_mib"][row], p["spike_max_minutes"][row]
    activity, fb = m.minute("activity"), m.minute("fb_used_mib")
    # is_idle in three values: true, unknown (activity or threshold null) or false
    memory_ok = floor.null | (~fb.null & (fb.value < floor.value))
    unknown = (activity.null | threshold.null) & memory_ok
    idle = ~unknown & (activity.value < threshold.value) & memory_ok
    not_idle = ~idle & ~unknown
    position = np.arange(at.size)
    # the last idle minute before each minute, when it is in the same row
    previous = np.concatenate(([-1], np.maximum.accumulate(np.where(idle, position, -1))))[:-1]
    has_previous = previous >= m.row_first
    gap = (at - at[np.maximum(previous, 0)]) // _MINUTE_US - 1
    # breaks = is_idle and (no previous idle minute, or one more than spike_max_minutes before)
    far = ~has_previous | (~spike.null & (gap > spike.value))
    near = has_previous & ~spike.null & ~(gap > spike.value)
    breaks = idle & far
    breaks_unknown = ~breaks & ~(not_idle | near)
    # run: the idle run's number, counted from the row's first break; none before it or where breaks is unknown
    run = np.cumsum(breaks)
    in_run = ~breaks_unknown & (run > (run - breaks)[m.row_first])
    # a run ends at its last idle minute: a minute is kept when the next idle minute at or after it is in its run
    following = np.minimum.accumulate(np.where(idle & in_run, position, at.size)[::-1])[::-1]
    keep = in_run & (following < at.size)
    keep[keep] = run[following[keep]] == run[keep]
    kept = np.flatnonzero(keep)
    starts = np.flatnonzero(np.diff(run[kept], prepend=-1))  # a run's kept minutes are consecutive
    first, last = kept[starts], kept[np.append(starts[1:], kept.size)[:starts.size] - 1]
    spike_starts = not_idle & np.concatenate(([False], idle))[:-1]

    def total(values: np.ndarray) -> np.ndarray:
        values = values[kept].astype(np.int64) if values.dtype == bool else values[kept]
        return np.add.reduceat(values, starts) if kept.size else np.zeros(0, values.dtype)

    telemetry, idle_minutes, known_activity = np.diff(np.append(starts, kept.size)), total(idle), total(~activity.null)
    activity_sum = total(np.where(activity.null, 0.0, activity.value))
    peak = np.fmax.reduceat(np.where(fb.null, np.nan, fb.value)[kept], starts) if kept.size else np.zeros(0)
    win_row = row[first]
    started, ended, now_at = p["started_at"][win_row], p["ended_at"][win_row], p["now_at"][win_row]
    coverage, spike_w = p["min_coverage"][win_row], p["spike_max_minutes"][win_row]
    window_start, run_last = at[first], at[last]
    bucket = (run_last - window_start) // _MINUTE_US + 1
    window_start = np.where(started.null, window_start, np.maximum(window_start, started.value))
    window_end = np.where(ended.null, run_last + _MINUTE_US, np.minimum(run_last + _MINUTE_US, ended.value))
    to_now = now_at.value - window_end
    late = np.sign(to_now) * (np.abs(to_now) // _MINUTE_US)  # whole minutes, truncated as Polars does
    at_end = run_last == m.last_at[win_row]
    ok = ~coverage.null & (telemetry >= coverage.value * bucket)
    columns = {
        "params_row": pl.Series(win_row[ok], dtype=pl.UInt32),
        "allocation_id": pl.Series(m.allocation_ids[win_row[ok]], dtype=pl.String),
        "window_start_at": window_start[ok].astype("datetime64[us]"),
        "window_end_at": window_end[ok].astype("datetime64[us]"),
        "span_minutes": (window_end - window_start)[ok] / 1e6 / 60,
        "telemetry_minutes": telemetry[ok],
        "idle_minutes": idle_minutes[ok],
        "busy_minutes": (telemetry - idle_minutes)[ok],
        "spikes": total(spike_starts)[ok],
        "missing_minutes": (bucket - telemetry)[ok],
        "mean_activity": np.ma.masked_array(activity_sum / np.maximum(known_activity, 1), known_activity == 0)[ok],
        "peak_fb_used_mib": np.ma.masked_array(peak, total(~fb.null) == 0)[ok],
        "reaches_end": np.ma.masked_array(at_end & ~spike_w.null & (late <= spike_w.value), at_end & spike_w.null)[ok],
    }
    return pl.DataFrame({name: pl.Series(name, values, dtype=WINDOW_SCHEMA.get(name)) for name, values in columns.items()})


class _Column(NamedTuple):
    """Values of a column as an array (anything where null) and where it is null."""
    value: np.ndarray
    null: np.ndarray

    def __getitem__(self, index):  # type: ignore[override]
        return _Column(self.value[index], self.null[index])


_ROW_FLOATS = ("activity_threshold", "memory_floor_mib", "spike_max_minutes", "min_coverage")
_ROW_TIMES = ("started_at", "ended_at", "now_at")


class _RowMinutes:
    """The minutes of each row of `params` before its now_at (evaluated_at, else `now`), gathered by position in
    the order of the rows and then of minute_at (an allocation's minutes repeated for each of its rows): per
    minute `at` (epoch microseconds), `row` (its params row) and `row_first` (the position of its row's
    first minute); per params row `params` (its parameters and bounds as `_Column`s) and `last_at` (its
    last minute)."""

    def __init__(self, minutes: pl.DataFrame, params: pl.DataFrame, now: dt.datetime):
        given = set(params.columns)

        def bound(name: str) -> pl.Expr:
            return (pl.col(name) if name in given else pl.lit(None)).cast(TS).alias(name)

        wide = params.select(
            *(pl.col(p).cast(pl.Float64) for p in _ROW_FLOATS), bound("started_at"), bound("ended_at"),
            now_at=pl.coalesce(bound("evaluated_at"), pl.lit(now, TS)),
        ).select(
            *(pl.col(c).fill_null(np.nan) for c in _ROW_FLOATS), *(pl.col(c).dt.epoch("us").fill_null(0) for c in _ROW_TIMES),
            *(pl.col(c).is_null().alias(f"{c} null") for c in (*_ROW_FLOATS, *_ROW_TIMES)),
        )
        self.params = {c: _Column(wide.get_column(c).to_numpy(), wide.get_column(f"{c} null").to_numpy())
                       for c in (*_ROW_FLOATS, *_ROW_TIMES)}
        self.allocation_ids = np.array(params.get_column("allocation_id").to_list(), dtype=object)
        self.minutes = minutes.filter(pl.col("minute_at") < now, pl.col("allocation_id").is_not_null()).sort(
            "allocation_id", "minute_at").select(
            "allocation_id", series=pl.col("allocation_id").rle_id(), at=pl.col("minute_at").dt.epoch("us"),
            **{c: pl.col(c).fill_null(np.nan) for c in ("activity", "fb_used_mib")},
            **{f"{c} null": pl.col(c).is_null() for c in ("activity", "fb_used_mib")},
        )
        series = self.minutes.get_column("series").to_numpy().astype(np.int64)
        starts = np.flatnonzero(np.diff(series, prepend=-1))
        lengths_of = np.diff(np.append(starts, series.size))
        names = self.minutes.get_column("allocation_id").unique(maintain_order=True).to_list()
        slice_of = dict(zip(names, range(starts.size)))
        which = np.array([slice_of.get(a, -1) for a in self.allocation_ids], dtype=np.int64)
        rows = np.flatnonzero(which >= 0)
        lengths = lengths_of[which[rows]]
        index = np.repeat(starts[which[rows]] - (np.cumsum(lengths) - lengths), lengths) + np.arange(lengths.sum())
        row = np.repeat(rows, lengths)
        at = self.minutes.get_column("at").to_numpy()[index]
        inside = at < self.params["now_at"].value[row]
        self.index, self.row, self.at = index[inside], row[inside], at[inside]
        first = np.diff(self.row, prepend=-1) != 0
        self.row_first = np.maximum.accumulate(np.where(first, np.arange(self.at.size), 0))
        self.last_at = np.zeros(params.height, np.int64)
        self.last_at[self.row[first]] = self.at[np.append(np.flatnonzero(first)[1:], self.at.size)[:first.sum()] - 1]

    def minute(self, name: str) -> _Column:
        return _Column(self.minutes.get_column(name).to_numpy()[self.index],
                       self.minutes.get_column(f"{name} null").to_numpy()[self.index])


def all_idle_spans(windows: pl.DataFrame, holdings: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """Per attempt, the spans during which every GPU it holds is inside an idle window.

    `windows`: idle windows with the attempt key columns; `holdings`: `held()` rows (gpus_held).
    A sweep over window starts (+1) and ends (-1): spans where the count equals gpus_held. A window
    that reaches the data's end is open: a span made of open windows ends at the attempt's now_at (`now`
    unless it is evaluated earlier), is_ongoing_span. Swept over arrays, as `candidate_windows` is found.
    """
    key = list(ATTEMPT_KEY)
    held_rows = holdings.select(*key, "gpus_held", pl.col("now_at").dt.epoch("us")).rows()
    code_of = {row[:3]: i for i, row in enumerate(held_rows)}
    w = windows.select(*key, start=pl.col("window_start_at").dt.epoch("us"), end=pl.col("window_end_at").dt.epoch("us"),
                       open=pl.col("reaches_end").fill_null(False))
    code = np.array([code_of.get(k, -1) for k in zip(*(w.get_column(c).to_list() for c in key))], dtype=np.int64)
    mine = code >= 0  # an attempt without holdings has no span (the join's inner side)
    open_end = int((now + dt.timedelta(days=1) - _EPOCH) / dt.timedelta(microseconds=1))  # after every now_at
    ends = np.where(w.get_column("open").to_numpy(), open_end, w.get_column("end").to_numpy())
    codes = np.concatenate([code[mine], code[mine]])
    times = np.concatenate([w.get_column("start").to_numpy()[mine], ends[mine]])
    steps = np.concatenate([np.ones(mine.sum(), np.int64), -np.ones(mine.sum(), np.int64)])
    order = np.lexsort((times, codes))
    codes, times, steps = codes[order], times[order], steps[order]
    # one event per (attempt, time): its windows' starts and ends summed
    first = np.flatnonzero((np.diff(codes, prepend=-1) != 0) | (np.diff(times, prepend=-1) != 0))
    codes, times = codes[first], times[first]
    steps = np.add.reduceat(steps, first) if first.size else steps[:0]
    attempt_first = np.diff(codes, prepend=-1) != 0
    total = np.cumsum(steps)
    active = total - (total - steps)[np.maximum.accumulate(np.where(attempt_first, np.arange(codes.size), 0))]
    # the next event's time (an attempt's last event, where every window has ended, is never kept)
    next_t = np.append(times[1:], 0)
    gpus_held = np.array([row[3] for row in held_rows], dtype=np.int64)
    kept = np.flatnonzero(active >= gpus_held[codes])
    k_codes, k_times, k_next = codes[kept], times[kept], next_t[kept]
    # a span starts at a kept event that does not follow on from the kept event before it in the attempt
    new = (np.diff(k_codes, prepend=-1) != 0) | (k_times != np.concatenate(([-1], k_next[:-1])))
    starts = np.flatnonzero(new)
    stops = np.append(starts[1:], kept.size)[:starts.size] - 1
    span_end = k_next[stops]
    ongoing = span_end == open_end
    now_at = np.array([row[4] for row in held_rows], dtype=np.int64)
    attempts = [held_rows[c][:3] for c in k_codes[starts]]
    return pl.DataFrame({
        **{c: pl.Series(c, [a[i] for a in attempts], dtype=holdings.schema[c]) for i, c in enumerate(key)},
        "span_start_at": k_times[starts].astype("datetime64[us]"),
        "span_end_at": np.where(ongoing, now_at[k_codes[starts]], span_end).astype("datetime64[us]"),
        "is_ongoing_span": ongoing,
    })


def _gpu_evidence() -> pl.Expr:
    """Per GPU: its idle time (window length, bridged minutes included), mean activity, the busy
    minutes and spikes bridged, the minutes without telemetry, peak memory, idle at the data's end."""
    return pl.struct(
        "allocation_id", "host", "gpu", "mean_activity", "busy_minutes", "spikes", "missing_minutes",
        "peak_fb_used_mib", idle_minutes=pl.col("span_minutes"), ongoing=pl.col("reaches_end"),
    )


IDLE_KINDS = (PolicyKind.IDLE_ALLOCATION, PolicyKind.ZOMBIE, PolicyKind.IDLE_INTERACTIVE)
# the parameter that sets each idle kind's window length
WINDOW_PARAM = {PolicyKind.IDLE_ALLOCATION: "window_minutes", PolicyKind.ZOMBIE: "limit_minutes",
                PolicyKind.IDLE_INTERACTIVE: "remind_after_minutes"}


def _rule_params(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, params: tuple[str, ...] = ()) -> pl.DataFrame:
    """The allocations the policy is enabled for, with its rule's idle parameters and `params` as
    columns (memory not considered where the policy has no memory floor)."""
    allocs = with_rules(inputs.allocations, catalog, policy, (*IDLE_PARAMS, *params))
    if "memory_floor_mib" not in catalog.policy(policy).params:
        allocs = allocs.with_columns(memory_floor_mib=pl.lit(None, pl.Float64))
    return allocs


def rule_candidates(minutes: pl.DataFrame, params: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """`candidate_windows` of each distinct (allocation, idle parameters) of `params`, with the
    parameters as columns: what a policy joins its own allocations' rules to (`_windows_for`)."""
    distinct = params.select("allocation_id", *IDLE_PARAMS, "started_at", "ended_at", "evaluated_at").unique(
        maintain_order=True)
    windows = candidate_windows(minutes, distinct, now)
    # each window's parameters are its params row's: a gather, not a join
    found = windows.hstack(distinct.select(pl.col(IDLE_PARAMS).gather(windows.get_column("params_row"))))
    found.drop_in_place("params_row")
    return found


def shared_windows(inputs: PolicyInputs, catalog: PolicyCatalog, kinds: list[PolicyKind],
                   now: dt.datetime) -> dict[str, object]:
    """What every idle policy of these kinds reads, found once for all (evaluate's): `rules`, each policy's
    allocations with its rule (`_rule_params`, its window parameter included), and `candidates`, their
    candidate windows in one pass over the minutes: an allocation is judged once per distinct set of idle
    parameters its policies give it."""
    rules = {name: _policy_rules(inputs, catalog, name, kind, None)
             for kind in kinds for name in catalog.policies_of(kind)}
    return {"rules": rules,
            "candidates": rule_candidates(inputs.minutes, pl.concat(list(rules.values()), how="diagonal"), now)}


def _policy_rules(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, kind: PolicyKind,
                  rules: dict[str, pl.DataFrame] | None) -> pl.DataFrame:
    """The policy's allocations with its rule: `shared_windows`' when given, else found here."""
    return rules[policy] if rules is not None else _rule_params(inputs, catalog, policy, (WINDOW_PARAM[kind],))


def _windows_for(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, kind: PolicyKind, now: dt.datetime,
                 shortest: float | None = None, candidates: pl.DataFrame | None = None,
                 rules: dict[str, pl.DataFrame] | None = None) -> pl.DataFrame:
    """Idle windows of the allocations the policy is enabled for, with their parameters and attempt;
    `shortest`: keep windows this long when the kind's window parameter asks for longer ones (the caller
    filters); `candidates` and `rules`: `shared_windows`' (found here when not given)."""
    window_param = WINDOW_PARAM[kind]
    allocs = _policy_rules(inputs, catalog, policy, kind, rules)
    if kind == PolicyKind.IDLE_INTERACTIVE:  # an interactive job's own idle_reminder_s wins
        allocs = allocs.with_columns(
            pl.coalesce((pl.col("idle_reminder_s") / 60).ceil(), pl.col(window_param)).alias(window_param)
        )
    window = pl.col(window_param) if shortest is None else pl.min_horizontal(window_param, pl.lit(float(shortest)))
    allocs = allocs.with_columns(window_minutes=window)
    if candidates is None:
        candidates = rule_candidates(inputs.minutes, allocs, now)
    windows = (
        candidates.join(allocs.select("allocation_id", *IDLE_PARAMS, "window_minutes"),
                        on=["allocation_id", *IDLE_PARAMS], nulls_equal=True)
        .filter(pl.col("span_minutes") >= pl.col("window_minutes"))
        .select(list(WINDOW_SCHEMA))
        .sort("allocation_id", "window_start_at")
    )
    return windows.join(
        allocs.select("allocation_id", *ATTEMPT_KEY, "host", "gpu", "fraction", "scope", *IDLE_PARAMS,
                      "window_minutes"),
        on="allocation_id",
    )


def idle_allocation(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime,
                    candidates: pl.DataFrame | None = None, rules: dict[str, pl.DataFrame] | None = None) -> pl.DataFrame:
    """One finding per job attempt per group of overlapping GPU idle windows.

    gpus_flagged of gpus_held: the attempt's GPUs with a window in the group; gpu_hours: the
    windows' duration x fraction; observed: mean activity over the windows' minutes (bridged
    spikes included); detected_at: the earliest moment a GPU's window reached window_minutes;
    is_ongoing: the attempt runs and every flagged GPU is idle at the data's end. A busy start
    does not hide later idleness: every qualifying window is a finding, the trailing one included.
    """
    rule = catalog.rule(policy)
    windows = _windows_for(inputs, catalog, policy, PolicyKind.IDLE_ALLOCATION, now, candidates=candidates, rules=rules)
    if windows.is_empty():
        return findings(windows, rule)
    key = list(ATTEMPT_KEY)
    per_gpu = (
        windows.sort(*key, "window_start_at")
        .with_columns(
            cluster=(pl.col("window_start_at") > pl.col("window_end_at").cum_max().shift(1))
            .fill_null(True).cum_sum().over(key),
            detected_at=pl.col("window_start_at") + pl.duration(minutes=pl.col("window_minutes")),
            gpu_hours=pl.col("span_minutes") / 60 * pl.col("fraction"),
            activity_minutes=pl.col("mean_activity") * pl.col("telemetry_minutes"),
        )
        .group_by(*key, "cluster", "allocation_id")
        .agg(
            pl.col("host", "gpu", "scope", *IDLE_PARAMS, "window_minutes").first(),
            pl.col("window_start_at", "detected_at").min(),
            pl.col("window_end_at").max(),
            pl.col("reaches_end").sort_by("window_end_at").last(),
            pl.col("span_minutes", "telemetry_minutes", "idle_minutes", "busy_minutes", "spikes",
                   "missing_minutes", "gpu_hours", "activity_minutes").sum(),
            pl.col("peak_fb_used_mib").max(),
        )
        .with_columns(mean_activity=pl.col("activity_minutes") / pl.col("telemetry_minutes"))
    )
    grouped = per_gpu.sort("allocation_id").group_by(*key, "cluster").agg(
        pl.col("scope", *IDLE_PARAMS, "window_minutes").first(),
        pl.col("window_start_at", "detected_at").min(),
        pl.col("window_end_at").max(),
        gpus_flagged=pl.len(),
        gpu_hours=pl.col("gpu_hours").sum(),
        observed=pl.col("activity_minutes").sum() / pl.col("telemetry_minutes").sum(),
        all_idle_at_end=pl.col("reaches_end").all(),
        spikes_ignored=pl.col("spikes").sum(),
        gpus=_gpu_evidence(),
    )
    out = grouped.join(held(inputs.allocations, now), on=key).with_columns(
        metric=pl.lit("activity"),
        threshold=pl.col("activity_threshold"),
        is_ongoing=pl.col("is_running") & pl.col("all_idle_at_end"),
        recommendation=pl.when(pl.col("gpus_flagged") < pl.col("gpus_held")).then(pl.format(
            "{} of {} GPUs idle: ask for {} GPUs", pl.col("gpus_flagged"), pl.col("gpus_held"),
            pl.col("gpus_held") - pl.col("gpus_flagged"),
        )),
        evidence=pl.struct(
            "activity_threshold", "window_minutes", "memory_floor_mib", "spike_max_minutes", "min_coverage",
            "spikes_ignored", "gpus",
        ).struct.json_encode(),
    )
    return findings(out, rule)


def _span_findings(inputs: PolicyInputs, windows: pl.DataFrame, now: dt.datetime) -> pl.DataFrame:
    """Every-GPU-idle spans of the attempts with windows, with their holdings and per-GPU evidence."""
    key = list(ATTEMPT_KEY)
    holdings = held(inputs.allocations, now)
    spans = all_idle_spans(windows, holdings, now)
    evidence = (
        windows.join(spans, on=key)
        .filter((pl.col("window_start_at") < pl.col("span_end_at")) & (pl.col("window_end_at") > pl.col("span_start_at")))
        .sort("allocation_id")
        .group_by(*key, "span_start_at")
        .agg(
            pl.col("scope", *IDLE_PARAMS, "window_minutes").first(),
            observed_activity=(pl.col("mean_activity") * pl.col("telemetry_minutes")).sum()
            / pl.col("telemetry_minutes").sum(),
            gpus=_gpu_evidence(),
        )
    )
    return spans.join(evidence, on=[*key, "span_start_at"]).join(holdings, on=key)


def zombie(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime,
           candidates: pl.DataFrame | None = None, rules: dict[str, pl.DataFrame] | None = None) -> pl.DataFrame:
    """Attempts whose GPUs are all idle (below the zombie threshold) and that show no sign of progress:
    no progress signal for limit_minutes, or (a training job with a declared time interval) every GPU
    idle for STALE_IDLE_MINUTES while its checkpoint is overdue (module docstring). The quiet period
    starts at the later of the all-idle span's start and the last progress signal inside it (a checkpoint
    report is one); window_start_at is that start, detected_at the first moment either condition held.
    An attempt without an ok checkpoint in `inputs.progress` counts from its start: the frame must reach
    back the interval x tolerance (the tick's and the warehouse's do)."""
    rule = catalog.rule(policy)
    windows = _windows_for(inputs, catalog, policy, PolicyKind.ZOMBIE, now, shortest=STALE_IDLE_MINUTES,
                           candidates=candidates, rules=rules)
    if windows.is_empty():
        return findings(windows, rule)
    key = list(ATTEMPT_KEY)
    spans = _span_findings(inputs, windows, now)
    last_progress = (
        spans.select(*key, "span_start_at", "span_end_at")
        .join(inputs.progress, on=["job_id", "attempt"])
        .filter((pl.col("at") >= pl.col("span_start_at")) & (pl.col("at") < pl.col("span_end_at")))
        .group_by(*key, "span_start_at")
        .agg(last_progress_at=pl.col("at").max())
    )
    last_checkpoint = (
        inputs.progress.join(spans.select("job_id", "attempt", "now_at").unique(), on=["job_id", "attempt"])
        .filter(pl.col("is_checkpoint").fill_null(False) & (pl.col("at") < pl.col("now_at")))
        .group_by("job_id", "attempt").agg(last_checkpoint_at=pl.col("at").max())
    )
    declared = _policy_rules(inputs, catalog, policy, PolicyKind.ZOMBIE, rules).group_by(key).agg(
        pl.col("limit_minutes", "checkpoint_policy").first())
    intervals = {p: checkpoint_interval_s(p) for p in declared["checkpoint_policy"].unique().to_list() if p}
    stale_idle = pl.duration(minutes=STALE_IDLE_MINUTES)
    out = (
        spans.join(last_progress, on=[*key, "span_start_at"], how="left")
        .join(declared, on=key)
        .join(last_checkpoint, on=["job_id", "attempt"], how="left")
        .with_columns(
            window_start_at=pl.max_horizontal("span_start_at", "last_progress_at"),
            interval_s=pl.col("checkpoint_policy").replace_strict(intervals, default=None, return_dtype=pl.Float64),
            checkpoint_base_at=pl.coalesce("last_checkpoint_at", "started_at"),
        )
        .with_columns(
            quiet_minutes=(pl.col("span_end_at") - pl.col("window_start_at")).dt.total_seconds() / 60,
            due_at=pl.when(pl.col("template") == "training").then(
                pl.col("checkpoint_base_at") + pl.duration(seconds=pl.col("interval_s") * CHECKPOINT_TOLERANCE)),
        )
        .with_columns(
            overdue_at=pl.when((pl.col("quiet_minutes") >= STALE_IDLE_MINUTES) & (pl.col("due_at") <= pl.col("span_end_at")))
            .then(pl.max_horizontal(pl.col("window_start_at") + stale_idle, "due_at")),
            silent_at=pl.when(pl.col("quiet_minutes") >= pl.col("limit_minutes"))
            .then(pl.col("window_start_at") + pl.duration(minutes=pl.col("limit_minutes"))),
        )
        .with_columns(detected_at=pl.min_horizontal("overdue_at", "silent_at"))
        .filter(pl.col("detected_at").is_not_null())
        .with_columns(
            checkpoint_overdue=pl.col("overdue_at").is_not_null(),
            checkpoint_age_minutes=(pl.col("span_end_at") - pl.col("checkpoint_base_at")).dt.total_seconds() / 60,
            checkpoint_limit_minutes=pl.col("interval_s") * CHECKPOINT_TOLERANCE / 60,
        )
        .with_columns(
            window_end_at=pl.col("span_end_at"),
            gpus_flagged=pl.col("gpus_held"),
            gpu_hours=pl.col("quiet_minutes") / 60 * pl.col("fraction_held"),
            metric=pl.when("checkpoint_overdue").then(pl.lit("minutes_since_checkpoint"))
            .otherwise(pl.lit("minutes_without_progress")),
            observed=pl.when("checkpoint_overdue").then("checkpoint_age_minutes").otherwise("quiet_minutes"),
            threshold=pl.when("checkpoint_overdue").then("checkpoint_limit_minutes").otherwise("limit_minutes"),
            is_ongoing=pl.col("is_running") & pl.col("is_ongoing_span"),
            recommendation=pl.lit(None, pl.String),
            checkpoint_tolerance=pl.lit(CHECKPOINT_TOLERANCE),
            stale_idle_minutes=pl.lit(STALE_IDLE_MINUTES),
            last_progress_at=pl.col("last_progress_at").dt.strftime("%Y-%m-%dT%H:%M:%SZ"),
            last_checkpoint_at=pl.col("last_checkpoint_at").dt.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        .with_columns(
            evidence=pl.struct(
                "limit_minutes", "activity_threshold", "observed_activity", "last_progress_at", "checkpoint_policy",
                "checkpoint_tolerance", "stale_idle_minutes", "last_checkpoint_at", "checkpoint_age_minutes",
                "checkpoint_overdue", "gpus",
            ).struct.json_encode()
        )
    )
    return findings(out, rule)


def idle_interactive(inputs: PolicyInputs, catalog: PolicyCatalog, policy: str, now: dt.datetime,
                     candidates: pl.DataFrame | None = None, rules: dict[str, pl.DataFrame] | None = None) -> pl.DataFrame:
    """Interactive sessions with every GPU idle for remind_after_minutes (or the job's own
    idle_reminder_s). The finding's steps (remind, then reclaim after the step's delay while the
    session is still idle) come from the rule; the planner runs them."""
    rule = catalog.rule(policy)
    windows = _windows_for(inputs, catalog, policy, PolicyKind.IDLE_INTERACTIVE, now, candidates=candidates, rules=rules)
    if windows.is_empty():
        return findings(windows, rule)
    out = (
        _span_findings(inputs, windows, now)
        .with_columns(idle_minutes=(pl.col("span_end_at") - pl.col("span_start_at")).dt.total_seconds() / 60)
        .filter(pl.col("idle_minutes") >= pl.col("window_minutes"))
        .with_columns(
            window_start_at=pl.col("span_start_at"),
            window_end_at=pl.col("span_end_at"),
            detected_at=pl.col("span_start_at") + pl.duration(minutes=pl.col("window_minutes")),
            gpus_flagged=pl.col("gpus_held"),
            gpu_hours=pl.col("idle_minutes") / 60 * pl.col("fraction_held"),
            metric=pl.lit("idle_minutes"),
            observed=pl.col("idle_minutes"),
            threshold=pl.col("window_minutes"),
            is_ongoing=pl.col("is_running") & pl.col("is_ongoing_span"),
            recommendation=pl.lit(None, pl.String),
            remind_after_minutes=pl.col("window_minutes"),
        )
        .with_columns(
            evidence=pl.struct(
                "remind_after_minutes", "activity_threshold", "observed_activity", "gpus",
            ).struct.json_encode()
        )
    )
    return findings(out, rule)
