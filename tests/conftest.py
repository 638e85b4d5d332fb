"""Shared fixtures: a temporary gpupool home, homes built once per test run across every xdist worker
(on no data, and a small demo month: `built_once`), and the real-data samples in tests/fixtures/real-data."""
from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock
from hypothesis import settings

from pipelines.build import build
from pipelines.warehouse import Warehouse

# Fewer, larger collections of Python's cyclic garbage collector in the test processes: they hold large
# object graphs (dbt's manifest, Dagster's definitions), which the default thresholds (700, 10, 10) had
# it traverse again and again, a tenth of a model test's CPU (bench/README.md, "Figures the code's
# choices rest on"). The pipeline's own processes keep Python's defaults.
gc.set_threshold(20_000, 50, 20)

# a scenario module that test modules run, whose asserts should explain themselves as a test's do
pytest.register_assert_rewrite("tests.lake.serving")

REAL_DATA = Path(__file__).parent / "fixtures" / "real-data"  # public samples, with their PROVENANCE.md

# Property-based tests: "ci" is reproducible (the same examples every run, no example database);
# "dev" explores new examples each run and replays failures from .hypothesis/. CI=1 selects "ci";
# HYPOTHESIS_PROFILE overrides. Tests set their own max_examples.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

# Tests that share one live system or one costly session fixture run on one pytest-xdist worker
# (make test runs `-n auto`), one after another: the Slurm tests submit, drain and cancel on the one
# cluster scripts/slurm-up.sh starts; the ordering tests share the homes `replays` keeps. Every other
# test file goes whole to whichever worker is free, so a module's fixtures are built once. (A
# scheduler of our own, not xdist's `loadgroup`: that one renames node ids, which pytest 9 no longer
# lets a plugin do.)
SHARED = {"tests/slurm/": "slurm", "tests/models/test_build_orderings.py": "replays",
          "tests/models/test_late_data.py": "replays"}


def shared_group(nodeid: str) -> str | None:
    return next((group for prefix, group in SHARED.items() if nodeid.startswith(prefix)), None)


# The seconds each scope (a SHARED group or a test file) took in a whole run (scripts/test_durations.py
# writes it): the longest are handed out first, so the run does not end with one worker still on a long
# file while the others idle. A scope it does not know counts a second a test.
DURATIONS = Path(__file__).parent / "durations.json"


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs the suite in one process without this hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}

    class SharedSystemsScheduling(LoadScopeScheduling):
        """xdist's load-by-scope, where a scope is a group of SHARED or else one test file, longest first."""

        def _split_scope(self, nodeid: str) -> str:
            return shared_group(nodeid) or nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_longest_first", False):  # the queue is complete at the first assignment
                self.workqueue = OrderedDict(sorted(self.workqueue.items(),
                                                    key=lambda unit: -seconds.get(unit[0], len(unit[1]))))
                self._longest_first = True
            super()._assign_work_unit(node)

    return SharedSystemsScheduling(config, log)


DEMO_HOMES = {"small_demo_home", "advised_demo_home", "packed_demo_home"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs a demo month (directly or through another fixture) is slow: the first to ask
    pays for `gpupool demo` (about a minute here), which `make test-quick` leaves out."""
    for item in items:
        if DEMO_HOMES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def real_data() -> Path:
    if not REAL_DATA.exists():
        pytest.fail(f"real-data samples not found at {REAL_DATA}")
    return REAL_DATA


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "gpupool")


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The home `make(home)` builds, once per test run however many xdist workers ask: the first
    builds it under a file lock in the folder the workers share (their base temporary folders' parent,
    which pytest removes after a run that passed), the others wait for it and get the same path. It is
    shared by processes running at once: read it as it is (read-only connections), or copy it (copy_home)
    to write. `name` must say everything `make` depends on."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    folder = shared / "built-once" / name
    folder.parent.mkdir(exist_ok=True)
    with FileLock(folder.parent / f"{name}.lock"):
        if not (folder / "built").exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            folder.mkdir()
            make(folder / "gpupool")
            (folder / "built").touch()
    return folder / "gpupool"


@pytest.fixture(scope="session")
def built_empty_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with every model built on no data, once per test run. Read it as it is, or copy it."""
    return built_once(tmp_path_factory, "empty", lambda home: build(Warehouse(home)))


def gpupool_command(*args: str) -> None:
    """`gpupool ARGS` in a process of its own; a failure raises with what it printed."""
    done = subprocess.run([str(Path(sys.executable).parent / "gpupool"), *args], check=False, capture_output=True,
                          text=True)
    assert done.returncode == 0, f"gpupool {' '.join(args)}:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="session")
def small_demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`gpupool demo` for 3 days of a 64-GPU pool with the idle-reclaim policies acting, no baseline
    (~35 CPU-seconds), once per test run. Tests that write to a home take a copy (copy_home)."""
    return built_once(tmp_path_factory, "small-demo", lambda home: gpupool_command(
        "demo", "--days", "3", "--gpus", "64", "--no-baseline", "--home", str(home)))



@pytest.fixture(scope="session")
def advised_demo_home(tmp_path_factory: pytest.TempPathFactory, small_demo_home: Path) -> Path:
    """The small demo with November's capacity advice recorded (`gpupool recommend --whatif-top 0`: no
    replay), once per test run; read it, or copy it."""
    def make(home: Path) -> None:
        copy_home(small_demo_home, home)
        gpupool_command("recommend", "--month", "2026-11", "--whatif-top", "0", "--home", str(home))

    return built_once(tmp_path_factory, "small-demo-advised", make)


@pytest.fixture(scope="session")
def packed_demo_home(tmp_path_factory: pytest.TempPathFactory, advised_demo_home: Path) -> Path:
    """The advised small demo with November's pool pack built (`gpupool pack --month 2026-11`, English),
    once per test run; read it, or copy it."""
    def make(home: Path) -> None:
        copy_home(advised_demo_home, home)
        gpupool_command("pack", "--month", "2026-11", "--home", str(home))

    return built_once(tmp_path_factory, "small-demo-packed", make)

@pytest.fixture
def pdf_not_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    """WeasyPrint's PDF render replaced, for packs built in this test's process, by a file that says
    so: about three quarters of a pack's CPU (9 of 12 CPU-seconds a pool pack here), for tests whose
    point is not the PDF (figures, releases, which packs are built). The PDF itself is rendered for
    real by packed_demo_home, tests/pack/test_tenant_pack.py's tenant pack and test_delivery's packs."""
    from weasyprint import HTML

    def write_pdf(self: HTML, target: Path, *args: object, **kwargs: object) -> None:
        Path(target).write_bytes(b"%PDF- not rendered: pdf_not_rendered (tests/conftest.py)\n")

    monkeypatch.setattr(HTML, "write_pdf", write_pdf)


def copy_home(home: Path, to: Path) -> Path:
    """A copy of a built home (no process may be writing it), at `to`. Its first writer points the lake's
    views (raw.dcgm_samples) at the copy's own lake, as after an operator moves a home."""
    shutil.copytree(home, to)
    with Warehouse(to).writer():
        pass
    return to
