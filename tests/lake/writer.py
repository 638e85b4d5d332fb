"""A writer process for the concurrency tests: `python -m tests.lake.writer ROOT TABLE WRITER DAYS REPEAT`.

DAYS are day offsets from frames.DAY0, comma-separated; REPEAT < 0 loops until killed. It prints
one line per commit (flushed), so a test can wait for the first commit before it kills the process.
"""
from __future__ import annotations

import itertools
import logging
import sys
from pathlib import Path

from pipelines.lake.tables import DeltaStore
from tests.lake.frames import day, day_frame


def main(root: str, table: str, writer: str, days: str, repeat: str) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # shows each retried conflict
    store = DeltaStore(Path(root))
    offsets = [int(x) for x in days.split(",")]
    rounds = itertools.count() if int(repeat) < 0 else range(int(repeat))
    for seq in rounds:
        for offset in offsets:
            d = day(offset)
            version = store.replace_partition(table, d, day_frame(d, writer, seq), "partition_date")
            print(f"committed {d} v{version}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
