"""Replaying a simulated pool's landing files into a gpupool home in a chosen order, for the tests that
a build after any ingest equals one full refresh of the same files (test_late_data.py,
test_build_orderings.py): ingest runs as the CLI does them, a build after each, the full refresh of the
final landing files in a fresh home, and the comparison of the two homes by scripts/compare_metrics.py
over every relation of marts and metrics.

One simulated landing serves every test (tests/models/conftest.py's `replays`, once per test run):
three days of the smallest pool the simulator scales to (one node per node group: 40 GPUs, MIG and
time-sliced nodes among them) with faults at 50 times their published rates. Orderings that begin
alike share their beginning: the home reached after each run is kept, and an ordering that starts with
the same runs continues from it."""
from __future__ import annotations

import datetime as dt
import functools
import importlib.util
import json
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import polars as pl

from allocator.sim.simulator import simulate
from pipelines.build import build
from pipelines.ingest import ingest_days
from pipelines.paths import REPO_ROOT
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse

START = dt.date(2026, 11, 1)
DAYS = [START + dt.timedelta(days=n) for n in range(3)]
COMPARED_SCHEMAS = ["marts", "metrics"]

Correction = Callable[[Path], None]  # replaces landing files (under the landing folder given) by corrected ones
# the sources that land during the day (the live chain's scrape rounds, Prometheus pulls and scheduler
# increments); the pool snapshot lands once a day
INTRADAY_SOURCES = ("dcgm_parquet", "node_exporter_parquet", "allocator_events", "allocator_artifacts")


def simulate_landing(landing: Path) -> None:
    """The simulated pool's landing files (module doc)."""
    simulate(landing, days=len(DAYS), gpus=8, seed=7, start=START, fault_scale=50.0)


