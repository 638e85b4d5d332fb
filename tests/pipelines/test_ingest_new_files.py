"""The intraday ingest (pipelines/ingest.py ingest_new_files): a run reads only the files landed since the
last, and the day ends as the whole day's ingest of the same files leaves it; whatever it cannot trust
(a changed file, a run killed half-way, another ingest in between, a source that does not append) makes
it read the day whole."""
import datetime as dt

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from expectations.suites import build_suite
from pipelines.ingest import ingest_new_files, ingest_partition
from pipelines.sources.registry import SOURCES
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow  # the GX suites

DAY = dt.date(2026, 11, 1)
SOURCE = "dcgm_parquet"


def land_round(wh: Warehouse, k: int, value: float = 0.25, bad: bool = True) -> None:
    """Scrape round k as one Parquet file: rows the parse quarantines (NaN), rows the validation
    quarantines (a negative GPU, a ratio above 1) unless not `bad`, and in round 9 rows timestamped
    on the next day."""
    at = dt.datetime(2026, 11, 1, 23, 50) + dt.timedelta(minutes=k) if k == 9 else \
        dt.datetime(2026, 11, 1, 9) + dt.timedelta(seconds=15 * k)
    n = 12
    folder = wh.landing / SOURCE / DAY.isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({
        "sampled_at": [at + dt.timedelta(minutes=20 * (k == 9) * (i % 2)) for i in range(n)],
        "host": [f"h100-{i % 3:02d}" for i in range(n)],
        "gpu": [-1 if bad and (i + k) % 7 == 3 else i % 8 for i in range(n)],
        "metric": ["DCGM_FI_PROF_SM_ACTIVE"] * n,
        "value": [float("nan") if bad and (i + k) % 11 == 5 else 1.5 if bad and (i + k) % 5 == 1 else value
                  for i in range(n)],
    }, schema_overrides={"gpu": pl.Int32}).write_parquet(folder / f"scrape-{k:04d}.parquet")


def day_as_loaded(wh: Warehouse) -> tuple:
    """The rows, quarantine and newest ingest_log row of the day (and the next day's rows), home-free."""
    home = str(wh.home)
    with wh.connect(read_only=True) as con:
        def table(sql: str) -> pl.DataFrame:
            frame = con.sql(sql).pl()
            for column in ("source_file", "raw"):
                if column in frame.columns:
                    frame = frame.with_columns(pl.col(column).str.replace_all(home, "", literal=True))
            return frame.sort(frame.columns, nulls_last=True)

        samples = table("select * exclude (ingested_at) from raw.dcgm_samples")
        quarantine = table("select * exclude (ingested_at) from ops.quarantine")
        log = con.execute("select files_read, records_read, records_loaded, records_quarantined, rows_by_table "
                          "from ops.ingest_log where partition_date = ? order by finished_at desc limit 1",
                          [DAY]).fetchone()
    return samples, quarantine, log


def assert_same_day(a: tuple, b: tuple) -> None:
    assert_frame_equal(a[0], b[0])
    assert_frame_equal(a[1], b[1])
    assert a[2] == b[2]


def whole_day(tmp_path, rounds: range) -> tuple:
    wh = Warehouse(tmp_path / "whole")
    for k in rounds:
        land_round(wh, k)
    ingest_partition(wh, SOURCE, DAY)
    return day_as_loaded(wh)


def test_rounds_ingested_a_few_at_a_time_load_what_the_whole_day_loads(tmp_path):
    wh = Warehouse(tmp_path / "intraday")
    reports = []
    for batch in (range(3), range(3, 4), range(4, 9), range(9, 12)):
        for k in batch:
            land_round(wh, k)
        reports.append(ingest_new_files(wh, SOURCE, DAY))
    assert reports[0].how == "whole day: no intraday run recorded the day"
    assert [r.how for r in reports[1:]] == ["1 new file(s) added", "5 new file(s) added", "3 new file(s) added"]
    whole = whole_day(tmp_path, range(12))
    assert_same_day(day_as_loaded(wh), whole)
    last = reports[-1]
    assert (last.files_read, last.records_read, last.records_loaded, last.records_quarantined) == whole[2][:4]
    assert last.records_quarantined > 0 and last.validation["dcgm_samples"]["failed"]  # both kinds happened
    assert whole[0].filter(pl.col("partition_date") != DAY).height > 0  # round 9's next-day rows went there too
    assert any("went to that day's partition" in note for note in last.notes)


