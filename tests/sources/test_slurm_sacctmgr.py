"""sacctmgr list transactions → raw.audit_events: a real capture (this repository's test cluster,
Slurm 22.05), its WithAssoc, header-less and format= variants, the changes Slurm records for limits
and QOS, and broken lines."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest

from pipelines.sources.registry import SOURCES
from pipelines.sources.slurm_sacctmgr import key_values, map_action, parse_sacctmgr_transactions, where_terms

FIXTURES = Path(__file__).parents[1] / "slurm" / "fixtures"
CAPTURE = FIXTURES / "sacctmgr_transactions.txt"
HEADER = "Time|Action|Actor|Where|Info\n"


def lines(*rows: str) -> str:
    """A capture with its header."""
    return HEADER + "".join(f"{row}\n" for row in rows)


def parse(text: str, name: str = "t.txt"):
    result = parse_sacctmgr_transactions(text.encode(), name)
    assert result.records_read == result.records_loaded + result.records_quarantined
    return result, result.tables["audit_events"]


def test_every_transaction_of_the_real_capture_is_mapped():
    text = CAPTURE.read_text()
    raw_actions = [line.split("|")[1] for line in text.splitlines()[1:]]
    result, rows = parse(text, str(CAPTURE))
    assert result.records_quarantined == 0
    assert rows.height == len(raw_actions) == result.records_read
    assert rows.get_column("audit_id").n_unique() == rows.height
    for column in ("occurred_at", "actor", "action", "object_kind", "object_name"):
        assert rows.get_column(column).null_count() == 0, column
    assert rows.filter(pl.col("after_json").is_null()).get_column("action").str.contains("revoke|delete").all()
    assert set(rows.get_column("decision")) == {"applied"} and set(rows.get_column("source")) == {"slurm"}
    expected = {"Add Users": "permission.grant", "Add Accounts": "permission.grant",
                "Add Associations": "permission.grant", "Remove Users": "permission.revoke",
                "Remove Accounts": "permission.revoke", "Remove Account Coords": "permission.revoke",
                "Modify Associations": "quota.update", "Add QOS": "quota.create", "Modify QOS": "quota.update",
                "Remove QOS": "quota.delete"}
    for raw, action in zip(raw_actions, rows.get_column("action"), strict=True):
        assert action == expected.get(raw, raw)  # Add Clusters, Modify Clusters, Add TRES keep their names
    # the live test's limits (tests/slurm/test_sacctmgr_audit.py): TRES set through SQL if (...)
    limit = rows.filter(pl.col("object_kind") == "association", pl.col("action") == "quota.update").row(0, named=True)
    assert json.loads(limit["after_json"]) == {"grp_tres": "1001=2", "max_jobs": 5}
    assert limit["object_name"].startswith("gpaudit-user")  # resolved from its Add Associations by id
    qos = rows.filter(pl.col("action") == "quota.update", pl.col("object_kind") == "qos").row(0, named=True)
    assert json.loads(qos["after_json"]) == {"grp_tres": "1001=4"} and qos["object_name"].startswith("gpaudit-qos")
    user = rows.filter(pl.col("object_kind") == "user").row(0, named=True)
    assert (user["actor"], user["object_name"], json.loads(user["after_json"])) == (
        "root", "gpupool-rest", {"admin_level": 1})
    assert user["occurred_at"] == dt.datetime(2026, 12, 1, 9, 23, 56)
    accounts = rows.filter(pl.col("object_kind") == "account")
    assert {"nlp", "platform", "vision"} <= set(accounts.get_column("object_name"))
    assert json.loads(accounts.row(0, named=True)["after_json"])["description"] == "vision team"
    # an association names its account and user (the account itself for the account's own association)
    assocs = rows.filter(pl.col("object_kind") == "association").select("object_namespace", "object_name").rows()
    assert ("platform", "gpupool-rest") in assocs and ("vision", "vision") in assocs


def test_withassoc_header_less_and_format_captures_read_the_same_transactions():
    _, with_assoc = parse((FIXTURES / "sacctmgr_transactions_withassoc.txt").read_text())
    _, no_header = parse((FIXTURES / "sacctmgr_transactions_noheader.txt").read_text())
    result, chosen = parse((FIXTURES / "sacctmgr_transactions_format.txt").read_text())
    assert result.records_quarantined == 0
    # header or not, the same line is the same transaction (re-deliveries dedupe in staging)
    assert no_header.height == with_assoc.height == chosen.height > 0
    columns = ["occurred_at", "action", "object_kind", "object_name"]
    assert no_header.select(columns).equals(with_assoc.select(columns))
    # without Info an association is named by its id only
    assert chosen.select(columns[:3]).equals(no_header.select(columns[:3]))
    assert "id_assoc=9" in chosen.get_column("object_name").to_list()
    assert chosen.get_column("after_json").null_count() == chosen.height  # format= without Info


# What Slurm 22.05 writes for the changes the test cluster's capture does not have (as_mysql_qos.c,
# as_mysql_assoc.c, as_mysql_user.c: Where is the SQL condition, Info the assignments); the live
# test (tests/slurm/test_sacctmgr_audit.py) makes them on the real cluster.
CHANGES = lines(
    "2026-12-01T10:00:00|Add QOS|root|gpu-burst|description='burst', grp_tres='1001=8', priority=10",
    "2026-12-01T10:01:00|Modify QOS|alice|(name='gpu-burst')|grp_tres='1001=16', max_tres_pu='1001=4'",
    "2026-12-01T10:02:00|Modify Associations|root|(id_assoc=12)|grp_tres='1001=4', max_jobs=10",
    "2026-12-01T10:03:00|Modify Associations|root|(id_assoc=12 || id_assoc=13)|qos=',1,3,', def_qos_id=3",
    "2026-12-01T10:04:00|Remove Users|root|name='bob'|",
    "2026-12-01T10:05:00|Add Account Coord|root|vision|user='carol'",
    "2026-12-01T10:06:00|Remove QOS|root|id='3'|",
    "2026-12-01T10:07:00|Modify Associations|root|(id_assoc=12)|grp_tres=NULL",
    "2026-12-01T10:08:00|Archive Everything|root|gpupool|a free-text note, not pairs",
)


def test_limit_and_qos_changes_map_to_quota_and_permission_changes():
    result, rows = parse(CHANGES)
    assert result.records_quarantined == 0
    got = rows.select("action", "object_kind", "object_name", "after_json").rows()
    assert got == [
        ("quota.create", "qos", "gpu-burst", '{"description":"burst","grp_tres":"1001=8","priority":10}'),
        ("quota.update", "qos", "gpu-burst", '{"grp_tres":"1001=16","max_tres_pu":"1001=4"}'),
        ("quota.update", "association", "id_assoc=12", '{"grp_tres":"1001=4","max_jobs":10}'),
        ("permission.update", "association", "id_assoc=12,id_assoc=13", '{"def_qos_id":3,"qos":",1,3,"}'),
        ("permission.revoke", "user", "bob", None),
        ("permission.grant", "account_coordinator", "vision", '{"user":"carol"}'),
        ("quota.delete", "qos", "id=3", None),
        ("quota.update", "association", "id_assoc=12", '{"grp_tres":null}'),  # a limit cleared
        ("Archive Everything", None, "gpupool", '{"info":"a free-text note, not pairs"}'),
    ]
    assert rows.get_column("actor").to_list()[1] == "alice"


def test_withassoc_columns_name_the_association_a_limit_change_touched():
    text = ("Time|Action|Actor|Where|Info|User|Account|Cluster\n"
            "2026-12-01T10:02:00|Modify Associations|root|(id_assoc=12)|grp_tres='1001=4'|dave|vision|gpupool\n"
            "2026-12-01T10:02:00|Modify Associations|root|(id_assoc=11)|grp_tres='1001=8'||vision|gpupool\n")
    _, rows = parse(text)
    assert rows.select("action", "object_namespace", "object_name").rows() == [
        ("quota.update", "vision", "dave"), ("quota.update", "vision", "vision")]


def test_broken_lines_are_quarantined_with_the_reason():
    text = lines(
        "2026-12-01T10:00:00|Add Users|root|erin|admin_level=1",
        "2026-12-01T10:00:01|Add Users|root",  # cut off
        "2026-12-01T10:00:02|Add Users||frank|admin_level=1",  # no actor
        "yesterday|Add Users|root|gina|admin_level=1",
        "2026-13-45T25:61:61|Add Users|root|hank|admin_level=1",
        "2026-12-01T10:00:03||root|ivan|admin_level=1",
    )
    result, rows = parse(text)
    assert (result.records_read, rows.height, result.records_quarantined) == (6, 1, 5)
    reasons = result.quarantine.get_column("reason").to_list()
    assert reasons[0] == "expected 5 fields (time|action|actor|where|info), found 3"
    assert reasons[1] == "Actor is empty"
    assert reasons[2].startswith("Time is 'yesterday', expected YYYY-MM-DDTHH:MM:SS")
    assert reasons[3].startswith("Time is '2026-13-45T25:61:61'")
    assert reasons[4] == "Action is empty"
    assert result.quarantine.get_column("line_number").to_list() == [3, 4, 5, 6, 7]


def test_a_header_without_actor_quarantines_every_row():
    result, rows = parse("Time|Action|Where\n2026-12-01T10:00:00|Add Users|erin\n")
    assert rows.height == 0 and result.records_quarantined == 1
    assert "header lacks actor" in result.quarantine.get_column("reason").item()


def test_a_pipe_inside_info_stays_in_info():
    _, rows = parse(HEADER + "2026-12-01T10:00:00|Add Accounts|root|ml|description='a|b', organization='x'\n")
    assert json.loads(rows.get_column("after_json").item()) == {"description": "a|b", "organization": "x"}


def test_identical_lines_get_distinct_ids_and_a_redelivery_the_same_ones():
    line = "2026-12-01T10:00:00|Modify Clusters|root|name='gpupool'|control_port=6817\n"
    _, first = parse(HEADER + line + line)
    _, again = parse(HEADER + line + line, "other.txt")
    ids = first.get_column("audit_id").to_list()
    assert len(set(ids)) == 2 and ids == again.get_column("audit_id").to_list()
    assert ids[1] == ids[0] + ":2"


def test_empty_file_and_registry():
    result, rows = parse("")
    assert rows.height == 0 and result.notes == ["empty file"]
    src = SOURCES["slurm_sacctmgr"]
    assert src.tables == ("audit_events",) and src.reads(Path("transactions.txt"))


@pytest.mark.parametrize(("text", "expected"), [
    ("a=1, b='x, y', c=NULL, `partition`=''", {"a": 1, "b": "x, y", "c": None, "partition": ""}),
    ("not pairs", None),
])
def test_key_values(text, expected):
    assert key_values(text) == expected


def test_where_terms_and_unknown_actions():
    assert where_terms("(name='a' || name='b')") == [("name", "a"), ("name", "b")]
    assert where_terms("gpupool") == [(None, "gpupool")]
    assert map_action("Modify Associations", {"grp_jobs": 3}) == ("quota.update", "association")
    assert map_action("Add WCKeys", {}) == ("Add WCKeys", "wckeys")
    assert map_action("Something New", {}) == ("Something New", None)


def test_the_real_capture_ingests_into_a_warehouse_with_every_transaction_mapped(tmp_path):
    from pipelines.ingest import ingest_partition, landing_folder
    from pipelines.warehouse import Warehouse

    warehouse = Warehouse(tmp_path / "gpupool")
    day = dt.date(2026, 12, 1)
    folder = landing_folder(warehouse, "slurm_sacctmgr", day)
    folder.mkdir(parents=True)
    (folder / "transactions.txt").write_bytes(CAPTURE.read_bytes())
    report = ingest_partition(warehouse, "slurm_sacctmgr", day)
    transactions = len(CAPTURE.read_text().splitlines()) - 1
    assert (report.records_read, report.records_loaded, report.records_quarantined) == (transactions, transactions, 0)
    with warehouse.connect(read_only=True) as con:
        counts = dict(con.execute("select action, count(*) from raw.audit_events where source = 'slurm' "
                                  "group by action").fetchall())
    assert sum(counts.values()) == transactions
    assert counts["permission.grant"] == sum(
        1 for line in CAPTURE.read_text().splitlines() if line.split("|")[1] in ("Add Users", "Add Accounts",
                                                                               "Add Associations"))
