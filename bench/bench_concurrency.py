"""Benchmark: readers while writers load, and the backfill's speed-up with parallel partition writers.

(a) Reader latency: a reader process opens the published warehouse (`Warehouse.analyst_connect`, as
    `gpupool sql` and the dashboards do) and sums the cost shares of metrics.cost_attribution in a
    loop; p50/p99 and errors while the home is idle, then while `gpupool build --full-refresh` and
    `gpupool ingest all <home>/landing` run on the same home, one after the other.
(b) Backfill speed-up: the same simulated landing ingested into two fresh homes with `--workers 1`
    and `--workers N` (`gpupool ingest all LANDING --no-build`), wall times and their ratio.

Run:  .venv/bin/python bench/bench_concurrency.py [--gpus 64] [--days 7] [--workers 2]
      .venv/bin/python bench/bench_concurrency.py --demo-home .gpupool     # (a) on a copy of a built home
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GPUPOOL = str(Path(sys.executable).parent / "gpupool")
READER_SQL = "select count(*), sum(cost_share_pct), sum(total_cost_usd) from metrics.cost_attribution"


def reader(home: Path, out: Path, stop: Path) -> None:
    """Query READER_SQL on a fresh connection in a loop until `stop` exists; one line per query:
    start time, seconds, and "ok" or the error."""
    from pipelines.warehouse import Warehouse

    wh = Warehouse(home)
    with open(out, "w", buffering=1) as lines:
        while not stop.exists():
            began = time.time()
            try:
                with wh.analyst_connect() as con:
                    con.execute(READER_SQL).fetchall()
                status = "ok"
            except Exception as err:  # noqa: BLE001 -- every failure counts: readers must never be refused
                status = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
            lines.write(f"{began}\t{time.time() - began}\t{status}\n")


def run(args: list[str]) -> float:
    began = time.monotonic()
    done = subprocess.run([GPUPOOL, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"gpupool {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.monotonic() - began


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(name: str, rows: list[tuple[float, float, str]]) -> None:
    ok = [seconds for _, seconds, status in rows if status == "ok"]
    errors = [status for _, _, status in rows if status != "ok"]
    if not ok:
        print(f"  {name:<28} no successful query ({len(errors)} errors: {errors[:1]})")
        return
    print(f"  {name:<28} {len(rows):>5} queries  p50 {1000 * statistics.median(ok):7.1f} ms  "
          f"p99 {1000 * percentile(ok, 0.99):7.1f} ms  max {1000 * max(ok):7.1f} ms  errors {len(errors)}"
          + (f" (first: {errors[0]})" if errors else ""))


def reader_latency(home: Path, idle_s: float) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-readers-"))
    stop, out = work / "stop", work / "queries.tsv"
    proc = subprocess.Popen([sys.executable, __file__, "--reader", str(home), str(out), str(stop)],
                            cwd=Path(__file__).resolve().parent.parent)
    windows = {}
    try:
        time.sleep(2)  # the reader's imports
        began = time.time()
        time.sleep(idle_s)
        windows["idle"] = (began, time.time())
        began = time.time()
        build_s = run(["build", "--full-refresh", "--home", str(home)])
        windows["during build --full-refresh"] = (began, time.time())
        began = time.time()
        ingest_s = run(["ingest", "all", str(home / "landing"), "--home", str(home), "--no-build"])
        windows["during ingest all"] = (began, time.time())
    finally:
        stop.touch()
        proc.wait(timeout=120)
    rows = []
    for line in out.read_text().splitlines():
        started, seconds, status = line.split("\t", 2)
        rows.append((float(started), float(seconds), status))
    print(f"(a) reader latency, {READER_SQL!r} on a fresh connection each time")
    print(f"    build --full-refresh took {build_s:.1f} s, ingest all {ingest_s:.1f} s")
    for name, (low, high) in windows.items():
        summarise(name, [r for r in rows if low <= r[0] < high])
    shutil.rmtree(work, ignore_errors=True)


def backfill_speedup(landing: Path, root: Path, workers: int) -> None:
    times = {}
    for n in (1, workers):
        home = root / f"backfill-workers-{n}"
        shutil.rmtree(home, ignore_errors=True)
        times[n] = run(["ingest", "all", str(landing), "--home", str(home), "--no-build", "--workers", str(n)])
    days = len({p.name for p in landing.glob("*/*") if p.is_dir()})
    print(f"(b) backfill of {days} simulated day(s) from {landing} (wall time of `gpupool ingest all`)")
    print(f"    --workers 1: {times[1]:7.1f} s")
    print(f"    --workers {workers}: {times[workers]:7.1f} s")
    print(f"    speed-up: {times[1] / times[workers]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo-home", type=Path, help="a built home for (a), copied first (default: a new demo)")
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=10.0, help="seconds of reading while idle")
    parser.add_argument("--skip", choices=["readers", "backfill"], help="leave out one part")
    parser.add_argument("--reader", nargs=3, metavar=("HOME", "OUT", "STOP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reader:
        reader(*(Path(p) for p in args.reader))
        return
    root = Path(tempfile.mkdtemp(prefix="bench-concurrency-"))
    try:
        home = root / "home"
        if args.demo_home:
            shutil.copytree(args.demo_home, home)
            print(f"home: a copy of {args.demo_home}")
        else:
            seconds = run(["demo", "--days", str(args.days), "--gpus", str(args.gpus), "--no-baseline",
                           "--home", str(home)])
            print(f"home: gpupool demo --days {args.days} --gpus {args.gpus} ({seconds:.0f} s)")
        if args.skip != "readers":
            reader_latency(home, args.idle_s)
        if args.skip != "backfill":
            backfill_speedup(home / "landing", root, args.workers)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
