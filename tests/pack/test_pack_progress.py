"""`gpupool pack` says what it is doing while it works (issue 33): reading the release, collecting the
month's figures, rendering, and where the pack went, in that order."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.cli.pack import pack as pack_command
from tests.conftest import copy_home

pytestmark = pytest.mark.slow  # the shared 3-day demo

STEPS = ("reading release", "collecting the figures of 2026-11", "rendering charts, appendix, HTML and PDF",
         "review pack 2026-11 (en) in")


def test_pack_prints_its_steps_in_order(tmp_path: Path, small_demo_home: Path, pdf_not_rendered: None):
    home = copy_home(small_demo_home, tmp_path / "gpupool")
    done = CliRunner().invoke(pack_command, ["--month", "2026-11", "--home", str(home)])
    assert done.exit_code == 0, done.output
    steps = [line for line in done.output.splitlines() if line.startswith("▸ ")]
    found = [next((i for i, line in enumerate(steps) if want in line), None) for want in STEPS]
    assert None not in found and found == sorted(found), steps
