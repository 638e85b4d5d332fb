"""The reclaim loop wired from gpupool.yml: the engines whose running work the tick reads, the
enforcers of the engines it names, the outbox, the owners' reminders, and one governance tick with them (what the
`idle_reclaim` sensor runs through GovernanceResource)."""
from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

from pipelines.config import ConfigError, section
from pipelines.connectors.allocator import AllocatorClient, AllocatorConfig
from pipelines.connectors.kubernetes import KubernetesConfig
from pipelines.connectors.prometheus import PrometheusConfig
from pipelines.connectors.slurm import SlurmConfig
from pipelines.enforcement.allocator import AllocatorEnforcer
from pipelines.enforcement.base import ActionLedger, Enforcer
from pipelines.enforcement.kueue import KueueEnforcer
from pipelines.enforcement.slurm import SlurmEnforcer
from pipelines.governance.dryrun import DryRun, dry_run
from pipelines.governance.outbox import Outbox
from pipelines.governance.running import AllocatorWork, RunningWorkReader, SlurmWork
from pipelines.governance.running_kueue import KueueWork, PrometheusPods
from pipelines.governance.telemetry import ScrapeRounds, Telemetry, shared_prometheus_minutes
from pipelines.governance.tick import TickReport, governance_tick
from pipelines.notify.config import reminders_config
from pipelines.notify.reminders import Reminders
from pipelines.policies.catalog import PolicyCatalog

log = logging.getLogger(__name__)
SENSOR_WRITER = "sensor"


def build_enforcers(config_file: Path, allocator: AllocatorConfig | None, landing: Path,
                    ledgers: Path) -> dict[str, Enforcer]:
    """The built-in allocator's (when the pool runs it: `allocator`), Slurm's and Kueue's when
    `config_file` configures them: actions on work those engines hold go through the same interface.
    Their ledgers live in `ledgers` (the outbox's folder)."""
    out: dict[str, Enforcer] = {} if allocator is None else {"allocator": AllocatorEnforcer.from_config(allocator)}
    slurm = section("slurm", SlurmConfig, config_file)
    if slurm is not None:
        out["slurm"] = SlurmEnforcer(ActionLedger(ledgers / "slurm-ledger.db", landing, "slurm"), slurm)
    kubernetes = section("kubernetes", KubernetesConfig, config_file)
    if kubernetes is not None:
        try:
            out["kueue"] = KueueEnforcer(ActionLedger(ledgers / "kueue-ledger.db", landing, "kueue"), kubernetes)
        except Exception as exc:  # noqa: BLE001 - no API client: Kueue's actions wait, the others go
            log.warning("Kueue enforcement unavailable (%s); its actions stay queued in the outbox", exc)
    return out


def build_readers(config_file: Path, client: AllocatorClient | None, landing: Path,
                  telemetry: str = "dcgm_scrape") -> list[RunningWorkReader]:
    """The engines whose running work the tick reads: the allocator (when the pool runs it: `client`),
    Slurm when gpupool.yml has `slurm.governance` (the partitions it may read) and Kueue when it has
    `kubernetes.governance` (the namespaces it may read; the pods' GPUs from where the `telemetry`
    comes from: the scrape rounds in `landing`, or Prometheus); neither without its section."""
    out: list[RunningWorkReader] = [] if client is None else [AllocatorWork(client)]
    slurm = section("slurm", SlurmConfig, config_file)
    if slurm is not None and slurm.governance is not None:
        out.append(SlurmWork(slurm))
    kubernetes = section("kubernetes", KubernetesConfig, config_file)
    if kubernetes is not None and kubernetes.governance is not None:
        pods = None
        if telemetry == "prometheus":  # the telemetry's client: one connection pool per process, not one a tick
            config = _prometheus(config_file)
            pods = PrometheusPods(config, client=shared_prometheus_minutes(config).client)
        out.append(KueueWork(kubernetes, landing, pods=pods))
    return out


