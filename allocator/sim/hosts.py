"""Host telemetry of the simulated pool: what node_exporter would report for each host, per time step.

Rows in the `raw.host_samples` contract (`models/contracts/host_samples.yml`), one Parquet file per
day under `node_exporter_parquet/<day>/`. CPU time is `node_cpu_seconds_total` summed over the
host's CPUs (cpu="all") in four modes; memory is MemTotal and MemAvailable; one NIC and one disk as
cumulative byte counters. Counters start at a plausible value for a host booted days before the run
and only grow. The load follows the jobs on the host (`HostLoad`): the CPUs, network and disk work
with the GPUs' activity, and a loader-bound job saturates the host's CPUs (busy > 0.9) and reads
hard from its disk while its GPUs wait. Values are functions of (host, minute): reruns repeat.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from allocator.model import PoolConfig
from allocator.sample_parquet import ROW_GROUP_ROWS, sample_writer
from allocator.telemetry import WorkLoad, _constant, _hash01, _key64, _UnitTable, epoch_seconds

HOST_SOURCE = "node_exporter_parquet"
NIC, DISK = "eth0", "nvme0n1"
# per GPU model of the host's GPUs: CPUs (threads) and memory, from the vendors' reference servers
# (DGX H100: 2 x 56 cores, 2 TiB; DGX A100: 2 x 64 cores, 1 TiB; an L40S server: 2 x 32 cores, 512 GiB)
HOST_SHAPE = {"H100": (224, 2 << 40), "A100": (256, 1 << 40), "L40S": (128, 512 << 30)}
_DEFAULT_SHAPE = (128, 512 << 30)
MODES = ("idle", "user", "system", "iowait")
# counters: the four CPU modes, then NIC receive and transmit, disk read and written
_RX, _TX, _READ, _WRITTEN = 4, 5, 6, 7
_COUNTERS = (
    *(("node_cpu_seconds_total", "all", m, None) for m in MODES),
    ("node_network_receive_bytes_total", None, None, NIC),
    ("node_network_transmit_bytes_total", None, None, NIC),
    ("node_disk_read_bytes_total", None, None, DISK),
    ("node_disk_written_bytes_total", None, None, DISK),
)
# rates while idle, and per unit of the host's GPUs busy (bytes/s)
_BASE_RATE = np.array([2e5, 1e5, 5e5, 3e5])
_BUSY_RATE = np.array([3e9, 2e9, 2e8, 5e7])
LOADER_READ_BPS = 2.5e9  # a loader-bound job streams its data from disk


@dataclass(frozen=True)
class HostLoad:
    """What the jobs on each host ask of it, per host x time step (hosts in pool order): the GPU share
    held, that share weighted by activity, and the share held by loader-bound work (all 0..1 of the
    host's GPUs)."""

    hosts: tuple[str, ...]
    held: np.ndarray  # [host, step]
    active: np.ndarray
    loader: np.ndarray


def host_load(hosts: tuple[str, ...], table: _UnitTable, load: WorkLoad) -> HostLoad:
    """The day's `HostLoad` from what each work held (`BulkTelemetry.day(..., load=True)`)."""
    index = {h: i for i, h in enumerate(hosts)}
    unit_host = np.array([index[u.host] for u in table.units], dtype=np.int64)
    per_gpu = np.zeros(len(hosts))
    np.add.at(per_gpu, unit_host, table.weight)
    cell = unit_host[load.unit] * load.steps + load.step
    size = len(hosts) * load.steps

    def total(weights: np.ndarray) -> np.ndarray:
        return np.bincount(cell, weights=weights, minlength=size).reshape(len(hosts), load.steps) / per_gpu[:, None]

    return HostLoad(hosts, total(load.held), total(load.held * load.activity), total(load.held * load.loader_bound))


def down_steps(
    hosts: tuple[str, ...], spans: list[tuple[str, dt.datetime, dt.datetime]], times: np.ndarray
) -> np.ndarray:
    """bool [host, step]: the steps (epoch seconds `times`) at which a host is down, from the
    (host, down at, back at) spans."""
    down = np.zeros((len(hosts), len(times)), dtype=bool)
    for host, since, until in spans:
        down[hosts.index(host)] |= (times >= epoch_seconds(since)) & (times < epoch_seconds(until))
    return down


class HostTelemetry:
    """node_exporter samples for a pool's hosts, one `day` after another (counters carry over)."""

    def __init__(self, pool: PoolConfig, interval_s: int, start: dt.datetime):
        self.interval_s = interval_s
        self.hosts = tuple(n.host for n in pool.nodes)
        shape = [
            HOST_SHAPE.get(n.gpus[0].gpu_model, _DEFAULT_SHAPE) if n.gpus else _DEFAULT_SHAPE
            for n in pool.nodes
        ]
        self.cpus = np.array([c for c, _ in shape], dtype=np.float64)
        self.memory = np.array([m for _, m in shape], dtype=np.float64)
        self.key = np.array([_key64(f"host/{h}") for h in self.hosts], dtype=np.uint64)
        # booted 2-40 days before the run: counters hold that uptime at a quiet host's rates
        uptime = (2 + 38 * _hash01(self.key, np.zeros(len(self.hosts)))) * 86400.0
        self.boot_time = np.floor(epoch_seconds(start) - uptime)
        quiet = np.array([0.9, 0.08, 0.015, 0.005])
        cpu = self.cpus[:, None] * uptime[:, None] * quiet[None, :]
        self.counters = np.round(np.hstack([cpu, uptime[:, None] * _BASE_RATE[None, :]]), 2)

    def day(
        self, day_start: dt.datetime, load: HostLoad, path: Path, source_file: str, down: np.ndarray | None = None
    ) -> int:
        """Write the day's samples to `path` (one row group per metric); returns the rows written.
        down: bool [host, step], steps at which a host is down: no sample, and its counters stand still."""
        if load.hosts != self.hosts:
            raise ValueError("host load: its hosts are not this pool's; build both from the same pool")
        steps = load.held.shape[1]
        times = epoch_seconds(day_start) + self.interval_s * np.arange(steps, dtype=np.float64)
        n_hosts = len(self.hosts)
        u = _hash01(np.repeat(self.key, steps), np.tile(np.floor(times / 60.0), n_hosts)).reshape(
            n_hosts, steps
        )
        loader = load.loader > 0
        busy = 0.02 + 0.1 * load.held + 0.5 * load.active + 0.02 * u
        busy = np.minimum(np.where(loader, np.maximum(busy, 0.93 + 0.05 * u), busy), 0.995)
        iowait = busy * np.where(loader, 0.1, 0.03)
        system = busy * 0.12
        shares = (1.0 - busy, busy - system - iowait, system, iowait)
        cpu = [self.cpus[:, None] * self.interval_s * s for s in shares]
        wobble = 0.9 + 0.2 * u
        rates = [(_BASE_RATE[k] + _BUSY_RATE[k] * load.active) * wobble for k in range(4)]
        rates[_READ - 4] = rates[_READ - 4] + LOADER_READ_BPS * load.loader * wobble
        increments = np.stack([*cpu, *(r * self.interval_s for r in rates)])  # [counter, host, step]
        if down is not None:
            increments[:, down] = 0.0
        totals = self.counters.T[:, :, None] + np.cumsum(increments, axis=2)
        self.counters = totals[:, :, -1].T.copy()
        used = np.clip(0.03 + 0.25 * load.held + 0.2 * load.loader + 0.01 * u, 0.0, 0.95)
        gauges = (
            ("node_memory_MemTotal_bytes", np.broadcast_to(self.memory[:, None], (n_hosts, steps))),
            ("node_memory_MemAvailable_bytes", np.floor(self.memory[:, None] * (1.0 - used))),
            ("node_boot_time_seconds", np.broadcast_to(self.boot_time[:, None], (n_hosts, steps))),
        )
        series = [(*_COUNTERS[k], np.round(totals[k], 2)) for k in range(len(_COUNTERS))]
        series += [(name, None, None, None, values) for name, values in gauges]
        host = np.repeat(np.arange(n_hosts, dtype=np.int32), steps)
        stamps = pa.array((np.tile(times, n_hosts) * 1_000_000).astype(np.int64), pa.timestamp("us"))
        hosts = pa.DictionaryArray.from_arrays(pa.array(host), pa.array(self.hosts, pa.string()))
        n = n_hosts * steps
        kept = None if down is None else ~np.ravel(down)
        if kept is not None:
            stamps, hosts, n = stamps.filter(pa.array(kept)), hosts.filter(pa.array(kept)), int(kept.sum())
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = None
        try:
            for metric, cpu_label, mode, device, values in series:
                table = pa.table(
                    {
                        "sampled_at": stamps,
                        "host": hosts,
                        "metric": _constant(metric, n),
                        "value": pa.array(np.ravel(values) if kept is None else np.ravel(values)[kept], pa.float64()),
                        "cpu": _label(cpu_label, n),
                        "mode": _label(mode, n),
                        "device": _label(device, n),
                        "extra_labels": _label(None, n),
                        "source": _constant(HOST_SOURCE, n),
                        "source_file": _constant(source_file, n),
                    }
                )
                if writer is None:
                    writer = sample_writer(path, table.schema, ["sampled_at", "host", "metric", "value"])
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        finally:
            if writer is not None:
                writer.close()
        return n * len(series)


def _label(value: str | None, n: int) -> pa.DictionaryArray:
    if value is not None:
        return _constant(value, n)
    return pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, dtype=np.int32), mask=np.ones(n, dtype=bool)), pa.array([""], pa.string())
    )
