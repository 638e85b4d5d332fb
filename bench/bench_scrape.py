"""Benchmark: scrape rounds of many simulated dcgm-exporters on loopback (rounds/s, samples/s).

    .venv/bin/python bench/bench_scrape.py                      # 500 exporters x 8 GPUs, 7 rounds
    .venv/bin/python bench/bench_scrape.py --targets 1000 --rounds 5 --concurrency 128

One server process (asyncio, one thread) listens on `--targets` loopback ports, one per
simulated exporter, and answers every GET with its node's pre-rendered dcgm-exporter text
(`allocator.telemetry.render_node_metrics` of an 8 x H100 node: 6 metrics per GPU, a different
text per host), over HTTP/1.1 keep-alive as dcgm-exporter does. This process scrapes every
target once per round with the pipeline's scraper (`pipelines.connectors.scrape.Scraper`: one
Session, a thread pool, the parser over all bodies at once) and writes the round's Parquet file
into a temporary landing zone and its gaps into ops.scrape_gaps, as the sensor does. The first
round opens the connections and is reported apart; the next `--rounds` are timed. It prints per round the fetch, parse and write
times, the median round, rounds/s and samples/s, and checks every round against the target:
every exporter answered and every sample loaded, the round well under the 15 s interval. Both
the server and the scraper run on this machine's cores; the exporters of a real fleet do not.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path

SCRAPE_INTERVAL_S = 15.0
RENDERED_AT = dt.datetime(2026, 3, 2, 12, 0)
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


# -- the exporters (child process) -------------------------------------------------------------
def _bodies(targets: int, gpus: int) -> list[bytes]:
    from allocator.model import GpuSpec, NodeSpec, PoolConfig
    from allocator.telemetry import render_node_metrics

    nodes = tuple(
        NodeSpec(f"gpu-node-{i:04d}", tuple(GpuSpec(f"gpu-node-{i:04d}", g, "H100") for g in range(gpus)))
        for i in range(targets)
    )
    pool = PoolConfig(nodes=nodes, queues=(), tenants=())
    return [render_node_metrics(pool, {}, n.host, RENDERED_AT).encode() for n in nodes]


def serve_exporters(targets: int, gpus: int, ports: mp.Queue, stop: mp.Event) -> None:
    """Listen on `targets` loopback ports until `stop` is set; report the ports through `ports`."""

    async def main() -> None:
        servers = []
        for body in _bodies(targets, gpus):
            response = (
                b"HTTP/1.1 200 OK\r\nContent-Type: "
                + CONTENT_TYPE
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )

            async def answer(reader, writer, response=response) -> None:
                try:
                    while True:
                        await reader.readuntil(b"\r\n\r\n")  # a GET has no body
                        writer.write(response)
                        await writer.drain()
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                    pass
                finally:
                    writer.close()

            servers.append(await asyncio.start_server(answer, "127.0.0.1", 0, backlog=64))
        ports.put([s.sockets[0].getsockname()[1] for s in servers])
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for s in servers:
            s.close()

    asyncio.run(main())


# -- the scraper (this process) ----------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--targets", type=int, default=500, help="simulated exporters (one port each)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per exporter")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds after the first")
    parser.add_argument("--concurrency", type=int, default=64, help="scraper threads")
    args = parser.parse_args()

    from pipelines.connectors.scrape import DcgmConfig, Scraper, write_round
    from pipelines.ingest import record_scrape_gaps
    from pipelines.warehouse import Warehouse

    ctx = mp.get_context("spawn")
    ports_queue, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(
        target=serve_exporters, args=(args.targets, args.gpus, ports_queue, stop), daemon=True
    )
    server.start()
    try:
        ports = ports_queue.get(timeout=120)
        config = DcgmConfig(
            targets=[f"http://127.0.0.1:{p}/metrics" for p in ports],
            concurrency=args.concurrency,
            interval_s=SCRAPE_INTERVAL_S,
        )
        scraper = Scraper(config)
        rows = []
        with tempfile.TemporaryDirectory(prefix="gpupool-bench-scrape-") as tmp:
            warehouse = Warehouse(Path(tmp))
            for n in range(args.rounds + 1):
                began = time.perf_counter()
                scrape = scraper.scrape_round(RENDERED_AT + dt.timedelta(seconds=SCRAPE_INTERVAL_S * n))
                written = time.perf_counter()
                write_round(warehouse.landing, scrape)
                record_scrape_gaps(warehouse, scrape.gaps)
                ended = time.perf_counter()
                rows.append((scrape, ended - began, ended - written))
        scraper.close()
    finally:
        stop.set()
        server.join(timeout=10)
        if server.is_alive():
            server.terminate()
            server.join(timeout=5)

    expected = args.targets * args.gpus * 6
    print(
        f"{args.targets} exporters x {args.gpus} GPUs on loopback, {args.concurrency} scraper threads, "
        f"{expected:,} samples per round ({rows[0][0].bytes_read / 1e6:.1f} MB)"
    )
    for i, (scrape, total, write_s) in enumerate(rows):
        label = "first round (connecting)" if i == 0 else f"round {i}"
        print(
            f"  {label:<25} {total:6.3f} s  (fetch {scrape.fetch_s:.3f}, parse {scrape.parse_s:.3f}, "
            f"write {write_s:.3f})  {scrape.targets_ok}/{scrape.targets} ok, {scrape.samples.height:,} samples"
        )
    timed = [total for _, total, _ in rows[1:]]
    median = statistics.median(timed)
    print(
        f"median round {median:.3f} s of {len(timed)} -> {1 / median:.2f} rounds/s, {expected / median:,.0f} samples/s"
    )
    complete = all(s.targets_ok == args.targets and s.samples.height == expected for s, _, _ in rows)
    print(f"every exporter answered and every sample loaded in every round: {'yes' if complete else 'NO'}")
    share = median / SCRAPE_INTERVAL_S
    verdict = "met" if complete and share < 0.5 else "NOT met"
    print(
        f"target: one round well under the {SCRAPE_INTERVAL_S:g} s interval -> {share:.1%} of it: {verdict}"
    )


if __name__ == "__main__":
    main()
