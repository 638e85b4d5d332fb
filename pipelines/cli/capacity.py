"""`gpupool whatif` and `recommend`: replay a month with a change, and the capacity recommendations."""
from __future__ import annotations

import datetime as dt
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipelines.cli.common import (
    HOME_OPTION,
    MONTH_HELP,
    day_progress,
    loaded_months,
    parse_month,
    step,
    warehouse,
)

if TYPE_CHECKING:

    from pipelines.coverage import Coverage


@click.command()
@HOME_OPTION
@click.option("--month", default=None, help="Month to replay, YYYY-MM. Default: the month of the latest submission.")
@click.option("--days", default=None, type=click.IntRange(min=1), help="Replay only the month's first N days.")
@click.option("--add-nodes", "add_nodes", multiple=True, metavar="MODEL=N",
              help="Add N nodes of a GPU model (copies of one of its nodes); negative removes. Repeatable.")
@click.option("--quota", "quotas", multiple=True, metavar="QUEUE:MODEL=N",
              help="Set a queue's quota for a GPU model, in GPUs. Repeatable.")
@click.option("--idle-window", "idle_window", default=None, type=int,
              help="Idle-allocation policy window, minutes (turns the policies on if the month had none).")
@click.option("--idle-threshold", "idle_threshold", default=None, type=float,
              help="Idle-allocation policy activity threshold, 0..1.")
@click.option("--policies/--no-policies", default=None,
              help="Replay with the idle-reclaim policies on or off. Default: as in the observed month.")
def whatif(home: Path | None, month: str | None, days: int | None, add_nodes: tuple[str, ...],
           quotas: tuple[str, ...], idle_window: int | None, idle_threshold: float | None,
           policies: bool | None) -> None:
    """Replay a month's demand from the warehouse through the allocator, as observed and with a change;
    print wait p50/p95, utilisation and idle GPU-hours next to the observed month (docs/whatif.md)."""
    from pipelines.capacity.replay import Change, ChangeRejected
    from pipelines.capacity.replay import whatif as run_whatif

    try:
        change = Change.parse(add_nodes, quotas, idle_window, idle_threshold)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    wh = warehouse(home)
    if not wh.db_path.exists():
        raise click.ClickException(f"{wh.db_path}: no warehouse; run `gpupool demo` or ingest a month first")
    began = time.monotonic()
    with ExitStack() as stack:
        bar: list = []

        def progress(done: int, total: int, day: dt.date) -> None:
            if not bar:  # the month's length is known once its demand is read
                bar.append(stack.enter_context(day_progress("replaying days (baseline)", total)))
            bar[0](done, total, day)

        try:
            result = run_whatif(wh.home, change, month=month, days=days, policies=policies, on_step=step,
                                on_progress=progress)
        except ChangeRejected as error:
            raise click.UsageError(str(error)) from None
        except ValueError as error:
            raise click.ClickException(str(error)) from None
    click.echo(f"\n{result.month_start:%Y-%m-%d}, {result.days} days, replayed in {time.monotonic() - began:.0f} s\n")
    click.echo(result.table())


@click.command()
@HOME_OPTION
@click.option("--month", default=None, help=MONTH_HELP)
@click.option("--whatif-top", default=1, show_default=True, type=click.IntRange(min=0),
              help="Test this many of the top recommendations with the what-if replay (0: none); for advice "
                   "that adds nodes or moves quota, search the smallest sufficient change (a few rounds of "
                   "replays side by side, each round about as long as a `gpupool whatif`).")