def _governed(config_file: Path, client: AllocatorClient | None, landing: Path,
              telemetry: str) -> list[RunningWorkReader]:
    """`build_readers`, or a ConfigError saying how to name an engine when there is none."""
    readers = build_readers(config_file, client, landing, telemetry)
    if not readers:
        raise ConfigError(f"{config_file}: no engine to govern: idle-reclaim reads running work from the "
                          "allocator (an `allocator:` section with its url and a governance_bot token), Slurm "
                          "(`slurm.governance.partitions`) or Kueue (`kubernetes.governance.namespaces`); "
                          "see docs/reclaim.md")
    return readers


def build_telemetry(config_file: Path, source: str, landing: Path) -> Telemetry:
    """The tick's telemetry as `governance.telemetry` names it: `dcgm_scrape`, the rounds landed in
    `landing`, or `prometheus`, the `prometheus:` section's server (kept minutes shared in the process)."""
    if source == "dcgm_scrape":
        return ScrapeRounds(landing)
    if source == "prometheus":
        return shared_prometheus_minutes(_prometheus(config_file))
    raise ConfigError(f"{config_file}: governance.telemetry {source!r}: expected dcgm_scrape or prometheus")


def _prometheus(config_file: Path) -> PrometheusConfig:
    config = section("prometheus", PrometheusConfig, config_file)
    if config is None:
        raise ConfigError(f"{config_file}: governance.telemetry is prometheus but there is no `prometheus:` "
                          "section (its url, auth and selector); see docs/reclaim.md")
    return config


def build_reminders(config_file: Path, folder: Path) -> Reminders | None:
    """The owners' reminders when gpupool.yml has a `reminders` section (their sent ledger in `folder`,
    the outbox's); None without one."""
    config = reminders_config(config_file)
    return Reminders(config, folder / "reminders.db") if config is not None else None


def run_governance_tick(now: dt.datetime, *, config_file: Path, allocator: AllocatorConfig | None, landing: Path,
                        catalog: PolicyCatalog, outbox_path: Path, lookback: dt.timedelta | None,
                        telemetry: str = "dcgm_scrape") -> TickReport:
    """One governance tick at `now`: the outbox at `outbox_path` (writer `sensor`), the running work
    of every configured engine (the allocator when `allocator` is given, Slurm, Kueue), the `telemetry`
    named (`build_telemetry`) and every configured enforcer, closed again after. A configuration that
    names no engine to read is an error."""
    client = None if allocator is None else AllocatorClient.from_config(allocator)
    readers = _governed(config_file, client, landing, telemetry)
    minutes = build_telemetry(config_file, telemetry, landing)
    outbox = Outbox(outbox_path, landing, writer=SENSOR_WRITER)
    reminders = build_reminders(config_file, outbox_path.parent)
    try:
        return governance_tick(
            now, landing=landing, catalog=catalog, outbox=outbox, client=client,
            enforcers=build_enforcers(config_file, allocator, landing, outbox_path.parent), lookback=lookback,
            work=readers, reminders=reminders, telemetry=minutes,
        )
    finally:
        outbox.close()
        if reminders is not None:
            reminders.close()


def run_dry_run(now: dt.datetime, *, config_file: Path, allocator: AllocatorConfig | None, landing: Path,
                catalog: PolicyCatalog, outbox_path: Path, lookback: dt.timedelta | None,
                telemetry: str = "dcgm_scrape") -> DryRun:
    """What a governance tick at `now` would do, touching nothing (pipelines/governance/dryrun.py)."""
    client = None if allocator is None else AllocatorClient.from_config(allocator)
    return dry_run(now, landing=landing, catalog=catalog, readers=_governed(config_file, client, landing, telemetry),
                   outbox_path=outbox_path, lookback=lookback,
                   telemetry=build_telemetry(config_file, telemetry, landing))
