"""Retention (pipelines/lake/retention.py): old raw telemetry compacted to the per-minute grain with
known row counts, the same fct_gpu_activity after a full rebuild from the compacted rows, pins and
releases expired, the vacuum keeping what kept releases read, and a second run doing nothing."""
from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from pipelines.build import build
from pipelines.lake import retention
from pipelines.lake.reader import search_config
from pipelines.lake.retention import COMPACTED_MARK, compact_minutes, maintain
from pipelines.warehouse import ReleaseExpired, Warehouse
from tests.models.builders import load, rows

DAY = dt.date(2026, 11, 1)
NEXT = DAY + dt.timedelta(days=1)
TODAY = DAY + dt.timedelta(days=2)  # with a retention of 1 day, DAY is due and NEXT is not
FIELDS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
          "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
          "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES")
TEMP = "DCGM_FI_DEV_GPU_TEMP"  # a field no model reads


def at(day: dt.date, hh: int, mm: int, ss: int = 0) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, hh, mm, ss)


def sample(t: dt.datetime, gpu: int, metric: str, value: float, **labels) -> dict:
    return {"sampled_at": t, "host": "h1", "gpu": gpu, "metric": metric, "value": value, "uuid": f"GPU-{gpu}",
            "model_name": "NVIDIA H100", "source": "dcgm_text", "source_file": f"landing/{t:%Y-%m-%d}/m.prom"} | labels


def scrape_rows(day: dt.date) -> list[dict]:
    """gpu 0: one job, samples every 15 s in 10:00 (all fields and a temperature); gpu 1: two jobs
    (a time-sliced GPU) at 10:01:00 and 10:01:30; gpu 2, a MIG instance: two fields at 10:02:20 only;
    gpu 3: nothing but temperatures."""
    out = []
    for k, s in enumerate((0, 15, 30, 45)):
        t = at(day, 10, 0, s)
        out += [sample(t, 0, m, 10.0 * i + k / 3 + 0.1, hpc_job="j1") for i, m in enumerate(FIELDS)]
        out.append(sample(t, 0, TEMP, 40.0 + k, hpc_job="j1"))
    for s in (0, 30):
        for job, pod in (("j2", "p2"), ("j3", "p3")):
            out += [sample(at(day, 10, 1, s), 1, m, 5.0 * i + s / 7 + (job == "j3"), hpc_job=job, k8s_pod=pod,
                           k8s_namespace="ns")
                    for i, m in enumerate(FIELDS)]
    out += [sample(at(day, 10, 2, 20), 2, m, 0.25 + i, gpu_instance_id=1, gpu_instance_profile="1g.10gb")
            for i, m in enumerate(FIELDS[:2])]
    out += [sample(at(day, 10, 3, s), 3, TEMP, 30.0) for s in (0, 20, 40)]
    return out


def prometheus_rows(day: dt.date) -> list[dict]:
    """gpu 0's 10:00:00 samples again, later and with other values: the staging keeps these."""
    return [sample(at(day, 10, 0), 0, m, 100.0 + i / 7, hpc_job="j1", source="prometheus") for i, m in enumerate(FIELDS)]


ROWS_BEFORE = 4 * 10 + 9 + 2 * 2 * 9 + 2 + 3  # gpu 0 (+ its re-delivery), gpu 1, gpu 2, gpu 3
# gpu 0: 9 fields at 10:00:00 + FB_USED at 10:00:45; gpu 1: 9 fields + FB_USED for the second job's
# labels at 10:01:30; gpu 2: its 2 fields at one time; gpu 3: one row so the GPU stays listed
ROWS_AFTER = 10 + 10 + 2 + 1


def load_day(wh: Warehouse, day: dt.date) -> None:
    load(wh, "dcgm_text", day, dcgm_samples=scrape_rows(day))
    load(wh, "prometheus", day, dcgm_samples=prometheus_rows(day))


