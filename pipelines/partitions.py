"""Every partitions definition, once.

The first day is `$GPUPOOL_PARTITIONS_START` (YYYY-MM-DD), default 2010-01-01: Slurm accounting
and Kubernetes audit archives go back years, and an ingest of a day before the first partition
would be refused. Changing it only changes which days Dagster lists; loaded data is unaffected.
The monthly partitions start on the first of that month.
"""
import datetime as dt
import os

import dagster as dg

DEFAULT_START = "2010-01-01"


def _start() -> dt.date:
    text = os.environ.get("GPUPOOL_PARTITIONS_START") or DEFAULT_START
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"$GPUPOOL_PARTITIONS_START={text!r}: expected a date YYYY-MM-DD") from None


# The first UTC day any asset is partitioned by; `gpupool ingest --date` refuses earlier days.
FIRST_DAY = _start()

# UTC days; the landing zone has one folder per day and each ingest replaces one day.
daily_partitions = dg.DailyPartitionsDefinition(start_date=FIRST_DAY.isoformat(), timezone="UTC", end_offset=1)

# Calendar months (UTC) for the capacity recommendations and the monthly review pack; a month's
# partition is ready once it has ended.
monthly_partitions = dg.MonthlyPartitionsDefinition(start_date=FIRST_DAY.replace(day=1).isoformat(), timezone="UTC")


def last_day() -> dt.date:
    """The last daily partition: tomorrow (UTC), so that a day still under way can be loaded."""
    return dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)


def check_day(day: dt.date) -> None:
    """Raise ValueError, naming the limit, for a day outside the daily partitions."""
    if day < FIRST_DAY:
        raise ValueError(
            f"{day} is before the first partition, {FIRST_DAY}; set $GPUPOOL_PARTITIONS_START to an earlier "
            "day (YYYY-MM-DD) to load older history"
        )
    if day > last_day():
        raise ValueError(f"{day} is in the future: the last partition is {last_day()} (tomorrow, UTC)")