def test_a_run_with_nothing_new_writes_nothing(tmp_path):
    wh = Warehouse(tmp_path / "home")
    for k in range(3):
        land_round(wh, k)
    ingest_new_files(wh, SOURCE, DAY)
    version, release = wh.store.version("raw.dcgm_samples"), wh.current_release()
    again = ingest_new_files(wh, SOURCE, DAY)
    assert again.how == "no new file" and again.files_read == 3
    assert (wh.store.version("raw.dcgm_samples"), wh.current_release()) == (version, release)


def test_a_file_rewritten_since_it_was_read_makes_the_day_read_whole(tmp_path):
    wh = Warehouse(tmp_path / "intraday")
    for k in range(4):
        land_round(wh, k)
    ingest_new_files(wh, SOURCE, DAY)
    land_round(wh, 2, value=0.75)  # the same name, other rows
    land_round(wh, 4)
    report = ingest_new_files(wh, SOURCE, DAY)
    assert report.how.startswith("whole day: 1 file(s) read before changed or went (scrape-0002.parquet")
    other = Warehouse(tmp_path / "whole")
    for k in range(5):
        land_round(other, k, value=0.75 if k == 2 else 0.25)
    ingest_partition(other, SOURCE, DAY)
    assert_same_day(day_as_loaded(wh), day_as_loaded(other))


def test_a_run_killed_after_the_lakes_commit_is_mended_by_the_next(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path / "intraday")
    for k in range(3):
        land_round(wh, k)
    ingest_new_files(wh, SOURCE, DAY)
    land_round(wh, 3)

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt("killed between the lake's commit and the warehouse's")

    with monkeypatch.context() as patch:  # the lake has committed round 3's rows; the warehouse never hears of it
        patch.setattr(Warehouse, "writer", killed)
        with pytest.raises(KeyboardInterrupt):
            ingest_new_files(wh, SOURCE, DAY)
    land_round(wh, 4)
    report = ingest_new_files(wh, SOURCE, DAY)
    assert report.how.startswith("whole day: the lake holds ")
    assert_same_day(day_as_loaded(wh), whole_day(tmp_path, range(5)))


def test_an_ingest_of_the_day_in_between_makes_the_run_read_the_day_whole(tmp_path):
    wh = Warehouse(tmp_path / "intraday")
    for k in range(3):
        land_round(wh, k)
    ingest_new_files(wh, SOURCE, DAY)
    land_round(wh, 3)
    meanwhile = []

    def another_ingest(path):  # while this run reads the new file, the daily ingest replaces the day
        if not meanwhile:
            meanwhile.append(ingest_partition(wh, SOURCE, DAY))

    report = ingest_new_files(wh, SOURCE, DAY, on_file=another_ingest)
    assert meanwhile and report.how.startswith("whole day: ") and "ingested again meanwhile" in report.how
    assert_same_day(day_as_loaded(wh), whole_day(tmp_path, range(4)))
    land_round(wh, 4)
    assert ingest_new_files(wh, SOURCE, DAY).how == "1 new file(s) added"  # the whole day's run recorded its files