def activity(wh: Warehouse, day: dt.date) -> list[dict]:
    with wh.connect(read_only=True) as con:
        return rows(con, "select * exclude (samples), samples from marts.fct_gpu_activity where activity_date = ? "
                         "order by host, gpu, gpu_instance_id, minute_at", [day])


def gpus(wh: Warehouse) -> list[dict]:
    with wh.connect(read_only=True) as con:
        return rows(con, "select * from staging.stg_dcgm__gpus order by all")


def raw_count(wh: Warehouse, day: dt.date) -> int:
    return pl.scan_delta(str(wh.store.path("raw.dcgm_samples"))).filter(pl.col("partition_date") == day) \
        .select(pl.len()).collect().item()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, built_empty_home: Path) -> tuple[Warehouse, dict]:
    """Two days loaded and built, then maintained: the home, and what was read before maintenance."""
    home = tmp_path_factory.mktemp("retention") / "gpupool"
    shutil.copytree(built_empty_home, home, ignore=shutil.ignore_patterns("last-build", "logs", "target"))
    wh = Warehouse(home)
    load_day(wh, DAY)
    load_day(wh, NEXT)
    build(wh)
    first_release = wh.current_release()
    wh.pin_release(first_release, "pack 2026-11")
    before = {"activity": activity(wh, DAY), "gpus": gpus(wh), "release": first_release,
              "next_files": set(wh.store.files("raw.dcgm_samples"))}
    report = maintain(wh, raw_retention_days=1, today=TODAY)
    return wh, {**before, "report": report}


def test_compaction_known_rows() -> None:
    day = pl.concat([pl.from_dicts(r, infer_schema_length=None) for r in (scrape_rows(DAY), prometheus_rows(DAY))],
                    how="diagonal_relaxed")
    day = day.with_columns(ingested_at=pl.when(pl.col("source") == "prometheus").then(at(DAY, 12, 0))
                           .otherwise(at(DAY, 11, 0)),
                           ingest_source=pl.when(pl.col("source") == "prometheus").then(pl.lit("prometheus"))
                           .otherwise(pl.lit("dcgm_text")))
    for column, dtype in (("gpu_instance_id", pl.Int32), ("device", pl.String), ("pci_bus_id", pl.String),
                          ("k8s_container", pl.String), ("extra_labels", pl.String)):
        if column not in day.columns:
            day = day.with_columns(pl.lit(None, dtype=dtype).alias(column))
    assert day.height == ROWS_BEFORE
    con = duckdb.connect()
    con.register("day", day.to_arrow())
    out = compact_minutes(con)
    assert out.height == ROWS_AFTER
    assert set(out.get_column("extra_labels")) == {COMPACTED_MARK}
    gpu0 = out.filter(pl.col("gpu") == 0)
    # the re-delivery won at 10:00:00, so the minute goes to its ingest
    assert set(gpu0.get_column("ingest_source")) == {"prometheus"}
    util = gpu0.filter(pl.col("metric") == "DCGM_FI_DEV_GPU_UTIL").get_column("value").to_list()
    assert util == [pytest.approx((100 + 1 / 7 + sum(10.1 + k / 3 for k in (1, 2, 3))) / 4)]
    fb = gpu0.filter(pl.col("metric") == "DCGM_FI_DEV_FB_USED").sort("sampled_at")
    assert fb.get_column("sampled_at").to_list() == [at(DAY, 10, 0), at(DAY, 10, 0, 45)]
    assert fb.get_column("value").to_list() == [100.0 + 2 / 7] * 2  # the highest (re-delivered), twice
    gpu1 = out.filter((pl.col("gpu") == 1) & (pl.col("metric") == "DCGM_FI_DEV_FB_USED")).sort("sampled_at")
    assert gpu1.select("sampled_at", "hpc_job", "k8s_pod").rows() == [(at(DAY, 10, 1), "j2", "p2"),
                                                                     (at(DAY, 10, 1, 30), "j3", "p3")]
    assert out.filter(pl.col("gpu") == 3).select("metric", "uuid").rows() == [(TEMP, "GPU-3")]
    # compacting compacted rows gives them back: a second run would change nothing
    con.register("day", out.with_columns(ingested_at=pl.lit(at(DAY, 13, 0))).to_arrow())
    again = compact_minutes(con)
    assert again.drop("ingested_at").equals(out.drop("ingested_at"))


