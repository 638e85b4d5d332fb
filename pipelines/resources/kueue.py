"""Kueue state as a Dagster resource: live (the cluster of gpupool.yml) or offline (recorded answers)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
from pydantic import Field

from pipelines.config import config_file_field, config_path
from pipelines.connectors.kubernetes import KubernetesConfig, load_kubernetes_config
from pipelines.connectors.kueue import KueueClient, KueueSource, RecordedKueue, land_snapshot


class KueueState(dg.ConfigurableResource):
    """Kueue Workloads (and their pods) into the landing zone, for the `kueue` ingest source.

    Live (default): the cluster of the `kubernetes:` section of the configuration file
    (`config_file`, else $GPUPOOL_CONFIG, else ./gpupool.yml). Offline: `offline_dir` holds recorded
    API answers, `<offline_dir>/<day>/workloads.json` and `pods.json`.
    """

    offline_dir: str = Field("", description=(
        "Recorded API answers to read instead of the live cluster (<dir>/<day>/workloads.json, pods.json). "
        "Empty: live."))
    config_file: str = config_file_field()

    def settings(self) -> KubernetesConfig:
        return load_kubernetes_config(config_path(self.config_file))

    def client(self) -> KueueSource:
        if self.offline_dir:
            return RecordedKueue(Path(self.offline_dir))
        return KueueClient.from_config(self.settings())

    def land(self, landing: Path, day: dt.date) -> list[Path]:
        """Take a snapshot (live: now; offline: the day's recording) and merge it into the day's
        files under `landing` (the warehouse's landing zone)."""
        return land_snapshot(landing, day, self.client().snapshot(day))
