"""dcgm-exporter health lines for the model tests, in the exporter's own exposition format (labels as
dcgm-exporter 3.x/4.x writes them), parsed by the real text parser into raw.dcgm_samples rows."""
from __future__ import annotations

import datetime as dt
from typing import Any

from pipelines.sources.dcgm_text import parse_dcgm_text


def line(metric: str, host: str, gpu: int, value: float, at: dt.datetime, **labels: str) -> str:
    """One sample line: `NAME{gpu,UUID,pci_bus_id,device,modelName,Hostname[,extra]} VALUE TIMESTAMP_MS`."""
    host_hex = host.encode().hex()[-8:].rjust(8, "0")
    base = (
        f'gpu="{gpu}",UUID="GPU-34319582-d595-d1c7-d1d2-{host_hex}{gpu:04x}",pci_bus_id="00000000:{gpu + 7:02X}:00.0",device="nvidia{gpu}",'
        f'modelName="NVIDIA A100-SXM4-80GB",Hostname="{host}"'
    )
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    ms = int(at.replace(tzinfo=dt.UTC).timestamp() * 1000)
    return f"{metric}{{{base}{extra}}} {value:g} {ms}"


def every(step_s: int, start: dt.datetime, minutes: int) -> list[dt.datetime]:
    return [start + dt.timedelta(seconds=s) for s in range(0, minutes * 60, step_s)]


def parse(lines: list[str]) -> list[dict[str, Any]]:
    """Raw dcgm_samples rows of exposition lines, as the dcgm_text source loads them."""
    result = parse_dcgm_text("\n".join(lines) + "\n", "metrics.prom")
    assert result.quarantine.height == 0, result.quarantine
    return [
        {k: (v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v) for k, v in row.items()}
        for row in result.tables["dcgm_samples"].to_dicts()
    ]