def test_rebuild_from_compacted_rows_gives_the_same_activity(built: tuple[Warehouse, dict]) -> None:
    wh, before = built
    report = before["report"]
    assert [(d.day, d.rows_before, d.rows_after, d.sources) for d in report.compacted] == [
        (DAY, ROWS_BEFORE, ROWS_AFTER, ("dcgm_text", "prometheus"))]
    assert raw_count(wh, DAY) == ROWS_AFTER and raw_count(wh, NEXT) == ROWS_BEFORE
    assert activity(wh, DAY) == before["activity"]  # the marts are kept as they were
    build(wh, full_refresh=True)
    rebuilt = activity(wh, DAY)
    # Every column but `samples` is the same: exactly, but for means, which may differ in their last
    # bit (the build sums a minute's values in the order its hash aggregate meets them, which no
    # query fixes; the compaction sums them in its own). `samples` counts the compacted rows' values
    # (9 fields and the FB_USED copy; gpu 2's two fields) instead of the 36 samples the minutes had.
    assert len(rebuilt) == len(before["activity"])
    assert [(n, k, r[k], was[k]) for n, (r, was) in enumerate(zip(rebuilt, before["activity"], strict=True))
            for k in r if k != "samples" and r[k] != (pytest.approx(was[k], rel=1e-12, abs=0)
                                                      if isinstance(was[k], float) else was[k])] == []
    assert [(r["fb_used_mib"], r["fb_free_mib"]) for r in rebuilt] == \
        [(r["fb_used_mib"], r["fb_free_mib"]) for r in before["activity"]]  # max and min: exact
    assert [r["samples"] for r in before["activity"]] == [36, 36, 2]
    assert [r["samples"] for r in rebuilt] == [10, 10, 2]
    assert gpus(wh) == before["gpus"]


def test_releases_still_read_after_vacuum_and_expired_ones_lose_their_files(built: tuple[Warehouse, dict],
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    wh, before = built
    pinned = before["release"]  # read the raw samples before compaction; a pack pins it
    monkeypatch.setenv("GPUPOOL_LAKE_VACUUM_HOURS", "0")
    monkeypatch.setenv("GPUPOOL_KEEP_RELEASES", "1")
    recommended = []
    for n in range(2):  # releases that read the compacted lake, pinned by recommendations 40 days ago
        recommended.append(wh.current_release())
        wh.pin_release(recommended[-1], f"recommendation 2026-1{n}")
        with wh.writer() as con:
            con.execute("create or replace table ops.retention_probe as select ? as n", [n])
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=40)
    for r in recommended:
        os.utime(wh.releases / f"{r}.pin", (old.timestamp(), old.timestamp()))
    compacted_files = set(wh.store.files("raw.dcgm_samples"))

    report = maintain(wh, raw_retention_days=1, today=TODAY)
    assert report.compacted == [] and report.release is None  # the second run compacts nothing
    assert {u.release_id for u in report.unpinned} == set(recommended)
    assert report.expired == recommended  # the newest (GPUPOOL_KEEP_RELEASES=1) is the current one
    assert wh.pinned_releases() == {pinned}
    # the pinned release still reads its raw samples (from before compaction): its files are kept
    with wh.analyst_connect(release=pinned) as con:
        assert con.execute("select count(*) from raw.dcgm_samples where partition_date = ?",
                           [DAY]).fetchone()[0] == ROWS_BEFORE
    for r in report.expired:
        with pytest.raises(ReleaseExpired):
            wh.analyst_connect(release=r)
    # nothing both the pinned release and the latest read was vacuumed; everything else the
    # maintenance wrote was, with its bytes counted
    kept = before["next_files"] | compacted_files
    assert all(Path(p).exists() for p in kept)
    vacuumed = report.vacuumed["raw.dcgm_samples"]
    on_disk = {p.as_posix() for p in wh.store.path("raw.dcgm_samples").rglob("*.parquet")}
    assert on_disk == {Path(p).as_posix() for p in set(wh.store.files("raw.dcgm_samples")) | before["next_files"]}
    assert vacuumed.files >= 1 and vacuumed.bytes > 0


