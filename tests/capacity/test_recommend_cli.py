"""`gpupool recommend` end to end on a small demo month: advice stored, the top one replayed and its
smallest sufficient change searched."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow  # the shared 3-day demo, then a few short replays


def test_recommend_stores_ranked_advice_and_replays_the_top_one(home: Path) -> None:
    gpupool = Path(sys.executable).parent / "gpupool"
    done = subprocess.run([str(gpupool), "recommend", "--home", str(home), "--whatif-top", "1"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Capacity recommendations for 2026-11" in done.stdout
    with Warehouse(home).connect(read_only=True) as con:
        rows = con.execute("select rank, kind, confidence, evidence_json, whatif_json "
                           "from metrics.capacity_recommendations order by rank").fetchall()
    assert rows, done.stdout
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    assert all(json.loads(r[3])["views"] for r in rows)
    # the scarce H100 queue of the simulated pool: the top advice is more H100, and the replay confirms it
    assert rows[0][1] == "add_nodes"
    replayed = [json.loads(r[4]) for r in rows if r[4]]
    assert len(replayed) == 1 and replayed[0]["confirms"] and "what-if (+" in done.stdout
    assert replayed[0]["wait_p95_H100_min"]["changed"] < replayed[0]["wait_p95_H100_min"]["baseline"]
    # the search: the baseline and the advised size replayed once each, the smallest sufficient size at most
    # the advised one, and the curve printed
    search = replayed[0]["search"]
    sizes = [p["size"] for p in search["curve"]]
    assert sizes[0] == 0 and sizes[-1] == search["advised"] and len(set(sizes)) == len(sizes)
    assert 1 <= search["smallest_sufficient"] <= search["advised"]
    assert replayed[0]["smallest_change"] == search["smallest_change"]
    assert "smallest sufficient change: +" in done.stdout and "0 (baseline)" in done.stdout
