"""Capacity recommendations record and pin the warehouse release they were computed from."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.contracts import RECOMMENDATIONS_TABLE, SCHEMA_STAMP
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home

pytestmark = pytest.mark.slow  # the shared 3-day demo


def test_recommendations_record_and_pin_the_release_they_read(tmp_path: Path, small_demo_home: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # one unpinned release kept: only the pin keeps the release the advice read (the env reaches the CLI too)
    monkeypatch.setenv("GPUPOOL_KEEP_RELEASES", "1")
    wh = Warehouse(copy_home(small_demo_home, tmp_path / "gpupool"))
    with wh.writer() as con:  # a warehouse from before releases: the next write adds the column
        con.execute(f"alter table {RECOMMENDATIONS_TABLE} drop column release_id")
        con.execute(f"drop table {SCHEMA_STAMP}")  # and before the schema stamp, which that code did not write
    read = wh.current_release()

    done = subprocess.run([str(Path(sys.executable).parent / "gpupool"), "recommend", "--home", str(wh.home),
                           "--whatif-top", "0"], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"warehouse release {read}, pinned" in done.stdout
    assert wh.current_release() != read  # writing the advice published a new release
    with wh.connect(read_only=True) as con:
        recorded = con.execute(f"select distinct release_id from {RECOMMENDATIONS_TABLE} "
                               "where period_month = date '2026-11-01'").fetchall()
    assert recorded == [(read,)]
    assert "recommendation 2026-11" in (wh.releases / f"{read}.pin").read_text()

    with wh.writer() as con:  # more publishes: the pinned release stays readable
        con.execute("delete from ops.scrape_gaps")
    assert read in wh.kept_releases()
    con = wh.analyst_connect(release=read)
    try:
        assert con.execute("select release_id from lake.release").fetchone()[0] == read
        assert con.execute("select count(*) from metrics.pool_daily").fetchone()[0] > 0
    finally:
        con.close()
