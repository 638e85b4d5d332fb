"""Benchmark: a small build's fixed cost, with each rebuilt table swapped into place against built in place.

A build on little data (a live cycle's, a test's) costs what dbt does per model, not what the SQL does:
each adapter call (a rename, a drop) builds a whole macro context. dbt-duckdb swaps a rebuilt table into
place (create it under a temporary name, rename the old one away, rename the new one in, drop the old);
models/macros/build_in_place.sql makes it drop and create under the table's own name instead, safe
because the build runs on a copy of the writers' file (pipelines/build.py).

In one process it alternates the two ways (the project as it is; a copy of it without build_in_place.sql),
--repeat times each, on no data:

  - "rebuild": on a fresh copy of a home whose models were built once (as the tests' `built_empty_home`),
    without its last build's time: a full refresh of every table and incremental, as a model test's
    build is (an incremental build on data rebuilds in place only the tables, not the incrementals);
  - "first": a new home's first build, which also creates every view (a changed project rebuilds them too).

It prints each build's seconds, then per kind the medians, their ratio (in place / swapped) and the
adapter macro calls per build by name (counted around dbt's BaseAdapter.execute_macro).

Run:  PYTHONPATH=. .venv/bin/python bench/bench_small_build.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import collections
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pipelines.build import build
from pipelines.paths import REPO_ROOT
from pipelines.warehouse import Warehouse

MODELS = REPO_ROOT / "models"
IN_PLACE_MACRO = "build_in_place.sql"
KINDS = ("rebuild", "first")


def count_macro_calls() -> collections.Counter:
    """Count dbt's adapter macro calls by name from now on (each builds a macro context of its own)."""
    from dbt.adapters.base.impl import BaseAdapter

    calls: collections.Counter = collections.Counter()
    original = BaseAdapter.execute_macro

    def counted(self, macro_name, *args, **kwargs):  # dbt's own signature
        calls[macro_name] += 1
        return original(self, macro_name, *args, **kwargs)

    BaseAdapter.execute_macro = counted
    return calls


def swapped_project(root: Path) -> Path:
    """A copy of the project without the in-place override: dbt-duckdb's swap."""
    project = root / "models-swapped"
    shutil.copytree(MODELS, project, ignore=shutil.ignore_patterns("target", "logs", "dbt_packages"))
    (project / "macros" / IN_PLACE_MACRO).unlink()
    return project


def built_home(root: Path, name: str, project: Path) -> Path:
    home = root / name
    build(Warehouse(home), project_dir=project)
    return home


def timed_build(built: Path, scratch: Path, project: Path, kind: str) -> float:
    """Seconds of one build of `kind` (module doc) in `scratch`: a new home, or a copy of `built`."""
    shutil.rmtree(scratch, ignore_errors=True)
    if kind == "rebuild":
        shutil.copytree(built, scratch, ignore=shutil.ignore_patterns("last-build", "logs", "target"))
    began = time.perf_counter()
    build(Warehouse(scratch), project_dir=project)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-small-build-") as tmp:
        root = Path(tmp)
        print("setting up: a copy of the project without the override, and a home built on no data by each",
              flush=True)
        projects = {"in place": MODELS, "swapped": swapped_project(root)}
        homes = {way: built_home(root, f"built-{i}", project) for i, (way, project) in enumerate(projects.items())}
        calls = count_macro_calls()
        seconds: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        per_build: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
        for n in range(args.repeat):
            for kind in KINDS:
                for way, project in projects.items():
                    calls.clear()
                    took = timed_build(homes[way], root / "scratch", project, kind)
                    seconds[kind, way].append(took)
                    per_build[kind, way] += calls
                    print(f"  {n + 1}/{args.repeat} {kind:7} {way:8} {took:6.2f} s  "
                          f"({sum(calls.values())} adapter macro calls)", flush=True)
        print("\nmedian seconds of a build (in place / swapped):")
        for kind in KINDS:
            in_place, swapped = (statistics.median(seconds[kind, way]) for way in projects)
            print(f"  {kind:7} in place {in_place:5.2f} s   swapped {swapped:5.2f} s   ratio {in_place / swapped:.2f}")
        print("adapter macro calls per build:")
        for kind in KINDS:
            for way in projects:
                names = ", ".join(f"{name} {count / args.repeat:g}"
                                  for name, count in per_build[kind, way].most_common())
                print(f"  {kind:7} {way:8} {names}")

if __name__ == "__main__":
    main()
