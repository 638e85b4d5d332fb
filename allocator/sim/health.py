"""GPU health series of the simulated pool, as dcgm-exporter writes them (sources: docs/simulator.md, "Faults").

A fault or a user-code crash is a `HealthEvent` on a physical GPU. `HealthSeries` turns a day's events
into the exporter's health series in the `raw.dcgm_samples` contract (an extra table of the day's
`dcgm_parquet` file): the last XID code, the windowed XID count, and the double-bit ECC counters and
row-remap state, which carry over days. An XID less than the exporter's window before midnight is
carried into the next day (`HealthSeries.carry`), so its window does not stop at midnight.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from allocator.telemetry import BULK_SOURCE, DRIVER_VERSION, _constant, _dict, _UnitTable, epoch_seconds

# dcgm-exporter field names; the XID count is a gauge over the exporter's window
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_WINDOW_S = 300  # dcgm-exporter's default XID count window (5 min)
ECC_DBE_VOL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ECC_DBE_AGG = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
UNCORRECTABLE_REMAPPED = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
ECC_SERIES = (ECC_DBE_VOL, ECC_DBE_AGG, UNCORRECTABLE_REMAPPED, ROW_REMAP_FAILURE)


@dataclass(frozen=True)
class HealthEvent:
    """A health signal on a physical GPU: an XID, double-bit ECC errors (each retires a row), or a
    row-remap failure (no spare row left)."""

    host: str
    gpu: int
    at: dt.datetime
    xid: int | None = None
    dbe: int = 0
    remap_failure: bool = False


class HealthSeries:
    """The health series of a pool's GPUs, one day after another (ECC counters carry over days)."""

    def __init__(self, table: _UnitTable, interval_s: int):
        self.units = table
        self.interval_s = interval_s
        self.host = np.array([u.host for u in table.units])
        # per physical GPU: double-bit errors and row-remap failure so far
        self.totals: dict[tuple[str, int], tuple[int, int]] = {}
        self.first_unit: dict[tuple[str, int], int] = {}
        for i, u in enumerate(table.units):
            self.first_unit.setdefault((u.host, u.gpu), i)

    @staticmethod
    def carry(events: Sequence[HealthEvent], day_end: dt.datetime) -> list[HealthEvent]:
        """The XIDs of a day whose window reaches past `day_end`, for the next day's XID series (their
        ECC errors are counted already)."""
        window = dt.timedelta(seconds=XID_WINDOW_S)
        return [
            replace(e, dbe=0, remap_failure=False)
            for e in events
            if e.xid is not None and e.at < day_end < e.at + window
        ]

    def table(
        self,
        events: Sequence[HealthEvent],
        times: np.ndarray,
        source_file: str,
        down: Mapping[str, np.ndarray] | None = None,
    ) -> pa.Table:
        """The day's health series of the GPUs with events, as dcgm-exporter writes them, in the
        dcgm_samples contract (device-level: no GPU instance). For each such GPU, every step of the day:
        DCGM_FI_DEV_XID_ERRORS (the last XID code, 0 before the first); and where a GPU had ECC
        events, the aggregate and volatile double-bit counters, uncorrectable remapped rows and the
        row-remap failure flag (counters as totals since the run began, so the day starts from the
        GPU's earlier count). DCGM_EXP_XID_ERRORS_COUNT{xid} is the exporter's windowed gauge: the
        XIDs of that code seen in the last XID_WINDOW_S, at the steps inside the window (an event of
        the day before counts in the window it opened). down: host -> bool [step], the steps at which
        that host is down and reports nothing."""
        steps = len(times)
        t_event = np.array([epoch_seconds(e.at) for e in events])
        by_gpu: dict[tuple[str, int], list[int]] = {}
        for i, e in enumerate(events):
            by_gpu.setdefault((e.host, e.gpu), []).append(i)
        rows_unit: list[np.ndarray] = []
        rows_step: list[np.ndarray] = []
        metric: list[np.ndarray] = []
        labels: list[np.ndarray] = []
        values: list[np.ndarray] = []
        names = [XID_ERRORS, XID_COUNT, *ECC_SERIES]
        label_names = [f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"']

        def add(unit: int, step: np.ndarray, name: str, value: np.ndarray, label: int = 0) -> None:
            rows_unit.append(np.full(len(step), unit))
            rows_step.append(step)
            metric.append(np.full(len(step), names.index(name)))
            labels.append(np.full(len(step), label))
            values.append(value.astype(np.float64))

        everyday = np.arange(steps)
        for (host, gpu), idx in sorted(by_gpu.items()):
            unit = self.first_unit[(host, gpu)]
            idx = sorted(idx, key=lambda i: t_event[i])
            before = self.totals.get((host, gpu), (0, 0))
            at = np.searchsorted(times, t_event[idx], "left")  # the first step that sees it
            # the steps inside each event's window: [at, at + XID_WINDOW_S)
            until = np.searchsorted(times, t_event[idx] + XID_WINDOW_S, "left")
            xids = [
                (events[i].xid, a, u) for i, a, u in zip(idx, at, until, strict=True) if events[i].xid is not None
            ]
            if xids:
                last = np.zeros(steps)
                for code, a, _ in xids:
                    last[a:] = code
                add(unit, everyday, XID_ERRORS, last)
                for code in sorted({c for c, _, _ in xids}):
                    seen = np.zeros(steps)
                    for c, a, u in xids:
                        if c == code:
                            seen[a:u] += 1
                    text = f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}",window_size_in_ms="{XID_WINDOW_S * 1000}",xid="{code}"'
                    if text not in label_names:
                        label_names.append(text)
                    hit = np.flatnonzero(seen)
                    add(unit, hit, XID_COUNT, seen[hit], label_names.index(text))
            dbe = [(events[i].dbe, events[i].remap_failure, a) for i, a in zip(idx, at, strict=True)]
            if any(d or f for d, f, _ in dbe):
                errors = np.full(steps, float(before[0]))
                failed = np.full(steps, float(before[1]))
                for d, f, a in dbe:
                    errors[a:] += d
                    failed[a:] = np.maximum(failed[a:], float(f))
                for name in (ECC_DBE_VOL, ECC_DBE_AGG, UNCORRECTABLE_REMAPPED):
                    add(unit, everyday, name, errors)
                add(unit, everyday, ROW_REMAP_FAILURE, failed)
                self.totals[(host, gpu)] = (int(errors[-1]), int(failed[-1]))
        unit = np.concatenate(rows_unit).astype(np.int64)
        step = np.concatenate(rows_step).astype(np.int64)
        kept = np.ones(len(unit), dtype=bool)
        for host, steps_down in (down or {}).items():
            kept &= ~((self.host[unit] == host) & steps_down[step])
        unit, step = unit[kept], step[kept]
        metric, labels, values = (np.concatenate(x)[kept] for x in (metric, labels, values))
        n = len(unit)
        t = self.units
        device_level = np.full(n, -1, dtype=np.int32)
        return pa.table(
            {
                "sampled_at": pa.array((times[step] * 1_000_000).astype(np.int64), pa.timestamp("us")),
                "host": _dict(t.strings["host"], unit),
                "gpu": pa.array(t.gpu[unit], pa.int32()),
                "uuid": _dict(t.strings["uuid"], unit),
                "device": _dict(t.strings["device"], unit),
                "pci_bus_id": _dict(t.strings["pci_bus_id"], unit),
                "model_name": _dict(t.strings["model_name"], unit),
                "gpu_instance_id": pa.array(device_level, pa.int32(), mask=device_level < 0),
                "gpu_instance_profile": _dict((device_level, [""]), np.arange(n)),
                "metric": _dict((np.arange(len(names), dtype=np.int32), names), metric),
                "value": pa.array(values, pa.float64()),
                "k8s_namespace": pa.nulls(n, pa.string()),
                "k8s_pod": pa.nulls(n, pa.string()),
                "k8s_container": pa.nulls(n, pa.string()),
                "hpc_job": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(n, dtype=np.int32), mask=np.ones(n, dtype=bool)),
                    pa.array([""], pa.string()),
                ),
                "extra_labels": _dict(
                    (np.arange(len(label_names), dtype=np.int32), label_names), labels
                ),
                "source": _constant(BULK_SOURCE, n),
                "source_file": _constant(source_file, n),
            }
        )
