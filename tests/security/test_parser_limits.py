"""Hostile values in the audit, Kueue, sacctmgr and node_exporter parsers (issue 26): a time in year 1 or
9999 would open a day partition there, a label or free-text field of megabytes would be stored as it is.
Each such record is quarantined with the reason and counted (read = loaded + quarantined); the others
of the file load."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.connectors.k8s_audit import event_day
from pipelines.contracts import contract
from pipelines.sources.base import MAX_FREE_TEXT_CHARS, MAX_LABEL_VALUE_CHARS, ParseResult
from pipelines.sources.k8s_audit import parse_k8s_audit
from pipelines.sources.kueue import parse_kueue_workloads
from pipelines.sources.node_exporter import parse_node_exporter_parquet, parse_node_exporter_text
from pipelines.sources.slurm_sacctmgr import parse_sacctmgr_transactions

FIXTURES = Path(__file__).parents[1]
AUDIT_PATCHES = FIXTURES / "kubernetes" / "fixtures" / "audit-clusterqueue-patches.jsonl"
WORKLOADS = FIXTURES / "kubernetes" / "fixtures" / "workloads.json"
NODE_EXPOSITION = FIXTURES / "sources" / "fixtures" / "node_exporter_1.5.0.prom"
SACCTMGR = FIXTURES / "slurm" / "fixtures" / "sacctmgr_transactions.txt"
SCRAPED = dt.datetime(2026, 12, 2, 8, 0)


def accounted(result: ParseResult) -> ParseResult:
    assert result.records_read == result.records_loaded + result.records_quarantined
    return result


def reasons(result: ParseResult) -> list[str]:
    return result.quarantine.get_column("reason").to_list()


# -- times outside the plausible window ----------------------------------------------------------
IMPLAUSIBLE = ["9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "2100-01-01T00:00:00Z"]


@pytest.mark.parametrize("stamp", IMPLAUSIBLE)
def test_audit_event_from_year_9999_is_quarantined(stamp: str) -> None:
    events = [json.loads(line) for line in AUDIT_PATCHES.read_text().splitlines()][:2]  # a create's two stages
    events[0] = {**events[0], "stageTimestamp": stamp, "requestReceivedTimestamp": stamp}
    result = accounted(parse_k8s_audit("\n".join(json.dumps(e) for e in events) + "\n", "audit.log"))
    assert result.records_loaded == len(events) - 1
    (reason,) = reasons(result)
    assert reason.startswith("field 'stageTimestamp' is ") and "outside the plausible times 2000-01-01 to 2100-01-01" in reason
    assert result.tables["audit_events"].get_column("occurred_at").dt.year().to_list() == [2026] * (len(events) - 1)


def test_audit_webhook_files_an_implausible_event_under_the_day_it_arrived() -> None:
    """Else it would land in landing/k8s_audit/9999-12-31/, a folder no ingest reads: lost, not quarantined."""
    arrived = dt.date(2026, 12, 2)
    assert event_day({"stageTimestamp": "9999-12-31T00:00:00Z"}, arrived) == arrived
    assert event_day({"stageTimestamp": "0001-01-01T00:00:00Z", "timestamp": "2026-11-30T10:00:00Z"}, arrived) == (
        dt.date(2026, 11, 30))


@pytest.mark.parametrize("stamp", ["9999-12-31T23:59:59", "0001-01-01T00:00:00"])
def test_sacctmgr_transaction_from_year_9999_is_quarantined(stamp: str) -> None:
    header, first, *rest = SACCTMGR.read_text().splitlines()
    text = "\n".join([header, stamp + first[first.index("|"):], *rest]) + "\n"
    result = accounted(parse_sacctmgr_transactions(text.encode(), "t.txt"))
    assert result.records_loaded == len(rest)
    (reason,) = reasons(result)
    assert "outside the plausible times" in reason


@pytest.mark.parametrize("field", ["creationTimestamp", "lastTransitionTime"])
def test_workload_with_a_time_in_year_9999_is_quarantined(field: str) -> None:
    doc = json.loads(WORKLOADS.read_text())
    item = doc["items"][0]
    if field == "creationTimestamp":
        item["metadata"]["creationTimestamp"] = "9999-12-31T23:59:59Z"
    else:
        item["status"]["conditions"][0]["lastTransitionTime"] = "0001-01-01T00:00:00Z"
    result = accounted(parse_kueue_workloads(json.dumps(doc).encode(), "workloads.json"))
    clean = accounted(parse_kueue_workloads(WORKLOADS.read_bytes(), "workloads.json"))
    assert result.records_quarantined == clean.records_quarantined + 1
    assert any(field in r and "outside the plausible times" in r for r in reasons(result))


# -- oversized labels and free text ----------------------------------------------------------------
def test_oversized_label_value_is_quarantined() -> None:
    huge = "x" * (MAX_LABEL_VALUE_CHARS + 1)
    fitting = "y" * MAX_LABEL_VALUE_CHARS
    text = NODE_EXPOSITION.read_text()
    clean = accounted(parse_node_exporter_text(text, "vm.prom", scraped_at=SCRAPED))
    text += (f'node_load1{{junk="{huge}"}} 0.5\n'
             f'node_load1{{fits="{fitting}"}} 0.25\n'
             f'node_filesystem_avail_bytes{{mountpoint="/{huge}"}} 1e9\n')
    result = accounted(parse_node_exporter_text(text, "vm.prom", scraped_at=SCRAPED))
    assert result.records_loaded == clean.records_loaded + 1  # the fitting one
    assert result.records_quarantined == clean.records_quarantined + 2  # a too-long label whatever the metric
    too_long = [r for r in reasons(result) if "characters" in r]
    assert too_long == [f"label junk is {MAX_LABEL_VALUE_CHARS + 1} characters, over {MAX_LABEL_VALUE_CHARS}",
                        f"label mountpoint is {MAX_LABEL_VALUE_CHARS + 2} characters, over {MAX_LABEL_VALUE_CHARS}"]
    assert result.tables["host_samples"].get_column("extra_labels").str.len_chars().max() <= MAX_FREE_TEXT_CHARS


def test_oversized_nodename_does_not_name_the_host() -> None:
    huge = "n" * (MAX_LABEL_VALUE_CHARS + 1)
    text = f'node_uname_info{{nodename="{huge}",sysname="Linux"}} 1\nnode_load1 0.5\n'
    result = accounted(parse_node_exporter_text(text, "scrape", scraped_at=SCRAPED))
    assert result.records_loaded == 0
    assert sorted(reasons(result)) == sorted([
        f"label nodename is {MAX_LABEL_VALUE_CHARS + 1} characters, over {MAX_LABEL_VALUE_CHARS}",
        "no host: none given (scrape target or file name) and no node_uname_info nodename in the exposition"])


def test_many_labels_over_the_free_text_cap_together_are_quarantined() -> None:
    labels = ",".join(f'l{i}="{"v" * (MAX_LABEL_VALUE_CHARS - 10)}"' for i in range(MAX_FREE_TEXT_CHARS // MAX_LABEL_VALUE_CHARS + 1))
    result = accounted(parse_node_exporter_text(f"node_load1{{{labels}}} 0.5\n", "scrape", host="n1", scraped_at=SCRAPED))
    assert result.records_loaded == 0
    (reason,) = reasons(result)
    assert reason.startswith("labels take ") and reason.endswith(f"characters, over {MAX_FREE_TEXT_CHARS}")


def test_oversized_parquet_label_is_quarantined() -> None:
    rows = contract("host_samples").conform(pl.DataFrame({
        "sampled_at": [SCRAPED] * 3, "host": ["n1", "n1", "h" * (MAX_LABEL_VALUE_CHARS + 1)],
        "metric": ["node_load1"] * 3, "value": [0.5, 0.6, 0.7],
        "device": [None, "d" * (MAX_LABEL_VALUE_CHARS + 1), None],
        "extra_labels": ["e" * (MAX_FREE_TEXT_CHARS + 1), None, None],
        "source": ["x"] * 3, "source_file": ["x"] * 3,
    }))
    buffer = io.BytesIO()
    rows.write_parquet(buffer)
    result = accounted(parse_node_exporter_parquet(buffer.getvalue(), "host.parquet"))
    assert result.records_loaded == 0
    assert reasons(result) == [
        f"extra_labels is {MAX_FREE_TEXT_CHARS + 1} characters, over {MAX_FREE_TEXT_CHARS}",
        f"device is {MAX_LABEL_VALUE_CHARS + 1} characters, over {MAX_LABEL_VALUE_CHARS}",
        f"host is {MAX_LABEL_VALUE_CHARS + 1} characters, over {MAX_LABEL_VALUE_CHARS}",
    ]
    assert all(len(raw) <= 2000 for raw in result.quarantine.get_column("raw").to_list())


@pytest.mark.parametrize(("column", "limit"), [("info", MAX_FREE_TEXT_CHARS), ("where", MAX_FREE_TEXT_CHARS),
                                               ("actor", MAX_LABEL_VALUE_CHARS)])
def test_oversized_sacctmgr_info_is_quarantined(column: str, limit: int) -> None:
    header, first, *rest = SACCTMGR.read_text().splitlines()
    fields = dict(zip(("time", "action", "actor", "where", "info"), first.split("|"), strict=True))
    fields[column] = "description='" + "d" * limit + "'" if column == "info" else "a" * (limit + 1)
    text = "\n".join([header, "|".join(fields.values()), *rest]) + "\n"
    result = accounted(parse_sacctmgr_transactions(text.encode(), "t.txt"))
    assert result.records_loaded == len(rest)
    (reason,) = reasons(result)
    assert reason == f"{column.capitalize()} is {len(fields[column])} characters, over {limit}"


# -- hostile JSON and merge patches on a Kueue quota ---------------------------------------------------
PATHS = ["", "/", "/spec", "/spec/cohort", "/spec/resourceGroups", "/spec/resourceGroups/-", "/spec/resourceGroups/1",
         "/spec/resourceGroups/1/flavors/0/resources/0/nominalQuota", "/spec/resourceGroups/9/flavors",
         "/spec/resourceGroups/01", "/spec/resourceGroups/1/flavors/-", "/metadata/name", "/metadata/labels/a~1b",
         "/spec/preemption", "spec", "/kind", "/spec/resourceGroups/99999999999999999999"]
json_values = st.recursive(st.none() | st.booleans() | st.integers(-5, 30) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                           max_leaves=8)
ops = st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "bogus"]) | json_values,
     "path": st.sampled_from(PATHS) | json_values},
    optional={"value": json_values, "from": st.sampled_from(PATHS) | json_values},
)
patches = st.lists(ops | json_values, max_size=6) | st.dictionaries(
    st.sampled_from(["spec", "metadata", "kind"]), json_values | st.fixed_dictionaries(
        {}, optional={"cohort": json_values, "resourceGroups": json_values}), max_size=3)


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "100")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(patches)
def test_any_patch_of_a_cluster_queue_loads_or_says_why(patch: object) -> None:
    events = [json.loads(line) for line in AUDIT_PATCHES.read_text().splitlines()][:4]
    events[3] = {**events[3], "requestObject": patch}
    events = [{k: v for k, v in e.items() if k != "responseObject"} for e in events]  # Request level
    result = accounted(parse_k8s_audit("\n".join(json.dumps(e) for e in events) + "\n", "audit.log"))
    if isinstance(patch, list | dict):
        assert result.records_quarantined == 0
        row = result.tables["audit_events"].row(3, named=True)
        after = json.loads(row["after_json"]) if row["after_json"] is not None else None
        unknown = [n for n in result.notes if "not known" in n]
        assert (after == patch and len(unknown) == 1) or (after["kind"] == "ClusterQueue" and not unknown)