def test_rows_the_day_befores_files_put_on_the_day_do_not_make_every_run_read_it_whole(tmp_path):
    """Round 9 of day 1 holds samples of day 2; day 2's own rounds then land in its folder. Day 2's whole
    ingest keeps day 1's rows and its record counts them, so the next run adds its new file."""
    wh = Warehouse(tmp_path / "intraday")
    land_round(wh, 9)
    ingest_partition(wh, SOURCE, DAY)
    next_day = DAY + dt.timedelta(days=1)
    folder = wh.landing / SOURCE / next_day.isoformat()
    folder.mkdir(parents=True)
    for k in range(2):
        pl.DataFrame({"sampled_at": [dt.datetime(2026, 11, 2, 9, k)] * 2, "host": ["h100-00"] * 2,
                      "gpu": [0, 1], "metric": ["DCGM_FI_PROF_SM_ACTIVE"] * 2, "value": [0.5, 0.25]},
                     schema_overrides={"gpu": pl.Int32}).write_parquet(folder / f"scrape-{k:04d}.parquet")
        report = ingest_new_files(wh, SOURCE, next_day)
        assert report.how == ("whole day: no intraday run recorded the day" if k == 0 else "1 new file(s) added")
    with wh.connect() as con:
        assert con.execute("select count(*) filter (where source_file like '%/2026-11-01/%'), count(*) "
                           "from raw.dcgm_samples where partition_date = ?", [next_day]).fetchone() == (4, 8)


def test_the_daily_ingest_of_the_whole_day_forgets_the_record(tmp_path):
    wh = Warehouse(tmp_path / "home")
    for k in range(3):
        land_round(wh, k)
    ingest_new_files(wh, SOURCE, DAY)
    ingest_partition(wh, SOURCE, DAY)
    land_round(wh, 3)
    assert ingest_new_files(wh, SOURCE, DAY).how == "whole day: no intraday run recorded the day"


def test_a_source_whose_files_do_not_append_is_read_whole(tmp_path):
    wh = Warehouse(tmp_path / "home")
    folder = wh.landing / "allocator_events" / DAY.isoformat()
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text("")
    report = ingest_new_files(wh, "allocator_events", DAY)
    assert report.how == "whole day: the source's files are not each their own records"
    assert ingest_new_files(wh, "allocator_events", DAY).how == report.how


@pytest.mark.parametrize("name", [name for name, src in SOURCES.items() if src.appends])
def test_a_source_that_appends_has_no_rule_across_rows(name):
    """A uniqueness rule would see only the new files' rows: such a source must not add files to a day."""
    for table in SOURCES[name].tables:
        kinds = {type(e).__name__ for e in build_suite(table).expectations}
        assert not {k for k in kinds if "Unique" in k}, (name, table, kinds)


def test_the_ingest_asset_adds_new_files_on_an_intraday_run_and_reads_the_day_whole_otherwise(tmp_path):
    import dagster as dg

    from pipelines.assets.ingest import ingest_assets
    from pipelines.assets.ingest_cursor import INGEST_TAG, NEW_FILES
    from pipelines.resources.warehouse import WarehouseResource

    wh = Warehouse(tmp_path / "home")
    asset = next(a for a in ingest_assets if a.key == dg.AssetKey(f"raw_{SOURCE}"))

    def run(**tags) -> int:
        dg.materialize([asset], resources={"warehouse": WarehouseResource(home=str(wh.home))},
                       partition_key=DAY.isoformat(), tags=tags)
        with wh.connect(read_only=True) as con:
            return con.execute("select count(*) from ops.ingest_state").fetchone()[0]

    for k in range(3):
        land_round(wh, k, bad=False)
    assert run(**{INGEST_TAG: NEW_FILES}) == 1  # recorded for the next intraday run
    land_round(wh, 3, bad=False)
    assert run(**{INGEST_TAG: NEW_FILES}) == 1
    assert wh.ingest_state(SOURCE, DAY)[1]["files_read"] == 4
    assert run() == 0  # the daily ingest: the day whole, and the record gone
    with wh.connect(read_only=True) as con:
        assert con.execute("select count(*), count(distinct source_file) from raw.dcgm_samples").fetchone() == (48, 4)
