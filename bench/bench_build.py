"""Benchmark: what one more day costs (ingest + build + publish) as history grows, against a full refresh.

On one simulated pool (--gpus, 32 by default; --seed 7), simulated once for the longest history + 1
days, it makes one home per history length (--history, 30,120 by default: the homes share the
first days of the same landing files), ingests each home's history in one run (untimed) and then
times, each in a child process of its own (wall seconds and that process's peak resident memory):

  - the full refresh of each home (`gpupool build --full-refresh`: runner.build_models with
    full_refresh; it is also the build the home's history starts from);
  - one more day on each home, on a fresh copy of the home each time (--repeat N, alternating
    between the homes; the median is reported): the day's ingest of every source landed that day
    (runner.ingest_days over that day, one publish, as `gpupool ingest` runs it) followed by the
    incremental build with its checks (runner.build_models, one publish, as `gpupool build`).

It prints each run as it goes (its ingest per source, dbt's build, the build's checks and publish,
the time spent publishing, the heaviest models), then:

  - per history: one more day (median wall seconds and CPU seconds, its ingest and build, the
    releases it published, the median peak RSS) and the full refresh (the same figures);
  - the ratios (one more day at the longest history) / (one more day at the shortest), target <= 1.2,
    and (one more day at the longest history) / (full refresh of that home), target <= 0.1, in wall
    seconds (the targets), and also in CPU seconds and peak RSS;
  - the per-model seconds of the day's build (dbt's run results, the median over repeats), the
    heaviest first (--top, 15), one column per history, so what grows with history shows.

Seconds are the step inside the child (ingest + build + publishes), not the interpreter's start and
imports (printed apart as "process"), which cost the same whatever the history. CPU seconds (user and
system, every thread, of the step) move less than wall seconds when other work shares the machine.
Each step's figures are also appended to steps.jsonl in the scratch folder (kept with --keep).
Peak RSS is the child's own ru_maxrss, read through a small wrapper process it is forked from (Linux
carries a parent's high-water mark across fork and exec; tests/security/test_sql_resources.py does
the same).
If models/target/manifest.json is missing or stale, it is written first (`dbt parse`, as set-up does),
so that each build loads it as a `gpupool build` on a set-up install does instead of parsing.

--demo-month adds the former figures: a full refresh of the demo month (the default pool, 256 GPUs x
30 days, simulated, or a copy of --demo-home) and one more day on top of it, and their ratio.

Run:  PYTHONPATH=. .venv/bin/python bench/bench_build.py [--gpus 32] [--history 30,120] [--repeat 3]
          [--top 15] [--keep DIR] [--demo-month [--demo-home HOME]]
Most of a run is the untimed set-up, simulating and ingesting the history: on the 2-core machine
shared with other work (load average 18), simulating 121 days of 32 GPUs took 4 minutes and ingesting
30 of them 13 minutes; a run there takes over an hour.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.peak_memory import PEAK_RSS_WRAPPER

REPO_ROOT = Path(__file__).resolve().parents[1]
START = dt.date(2026, 11, 1)
DAY_TARGET = 1.2  # one more day at the longest history / at the shortest
FULL_TARGET = 0.1  # one more day at the longest history / a full refresh of that home

# -- the child: one timed step ----------------------------------------------------------------------
def _resident_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _chunk_files(home: Path) -> dict[Path, int]:
    """The releases' Parquet chunks (pipelines/lake/release_chunks.py) and their sizes."""
    from pipelines.lake.release_chunks import chunks_dir

    return {p: p.stat().st_size for p in chunks_dir(home).rglob("*.parquet")}