def recommend(home: Path | None, month: str | None, whatif_top: int) -> None:
    """Capacity recommendations for a month, from the metric views, with their evidence and confidence;
    the top ones replayed through the allocator with the change, and the smallest sufficient change
    searched for those that add nodes or move quota (the curve explored is printed). Written to
    governance.capacity_recommendations and listed by metrics.capacity_recommendations (docs/capacity.md)."""
    from pipelines.capacity.recommend import RulesError
    from pipelines.capacity.run import recommend_month
    from pipelines.config import ConfigError

    wh = warehouse(home)
    first = None
    if month is not None:
        first = parse_month(month)
    if not wh.db_path.exists():
        raise click.ClickException(f"{wh.db_path}: no warehouse; run `gpupool demo` or ingest a month first")
    with wh.connect(read_only=True) as con:
        loaded = loaded_months(con)
    if not loaded:
        raise click.ClickException("no data in the warehouse: run `gpupool demo` or ingest a month first")
    if first is None:
        first = loaded[-1]
    elif first not in loaded:  # before the rules run and any replay, and before an empty month is recorded
        raise click.BadParameter(f"{month}: no day of it loaded; months loaded: "
                                 f"{', '.join(f'{m:%Y-%m}' for m in loaded)}", param_hint="--month")
    try:
        outcome = recommend_month(wh, first, whatif_top=whatif_top, on_step=step)
    except (RulesError, ConfigError) as err:  # the site's rules file, or gpupool.yml naming it
        raise click.ClickException(str(err)) from None
    click.echo(click.style(f"\nCapacity recommendations for {first:%Y-%m} (rules {outcome.rules_version}, "
                           f"warehouse release {outcome.release_id}, pinned)", bold=True))
    if outcome.coverage is not None:
        click.echo(coverage_line(outcome.coverage))
    if not outcome.recommendations:
        click.echo("  none: no rule found enough evidence this month (thresholds in the capacity rules, docs/configuration.md)")
    for rank, rec in enumerate(outcome.recommendations, start=1):
        click.echo(f"  {rank}. [{rec.kind}, {rec.confidence} confidence {rec.confidence_score:.2f}] {rec.recommendation}")
        if rec.whatif:
            w = rec.whatif
            key = next(k for k in w if k.startswith("wait_p95_") and k.endswith("_min") and k != "wait_p95_min")
            click.echo(f"     what-if ({w['change']}): {key.removeprefix('wait_p95_').removesuffix('_min')} wait p95 "
                       f"{w[key]['baseline']:,.0f} -> {w[key]['changed']:,.0f} min, pool utilisation "
                       f"{w['pool_utilisation_pct']['baseline']:.1f}% -> {w['pool_utilisation_pct']['changed']:.1f}%, "
                       f"{'confirms' if w['confirms'] else 'does not confirm'} the advice")
        if rec.whatif and rec.whatif.get("search"):
            for line in curve_lines(rec.whatif["search"], rec.gpu_model or "pool"):
                click.echo(f"     {line}")
    if outcome.review is not None:
        r = outcome.review
        key = r["key_wait_p95_min"]
        applied = {True: "applied", False: "not applied"}.get(r["applied"], "not visible in the pool")
        click.echo(f"\n  Last month's top advice ({applied}) judged on this month's demand: {r['verdict']} "
                   f"({r['decided_by'].removeprefix('wait_p95_').removesuffix('_min')} wait p95 "
                   f"{key['with_change']:,.0f} min with it, {key['without_change']:,.0f} min without; "
                   f"other world replayed: {r['other_world']})")
    click.echo("\nStored in governance.capacity_recommendations; "
               "`gpupool sql \"select * from metrics.capacity_recommendations\"`.")


def coverage_line(coverage: Coverage) -> str:
    """The month's coverage as `recommend` prints it: partial or complete, "N of M days", each kind's days."""
    kinds = ", ".join(f"{k.label['en']} {k.days_with_data}/{coverage.days_in_period}" if k.collected
                      else f"{k.label['en']} not collected" for k in coverage.kinds if k.collected or k.required)
    said = (f"partial month, {coverage.phrase('en')}: the advice rests on those days only" if coverage.partial
            else f"complete month, {coverage.phrase('en')}")
    return f"  Coverage: {said} ({kinds})"


def curve_lines(search: dict, model: str) -> list[str]:
    """The smallest sufficient change and the curve the search explored, as text lines."""
    from pipelines.capacity.replay_cache import kept_text

    rule = search["rule"]
    found = search["smallest_change"] or "none: the advised change itself is not sufficient"
    head = (f"smallest sufficient change: {found} (sufficient: {model} wait p95 at most "
            f"{rule['target_wait_p95_minutes']:g} min, or at least {rule['min_share_of_full_effect']:.0%} of the cut "
            f"of the advised +{search['advised']} {search['unit']}; {search['replays']} replays ({kept_text(search)}), "
            f"{search['replay_seconds']:,.0f} s of replay)")
    from pipelines.cli import render

    headers = [search["unit"], f"{model} wait p95", "wait p95", "utilisation", "cut share", "sufficient"]
    rows = [("0 (baseline)" if p["size"] == 0 else f"+{p['size']}", f"{p[search['decided_by']]:,.0f} min",
             f"{p['wait_p95_min']:,.0f} min", f"{p['pool_utilisation_pct']:.1f}%",
             f"{p['share_of_full_effect']:.0%}", "yes" if p["sufficient"] else "no") for p in search["curve"]]
    table = render.rows(headers, rows, header_rule=False, wrap=True, justify="right",
                        width=render.terminal_width() - 5)  # the caller indents it by 5
    return [head, *table.splitlines()]
