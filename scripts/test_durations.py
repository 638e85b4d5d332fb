"""Writes tests/durations.json, the seconds each scheduling unit of the suite (a test file, or a group of
tests/conftest.py's SHARED) took, from a JUnit XML report of a whole run:

    .venv/bin/python -m pytest -n auto --junitxml=/tmp/junit.xml && .venv/bin/python scripts/test_durations.py /tmp/junit.xml

The xdist scheduler (tests/conftest.py) hands out the longest units first, so the run does not end
on one worker still busy with a long file while the others are idle. A file missing from it counts a
second a test; refresh it when files are added or their time changes much."""
from __future__ import annotations

import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import DURATIONS, shared_group


def test_file(classname: str) -> str:
    """tests.models.test_build (or tests.x.test_y.TestClass) -> tests/models/test_build.py"""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (REPO / path).is_file():
            return path
    raise ValueError(f"no test file for {classname!r}")


def main(report: str) -> None:
    seconds: collections.Counter[str] = collections.Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        path = test_file(case.get("classname", ""))
        seconds[shared_group(f"{path}::{case.get('name')}") or path] += float(case.get("time") or 0)
    if not seconds:
        sys.exit(f"{report} has no test cases: give the JUnit XML of a whole run")
    DURATIONS.write_text(json.dumps({unit: round(s, 1) for unit, s in sorted(seconds.items())}, indent=1) + "\n")
    print(f"{DURATIONS.relative_to(REPO)}: {len(seconds)} units, {sum(seconds.values()):.0f} s in all")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