@functools.cache
def compare_metrics() -> ModuleType:
    """scripts/compare_metrics.py (a script, not a package module), loaded once."""
    spec = importlib.util.spec_from_file_location("compare_metrics", REPO_ROOT / "scripts" / "compare_metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def landed_sources(landing: Path) -> list[str]:
    """The sources with a landing folder, in the registry's order."""
    return [name for name in SOURCES if (landing / name).is_dir()]


def ingest(wh: Warehouse, sources: Iterable[str], days: list[dt.date]) -> None:
    """One ingest run of `days` for each source (as `gpupool ingest` over a range of days: records of a
    later day of the run are carried to it), published once at its end as the CLI does."""
    with wh.publishing("ingest"):
        for name in sources:
            ingest_days(wh, name, days, validate=False)


def land_until(pristine: Path, landing: Path, cut: dt.datetime) -> None:
    """The day's landing files of one source as they stood at `cut`: the samples taken and the records
    stamped before it (the same file names, so the rows name the same landing file)."""
    for path in pristine.iterdir():
        if path.suffix == ".parquet":
            pl.read_parquet(path).filter(pl.col("sampled_at") < cut).write_parquet(landing / path.name)
        else:
            lines = path.read_text().splitlines()
            kept = [line for line in lines
                    if dt.datetime.fromisoformat(json.loads(line)["ts"]).replace(tzinfo=None) < cut]
            (landing / path.name).write_text("".join(f"{line}\n" for line in kept))


def full_refresh(landing: Path, home: Path, days: list[dt.date]) -> Warehouse:
    """A fresh home with a copy of `landing`, every day of every source loaded, one full refresh."""
    full = Warehouse(home)
    shutil.copytree(landing, full.landing)
    sources = landed_sources(full.landing)
    for day in days:
        ingest(full, sources, [day])
    build(full, full_refresh=True)
    return full


def read_home(home: Path) -> dict[str, pl.DataFrame]:
    """Every relation of marts and metrics of `home`, read whole (compare_metrics.read_home)."""
    return compare_metrics().read_home(home, COMPARED_SCHEMAS)


def assert_equal(wh: Warehouse, full: Warehouse, full_read: dict[str, pl.DataFrame]) -> None:
    """Every relation of marts and metrics of `wh` equals the full refresh's (`full_read`: read_home(full))."""
    compared, problems = compare_metrics().compare_read(read_home(wh.home), full_read, wh.home, full.home)
    assert compared > 50
    assert problems == [], f"{len(problems)} differences:\n" + "\n".join(problems[:30])


@dataclass(frozen=True)
class Run:
    """One ingest run (each source's `days` in one call) then a build; `corrections` first replace
    landing files by corrected ones (the day's re-ingest then loads them). `until`: an intraday cycle,
    the intraday sources only, their files as landed by that time of the day; a later run of the day
    without it lands the whole day again."""
    days: tuple[int, ...]  # 1-based: day 1 is DAYS[0]
    sources: tuple[str, ...] | None = None  # None: every landed source
    skip: tuple[str, ...] = ()  # sources left out of the run
    corrections: tuple[Correction, ...] = ()
    until: dt.time | None = None


def run(*days: int, sources: tuple[str, ...] | None = None, skip: tuple[str, ...] = (),
        corrections: tuple[Correction, ...] = (), until: dt.time | None = None) -> Run:
    return Run(days, sources, skip, corrections, until)


class Replays:
    """Plays orderings (tuples of runs) into one home, root/home, from copies of the simulated landing
    and of a home built on no data. The home after each run is kept, and restored to the same path to
    continue another ordering that begins with the same runs (the rows that name a landing file name
    the same one). One full refresh is kept per final landing (the corrections applied)."""

    def __init__(self, root: Path, landing: Path, empty_home: Path):
        self.root, self.landing, self.empty_home = root, landing, empty_home
        self.home = root / "home"
        self.kept: dict[tuple[Run, ...], Path] = {}
        self.references: dict[tuple[Correction, ...], Warehouse] = {}
        self.references_read: dict[Path, dict[str, pl.DataFrame]] = {}  # each read once for every ordering

    @property
    def sources(self) -> list[str]:
        return landed_sources(self.landing)

    def play(self, runs: tuple[Run, ...]) -> Warehouse:
        done = max((i for i in range(len(runs) + 1) if runs[:i] in self.kept), default=0)
        shutil.rmtree(self.home, ignore_errors=True)
        if done:
            shutil.copytree(self.kept[runs[:done]], self.home)  # file times too: the last build's stamp
        else:
            shutil.copytree(self.empty_home, self.home,
                            ignore=shutil.ignore_patterns("last-build", "logs", "target"))
            shutil.copytree(self.landing, self.home / "landing")
        wh = Warehouse(self.home)
        for i in range(done, len(runs)):
            step = runs[i]
            for correct in step.corrections:
                correct(wh.landing)
            sources = [s for s in step.sources or self.sources if s not in step.skip]
            days = [DAYS[d - 1] for d in step.days]
            cut_short = {(s, day) for r in runs[:i] if r.until for s in INTRADAY_SOURCES
                         for day in (DAYS[d - 1] for d in r.days)}
            for s, day in ((s, day) for s in sources for day in days):
                pristine, landing = self.landing / s / day.isoformat(), wh.landing / s / day.isoformat()
                if step.until and s in INTRADAY_SOURCES:
                    land_until(pristine, landing, dt.datetime.combine(day, step.until))
                elif (s, day) in cut_short:
                    shutil.copytree(pristine, landing, dirs_exist_ok=True)  # the rest of the day landed
            if step.until:
                sources = [s for s in sources if s in INTRADAY_SOURCES]
            ingest(wh, sources, days)
            build(wh)
            if runs[:i + 1] not in self.kept:
                kept = self.root / f"kept-{len(self.kept)}"
                shutil.copytree(self.home, kept)
                self.kept[runs[:i + 1]] = kept
        return wh

    def reference(self, runs: tuple[Run, ...] = ()) -> Warehouse:
        """The full refresh of the landing files as the corrections of `runs` leave them."""
        corrections = tuple(correct for r in runs for correct in r.corrections)
        if corrections not in self.references:
            n = len(self.references)
            landing = self.root / f"landing-{n}"
            shutil.copytree(self.landing, landing)
            for correct in corrections:
                correct(landing)
            self.references[corrections] = full_refresh(landing, self.root / f"full-{n}", DAYS)
        return self.references[corrections]

    def assert_equal_to_full_refresh(self, runs: tuple[Run, ...]) -> None:
        """Play `runs`; every relation of marts and metrics then equals the full refresh's."""
        reference = self.reference(runs)
        if reference.home not in self.references_read:
            self.references_read[reference.home] = read_home(reference.home)
        assert_equal(self.play(runs), reference, self.references_read[reference.home])

    def forget(self) -> None:
        """Remove the kept homes."""
        for kept in self.kept.values():
            shutil.rmtree(kept, ignore_errors=True)
        self.kept.clear()
