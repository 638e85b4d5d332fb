"""The Slurm admin audit against the real cluster: administrators' changes made with sacctmgr come
back through the connector (`sacctmgr -P list transactions WithAssoc`), ingest into a temporary
warehouse as raw.audit_events, and each is mapped: actor, action, object and what changed."""
from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import stat
from pathlib import Path

import dagster as dg
import pytest

from pipelines.assets.connectors import admin_audit_days, build_slurm_admin_audit_sensor
from pipelines.connectors.slurm import (
    LiveAccounting,
    SlurmConfig,
    land_transactions,
    run_command,
    transactions_command,
)
from pipelines.ingest import ingest_partition
from pipelines.resources.slurm import SlurmAccounting
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse
from tests.slurm.conftest import SlurmCluster, slurm

pytestmark = pytest.mark.slow  # the real Slurm

CAPTURE = Path(__file__).parent / "fixtures" / "sacctmgr_transactions.txt"


def sacctmgr(*args: str) -> str:
    return slurm("sacctmgr", "-i", *args)


def test_sacctmgr_changes_land_ingest_and_map(slurm_cluster: SlurmCluster, tmp_path) -> None:
    tag = f"{os.getpid() % 100000}"
    account, user, qos = f"gpaudit{tag}", f"gpaudit-user{tag}", f"gpaudit-qos{tag}"
    actor = getpass.getuser()
    first_day = dt.datetime.now(dt.UTC).date()
    try:
        sacctmgr("add", "account", account, "Description=audit test", "Organization=gpupool")
        sacctmgr("add", "user", user, f"Account={account}")
        sacctmgr("modify", "user", "where", f"name={user}", f"account={account}", "set", "GrpTRES=gres/gpu=2",
                 "MaxJobs=5")
        sacctmgr("add", "qos", qos, "Priority=10")
        sacctmgr("modify", "qos", "where", f"name={qos}", "set", "GrpTRES=gres/gpu=4")
        gpu_tres = next(line.split("|")[0] for line in slurm("sacctmgr", "-n", "-P", "list", "tres",
                                                             "format=ID,Type,Name").splitlines()
                        if line.split("|")[1:] == ["gres", "gpu"])
        days = sorted({first_day, dt.datetime.now(dt.UTC).date()})  # a test run across midnight: both

        warehouse = Warehouse(tmp_path / "gpupool")
        for day in days:
            landed = land_transactions(warehouse.landing, day, SlurmConfig(), run_command)
            assert landed.name == "transactions.txt" and landed.parent.parent.name == "slurm_sacctmgr"
            report = ingest_partition(warehouse, "slurm_sacctmgr", day)
            assert report.records_quarantined == 0, report
        with warehouse.connect(read_only=True) as con:
            rows = con.execute(
                "select action, object_kind, object_namespace, object_name, after_json, actor, source, decision "
                "from raw.audit_events where object_name in (?, ?, ?) or object_namespace = ? order by occurred_at",
                [account, user, qos, account]).fetchall()
    finally:
        slurm("sacctmgr", "-i", "remove", "user", user, check=False)
        slurm("sacctmgr", "-i", "remove", "account", account, check=False)
        slurm("sacctmgr", "-i", "remove", "qos", qos, check=False)

    assert {(r[5], r[6], r[7]) for r in rows} == {(actor, "slurm", "applied")}
    mapped = [(r[0], r[1], r[2], r[3]) for r in rows]
    assert ("permission.grant", "account", None, account) in mapped  # Add Accounts
    assert ("permission.grant", "association", account, account) in mapped  # the account's association
    assert ("permission.grant", "user", None, user) in mapped  # Add Users
    assert ("permission.grant", "association", account, user) in mapped  # user in account
    assert ("quota.create", "qos", None, qos) in mapped  # Add QOS
    changes = {(r[0], r[1], r[3]): json.loads(r[4]) for r in rows if r[0] == "quota.update"}
    # Modify Associations: the limit, on the association WithAssoc names
    assert changes[("quota.update", "association", user)].items() >= {"grp_tres": f"{gpu_tres}=2",
                                                                       "max_jobs": 5}.items()
    assert changes[("quota.update", "qos", qos)].items() >= {"grp_tres": f"{gpu_tres}=4"}.items()  # Modify QOS
    account_row = next(r for r in rows if r[1] == "account")
    assert json.loads(account_row[4]) == {"description": "audit test", "organization": "gpupool"}


# --- the connector and its sensor on a recorded capture (no Slurm needed) --------------------


def fake_sacctmgr(tmp_path: Path) -> Path:
    """A sacctmgr that prints the recorded capture and logs its arguments."""
    script = tmp_path / "fake-sacctmgr"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> '{tmp_path / 'argv.log'}'\ncat '{CAPTURE}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_the_day_s_transactions_are_asked_for_and_landed(tmp_path: Path) -> None:
    config = SlurmConfig(sacctmgr=str(fake_sacctmgr(tmp_path)), clusters="gpupool")
    day = dt.date(2026, 12, 1)
    assert transactions_command(config, day)[1:] == [
        "-P", "list", "transactions", "WithAssoc", "Start=2026-12-01T00:00:00", "End=2026-12-02T00:00:00",
        "Clusters=gpupool"]
    landed = land_transactions(tmp_path / "landing", day, config)
    assert landed == tmp_path / "landing" / "slurm_sacctmgr" / "2026-12-01" / "transactions.txt"
    assert landed.read_bytes() == CAPTURE.read_bytes()
    # the daily accounting fetch lands it too when `transactions` is one of its kinds
    live = LiveAccounting(config.model_copy(update={"accounting": ["transactions"]}))
    assert [(d.source, d.filename) for d in live.fetch(day)] == [("slurm_sacctmgr", "transactions.txt")]


def test_admin_audit_days_land_the_day_before_once_more_on_a_new_day() -> None:
    today = dt.date(2026, 12, 2)
    assert admin_audit_days(None, today) == [today]
    assert admin_audit_days("2026-12-02", today) == [today]
    assert admin_audit_days("2026-12-01", today) == [dt.date(2026, 12, 1), today]


def test_the_sensor_lands_today_and_requests_its_ingest(tmp_path: Path) -> None:
    config = tmp_path / "gpupool.yml"
    config.write_text(f"slurm:\n  sacctmgr: {fake_sacctmgr(tmp_path)}\n")
    home = tmp_path / "gpupool"
    resources = {"slurm": SlurmAccounting(config_file=str(config)), "warehouse": WarehouseResource(home=str(home))}
    with dg.build_sensor_context(resources=resources) as context:
        result = build_slurm_admin_audit_sensor()(context)
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert [r.partition_key for r in result.run_requests] == [today]
    assert result.cursor == today
    assert (Warehouse(home).landing / "slurm_sacctmgr" / today / "transactions.txt").read_bytes() == CAPTURE.read_bytes()