def child(spec_path: Path) -> None:
    """Run one step (spec: action "day" or "full", home, day, sources) and write its figures to spec["out"].
    Publishes and dbt's build are timed by wrapping them here (measurement only: nothing else changes)."""
    spec = json.loads(spec_path.read_text())
    # Every library the steps use, imported before the clock starts: the ingest's validations import
    # Great Expectations (about 2.7 s) and the build dbt (about 1.5 s) on first use, and an import
    # costs the same whatever the history (the "process" figure holds it).
    import dbt.cli.main
    import dbt.contracts.graph.manifest  # noqa: F401

    import expectations.validate  # noqa: F401
    from pipelines import runner
    from pipelines.warehouse import Warehouse

    spent = {"publish": 0.0, "dbt": 0.0}

    def clocked(what: str, fn):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[what] += time.perf_counter() - started
        return wrapper

    Warehouse.publish = clocked("publish", Warehouse.publish)
    runner.build = clocked("dbt", runner.build)  # pipelines.build.build as runner.build_models calls it
    wh = Warehouse(Path(spec["home"]))
    before = wh.current_release()
    chunks_before = _chunk_files(wh.home)
    resident = _resident_bytes()
    marks: list[tuple[float, str]] = []
    cpu = time.process_time()
    started = time.perf_counter()
    ingest_s = 0.0
    if spec["action"] == "day":
        day = dt.date.fromisoformat(spec["day"])
        runner.ingest_days(wh, spec["sources"], day, day,
                           on_step=lambda msg: marks.append((time.perf_counter(), msg.split()[1])))
        ingest_s = time.perf_counter() - started
    builds = runner.build_models(wh, full_refresh=spec["action"] == "full")
    seconds = time.perf_counter() - started
    cpu_s = time.process_time() - cpu
    after = wh.current_release()
    ends = [t for t, _ in marks[1:]] + [started + ingest_s] if marks else []
    got = {
        "seconds": seconds, "cpu_s": cpu_s, "ingest_s": ingest_s, "build_s": seconds - ingest_s,
        "publish_s": spent["publish"], "dbt_s": spent["dbt"],
        "sources": {name: end - t for (t, name), end in zip(marks, ends, strict=True)},
        "models": [[b.name, b.kind, b.seconds] for b in builds],
        "releases": (after or 0) - (before or 0), "resident_before_step": resident,
        # what the step's publishes wrote: each release's file and the chunks no earlier publish wrote
        "publish_bytes": sum(wh.release_path(r, must_exist=False).stat().st_size
                             for r in range((before or 0) + 1, (after or 0) + 1)
                             if wh.release_path(r, must_exist=False).exists())
        + sum(size for path, size in _chunk_files(wh.home).items() if path not in chunks_before),
    }
    Path(spec["out"]).write_text(json.dumps(got))
    # every step's figures (not its peak RSS, which the wrapper reads after it), kept with --keep
    with open(Path(spec["out"]).parent / "steps.jsonl", "a") as log:
        log.write(json.dumps({**spec, **got}) + "\n")


# -- the parent ----------------------------------------------------------------------------------------
@dataclass
class Run:
    seconds: float
    cpu_s: float  # the step's CPU time, user and system, all threads: less sensitive to a shared machine
    ingest_s: float
    build_s: float
    process_s: float  # the child's wall clock, interpreter start and imports included
    peak_rss: int
    resident_before_step: int
    releases: int
    publish_s: float  # in Warehouse.publish (every release of the step)
    dbt_s: float  # in pipelines.build.build (dbt's build of the models, the copy and swap of the file)
    sources: dict[str, float]  # ingest seconds per source, the last one's with the ingest's publish
    models: dict[str, tuple[str, float]]  # name -> (kind, seconds)
    publish_bytes: int = 0  # the releases' files and new chunks the step wrote

    @property
    def models_s(self) -> float:
        return sum(s for _, s in self.models.values())