def test_pins_other_than_recommendations_stay(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "gpupool")
    wh.releases.mkdir(parents=True)
    (wh.releases / "1.pin").write_text("recommendation 2026-09\npack 2026-09\n")
    (wh.releases / "2.pin").write_text("recommendation 2026-10\n")
    (wh.releases / "3.pin").write_text("recommendation 2026-11\n")
    (wh.releases / "4.pin").write_text("audit hold\n")
    now = dt.datetime(2026, 12, 1)
    for name in ("1.pin", "2.pin", "4.pin"):
        old = (now - dt.timedelta(days=36)).replace(tzinfo=dt.UTC).timestamp()
        os.utime(wh.releases / name, (old, old))
    dry = retention.expire_pins(wh, 35, now, dry_run=True)
    assert [(u.release_id, u.still_pinned) for u in dry] == [(1, True), (2, False)]
    assert (wh.releases / "2.pin").exists()
    assert retention.expire_pins(wh, 35, now) == dry
    assert (wh.releases / "1.pin").read_text() == "pack 2026-09\n"
    assert not (wh.releases / "2.pin").exists()
    assert (wh.releases / "3.pin").exists() and (wh.releases / "4.pin").exists()


def test_bad_settings_say_what_they_accept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUPOOL_RAW_RETENTION_DAYS", "a month")
    with pytest.raises(retention.RetentionError, match="GPUPOOL_RAW_RETENTION_DAYS='a month'"):
        maintain(Warehouse(tmp_path / "gpupool"))
    with pytest.raises(retention.RetentionError, match=">= 1"):
        maintain(Warehouse(tmp_path / "gpupool"), raw_retention_days=0)


def test_cli_dry_run_changes_nothing(tmp_path: Path, built_empty_home: Path) -> None:
    from pipelines.cli import main

    home = tmp_path / "gpupool"
    shutil.copytree(built_empty_home, home)
    wh = Warehouse(home)
    load(wh, "dcgm_text", DAY, dcgm_samples=scrape_rows(DAY))
    version = wh.store.version("raw.dcgm_samples")
    result = CliRunner().invoke(main, ["maintain", "--home", str(home), "--raw-retention-days", "1", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"1 days would be compacted, {ROWS_BEFORE - 9:,} rows -> {ROWS_AFTER:,}" in result.output
    assert wh.store.version("raw.dcgm_samples") == version
    result = CliRunner().invoke(main, ["maintain", "--home", str(home), "--raw-retention-days", "1"])
    assert result.exit_code == 0, result.output
    assert "1 days compacted" in result.output and wh.store.version("raw.dcgm_samples") > version
    with duckdb.connect(str(wh.db_path), read_only=True, config=search_config(wh.home)) as con:
        assert con.execute("select count(*) from raw.dcgm_samples").fetchone()[0] == ROWS_AFTER


def test_maintain_lake_job_runs(tmp_path: Path) -> None:
    from pipelines.assets.maintenance import maintain_lake, maintain_lake_schedule
    from pipelines.resources.warehouse import WarehouseResource

    result = maintain_lake.execute_in_process(resources={"warehouse": WarehouseResource(home=str(tmp_path / "h"))})
    assert result.success
    assert maintain_lake_schedule.cron_schedule == "30 3 * * *"