@dataclass
class Home:
    label: str
    path: Path
    history: int  # days ingested
    full: list[Run] = field(default_factory=list)
    days: list[Run] = field(default_factory=list)

    @property
    def next_day(self) -> dt.date:
        return START + dt.timedelta(days=self.history)


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def measured(action: str, home: Path, scratch: Path, day: dt.date | None = None,
             sources: list[str] | None = None) -> Run:
    """Run one step in a child process (through the wrapper) and read back its figures."""
    scratch.mkdir(parents=True, exist_ok=True)
    spec, out, peak = scratch / "step.json", scratch / "step.out.json", scratch / "step.peak"
    for path in (out, peak):
        path.unlink(missing_ok=True)
    spec.write_text(json.dumps({"action": action, "home": str(home), "day": day and day.isoformat(),
                                "sources": sources, "out": str(out)}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK_RSS_WRAPPER, str(peak), sys.executable, str(Path(__file__).resolve()),
                           "--child", str(spec)], check=False, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    process_s = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"the {action} step on {home} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    got = json.loads(out.read_text())
    return Run(got["seconds"], got["cpu_s"], got["ingest_s"], got["build_s"], process_s, int(peak.read_text()),
               got["resident_before_step"], got["releases"], got["publish_s"], got["dbt_s"], got["sources"],
               {name: (kind, seconds) for name, kind, seconds in got["models"]}, got.get("publish_bytes", 0))


def show(label: str, run: Run) -> None:
    heaviest = sorted(run.models.items(), key=lambda m: -m[1][1])[:3]
    ingest = ""
    if run.sources:
        each = ", ".join(f"{name.removeprefix('raw_')} {s:.1f}" for name, s in sorted(run.sources.items(), key=lambda x: -x[1]))
        ingest = f"ingest {run.ingest_s:.1f} s ({each}); "
    print(f"  {label}: {run.seconds:.1f} s ({run.cpu_s:.1f} s CPU), peak RSS {mib(run.peak_rss)} ({mib(run.resident_before_step)} after "
          f"imports; process {run.process_s:.1f} s with them), {run.releases} release(s) published\n"
          f"    {ingest}build {run.build_s:.1f} s: dbt {run.dbt_s:.1f} s ({len(run.models)} nodes, models "
          f"{run.models_s:.1f} s), checks and publish {run.build_s - run.dbt_s:.1f} s; publishes {run.publish_s:.1f} s "
          f"in all, {mib(run.publish_bytes)} written\n    heaviest: " + ", ".join(f"{name} {s:.1f} s" for name, (_, s) in heaviest), flush=True)


def landed_sources(landing: Path, day: dt.date | None = None) -> list[str]:
    """The sources with files landed (on `day` only, when given)."""
    from pipelines.sources.registry import SOURCES

    return [name for name in SOURCES
            if (landing / name).is_dir() and (day is None or (landing / name / day.isoformat()).is_dir())]


def link_days(landing: Path, into: Path, days: int) -> None:
    """Hard-link the first `days` days' folders of a landing zone into another (ingest only reads them)."""
    wanted = {(START + dt.timedelta(days=i)).isoformat() for i in range(days)}
    for folder in sorted(landing.glob("*/*")):
        if folder.is_dir() and folder.name in wanted:
            shutil.copytree(folder, into / folder.parent.name / folder.name, copy_function=os.link)


def ingest_history(home: Home) -> None:
    """Ingest the home's history in one run of days (untimed set-up)."""
    from pipelines import runner
    from pipelines.warehouse import Warehouse

    wh = Warehouse(home.path)
    started = time.perf_counter()
    last = START + dt.timedelta(days=home.history - 1)
    runner.ingest_days(wh, landed_sources(wh.landing), START, last)
    print(f"  {home.label}: ingested {START}..{last} in {time.perf_counter() - started:.0f} s (set-up, untimed)",
          flush=True)


def copy_home(home: Path, to: Path) -> None:
    """A copy of a home (cp -a: the release hard-linked as warehouse.duckdb stays one file)."""
    shutil.rmtree(to, ignore_errors=True)
    subprocess.run(["cp", "-a", str(home), str(to)], check=True)


def one_more_day(home: Home, scratch: Path, keep: bool) -> Run:
    copy = scratch / f"{home.path.name}-day{home.history + 1}"
    copy_home(home.path, copy)
    run = measured("day", copy, scratch, home.next_day, landed_sources(copy / "landing", home.next_day))
    if not keep:
        shutil.rmtree(copy)
    return run


def ensure_manifest() -> None:
    """models/target/manifest.json, as set-up writes it: without it every build would parse the project."""
    from pipelines.resources import dbt as dbt_resource

    if dbt_resource.is_stale():
        started = time.perf_counter()
        dbt_resource.parse()
        print(f"wrote models/target/manifest.json (dbt parse, as set-up does) in {time.perf_counter() - started:.0f} s",
              flush=True)


def median_run(runs: list[Run]) -> dict:
    def med(values) -> float:
        return statistics.median(list(values))

    models: dict[str, tuple[str, float]] = {}
    for name in {n for r in runs for n in r.models}:
        kinds = [r.models[name][0] for r in runs if name in r.models]
        models[name] = (kinds[0], med(r.models[name][1] for r in runs if name in r.models))
    return {
        **{what: med(getattr(r, what) for r in runs)
           for what in ("seconds", "cpu_s", "ingest_s", "build_s", "dbt_s", "models_s", "publish_s", "peak_rss", "publish_bytes")},
        "sources": {name: med(r.sources.get(name, 0.0) for r in runs) for name in {n for r in runs for n in r.sources}},
        "releases": sorted({r.releases for r in runs}),
        "models": models,
    }


def report(homes: list[Home], top: int) -> None:
    print("\n== summary (seconds: the step in its process; the machine is shared, so compare medians and ratios)")
    med = {h.label: median_run(h.days) for h in homes}
    for h in homes:
        m, full = med[h.label], h.full[0]
        runs = ", ".join(f"{r.seconds:.1f}" for r in h.days)
        sources = ", ".join(f"{n.removeprefix('raw_')} {s:.1f}" for n, s in sorted(m["sources"].items(), key=lambda x: -x[1]))
        print(f"{h.label}: one more day ({h.next_day}) {m['seconds']:.1f} s ({m['cpu_s']:.1f} s CPU), median of "
              f"{len(h.days)} [{runs}], "
              f"peak RSS {mib(m['peak_rss'])}\n"
              f"    ingest {m['ingest_s']:.1f} s ({sources}); build {m['build_s']:.1f} s: dbt {m['dbt_s']:.1f} s "
              f"(models {m['models_s']:.1f} s); releases published {m['releases']}, publishes {m['publish_s']:.1f} s "
              f"writing {mib(m['publish_bytes'])}\n"
              f"  full refresh {full.seconds:.1f} s ({full.cpu_s:.1f} s CPU; dbt {full.dbt_s:.1f} s, models {full.models_s:.1f} s), peak RSS "
              f"{mib(full.peak_rss)}; one more day / full refresh = {m['seconds'] / full.seconds:.3f} "
              f"({m['cpu_s'] / full.cpu_s:.3f} in CPU)")
    short, long = homes[0], homes[-1]
    day_long = med[long.label]
    if len(homes) > 1:
        day_short = med[short.label]
        ratio = day_long["seconds"] / day_short["seconds"]
        print(f"one more day at {long.history} days / at {short.history} days = {ratio:.2f} (target <= {DAY_TARGET}: "
              f"{'met' if ratio <= DAY_TARGET else 'NOT met'}); in CPU {day_long['cpu_s'] / day_short['cpu_s']:.2f}, "
              f"peak RSS {day_long['peak_rss'] / day_short['peak_rss']:.2f}")
        # issue 30: a publish costs what changed, not the history
        seconds = day_long["publish_s"] / max(day_short["publish_s"], 1e-9)
        written = day_long["publish_bytes"] / max(day_short["publish_bytes"], 1)
        print(f"publishes of one more day at {long.history} days / at {short.history} days = {seconds:.2f} in seconds, "
              f"{written:.2f} in bytes written (target <= {DAY_TARGET}: "
              f"{'met' if max(seconds, written) <= DAY_TARGET else 'NOT met'})")
    ratio = day_long["seconds"] / long.full[0].seconds
    print(f"one more day at {long.history} days / full refresh of that home = {ratio:.3f} (target <= {FULL_TARGET}: "
          f"{'met' if ratio <= FULL_TARGET else 'NOT met'}); in CPU {day_long['cpu_s'] / long.full[0].cpu_s:.3f}, "
          f"peak RSS {day_long['peak_rss'] / long.full[0].peak_rss:.2f}")

    names = sorted({n for h in homes for n in med[h.label]["models"]},
                   key=lambda n: -med[long.label]["models"].get(n, ("", 0.0))[1])
    print(f"\nper-model seconds of the day's build (dbt run results, median of repeats), heaviest at "
          f"{long.history} days first; top {top} of {len(names)}:")
    width = max(len(n) for n in names[:top]) if names else 10
    header = "".join(f"{h.history:>8}d" for h in homes)
    print(f"  {'model':<{width}}  {'kind':<11}{header}" + ("   growth" if len(homes) > 1 else ""))

    def cell(h: Home, name: str) -> str:
        found = med[h.label]["models"].get(name)
        return f"{found[1]:>9.2f}" if found else f"{'-':>9}"

    for name in names[:top]:
        kind = next(med[h.label]["models"][name][0] for h in homes if name in med[h.label]["models"])
        first, last = med[short.label]["models"].get(name), med[long.label]["models"].get(name)
        growth = f"{last[1] / first[1]:>8.2f}x" if first and last and first[1] > 0 else ""
        print(f"  {name:<{width}}  {kind:<11}" + "".join(cell(h, name) for h in homes)
              + (f" {growth}" if len(homes) > 1 else ""))
    totals = "".join(f"{sum(s for _, s in med[h.label]['models'].values()):>9.2f}" for h in homes)
    print(f"  {'all ' + str(len(names)) + ' nodes (sum)':<{width}}  {'':<11}{totals}")


def demo_month(args, scratch: Path) -> None:
    """The former figures: a full refresh of the demo month and one more day on top of it."""
    from allocator.sim.simulator import simulate

    print("\n== demo month: the default pool (256 GPUs) x 30 days", flush=True)
    home = Home("demo month", scratch / "demo-month", 30)
    if args.demo_home:
        shutil.copytree(args.demo_home, home.path, symlinks=True)
        sim = scratch / "demo-sim"
        simulate(sim, days=31, seed=args.seed, start=START)
        day = home.next_day.isoformat()
        for folder in sim.glob(f"*/{day}"):
            shutil.copytree(folder, home.path / "landing" / folder.parent.name / day, dirs_exist_ok=True)
        shutil.rmtree(sim)
    else:
        simulate(home.path / "landing", days=31, seed=args.seed, start=START)
        ingest_history(home)
    home.full.append(measured("full", home.path, scratch))
    show("full refresh", home.full[0])
    for _ in range(args.repeat):
        home.days.append(one_more_day(home, scratch, bool(args.keep)))
        show(f"one more day ({home.next_day})", home.days[-1])
    m = median_run(home.days)
    print(f"demo month: one more day {m['seconds']:.1f} s / full refresh {home.full[0].seconds:.1f} s = "
          f"{m['seconds'] / home.full[0].seconds:.3f} (target <= {FULL_TARGET})")
    if not args.keep:
        shutil.rmtree(home.path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=32, help="simulated pool size, the same for every home")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--history", default="30,120", help="days of history of each home, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="times one more day is timed per home (median)")
    parser.add_argument("--top", type=int, default=15, help="models listed per build")
    parser.add_argument("--keep", type=Path, help="build the homes under this new folder and keep them")
    parser.add_argument("--demo-month", action="store_true",
                        help="also the demo month (256 GPUs x 30 days): full refresh and one more day")
    parser.add_argument("--demo-home", type=Path, help="with --demo-month: a home holding it (copied, not modified)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    histories = sorted({int(h) for h in args.history.split(",") if h.strip()})
    if not histories or histories[0] < 1 or args.repeat < 1:
        parser.error("--history takes positive day counts; --repeat at least 1")
    if args.keep and args.keep.exists():
        parser.error(f"--keep {args.keep}: exists already")

    from allocator.sim.simulator import simulate

    ensure_manifest()
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        scratch = args.keep.resolve() if args.keep else Path(tmp)
        homes = [Home(f"{h} days", scratch / f"h{h}", h) for h in histories]
        longest = homes[-1]
        started = time.perf_counter()
        # Simulated once: a shorter run of the simulator is not a prefix of a longer one (its draws
        # depend on the days asked), so the shorter homes link the first days of the longest one's landing.
        simulate(longest.path / "landing", days=longest.history + 1, gpus=args.gpus, seed=args.seed, start=START)
        print(f"== {args.gpus} GPUs, seed {args.seed}: simulated {longest.history + 1} days in "
              f"{time.perf_counter() - started:.0f} s (set-up, untimed)", flush=True)
        for home in homes[:-1]:
            link_days(longest.path / "landing", home.path / "landing", home.history + 1)
        for home in homes:
            ingest_history(home)
            home.full.append(measured("full", home.path, scratch))
            show(f"{home.label}: full refresh", home.full[0])
        for r in range(args.repeat):  # alternating between the homes: the machine's load drifts
            for home in homes:
                home.days.append(one_more_day(home, scratch, bool(args.keep)))
                show(f"{home.label}: one more day ({home.next_day}), run {r + 1}", home.days[-1])
        report(homes, args.top)
        if args.demo_month:
            demo_month(args, scratch)
        for leftover in scratch.glob("step.*"):
            leftover.unlink()


if __name__ == "__main__":
    main()
