"""deploy/prometheus/gpupool-alerts.yml: valid for promtool, every rule unit-tested firing and quiet,
every rule with a summary, a description and a runbook that exists in docs/operators.md, and every
metric a rule reads one that the code exports."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client import CollectorRegistry

from pipelines.paths import REPO_ROOT
from tests.components import require_component

RULES = REPO_ROOT / "deploy" / "prometheus" / "gpupool-alerts.yml"
RULE_TESTS = REPO_ROOT / "deploy" / "prometheus" / "gpupool-alerts.test.yml"
OPERATORS = REPO_ROOT / "docs" / "operators.md"
METRIC_NAME = re.compile(r"\b(?:gpupool|allocator)_[a-z0-9_]+\b")


def alerting_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    require_component("promtool", path is not None, "apt-get install -y --no-install-recommends prometheus")
    return str(path)


def run(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], cwd=RULES.parent, capture_output=True, text=True, timeout=60,
                          check=False)


def test_promtool_checks_the_rules(promtool: str) -> None:
    checked = run(promtool, "check", "rules", RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_promtool_unit_tests_of_the_rules_pass(promtool: str) -> None:
    tested = run(promtool, "test", "rules", RULE_TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_rule_has_a_firing_and_a_quiet_case() -> None:
    cases = [case for group in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in group["alert_rule_test"]]
    for rule in alerting_rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']}: no case where it fires"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']}: no case where it stays quiet"


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


def test_every_rule_says_what_happened_and_links_its_runbook_in_the_operators_guide() -> None:
    documented = anchors(OPERATORS.read_text())
    for rule in alerting_rules():
        notes = rule["annotations"]
        assert notes.get("summary") and notes.get("description"), rule["alert"]
        path, _, anchor = notes["runbook_url"].partition("#")
        assert path == "docs/operators.md" and anchor in documented, f"{rule['alert']}: {notes['runbook_url']}"


# -- the names the code exports ----------------------------------------------------------------------


def sample_names(registry: CollectorRegistry) -> set[str]:
    return {sample.name for family in registry.collect() for sample in family.samples}


def allocator_names(tmp_path: Path) -> set[str]:
    from allocator.auth import parse_tokens
    from allocator.service import create_app
    from allocator.store import Store
    from tests.allocator.helpers import TOKENS, TestClient, small_pool

    store = Store(tmp_path / "allocator.db", small_pool())
    try:
        app = create_app(store, parse_tokens(json.dumps(TOKENS), "t"), tick_interval_s=None)
        TestClient(app).get("/healthz")  # a request, so that the per-request series have a sample
        return sample_names(app.state.metrics.registry)
    finally:
        store.close()


def webhook_names(tmp_path: Path) -> set[str]:
    from tests.kubernetes.webhook import running_webhook

    with running_webhook(tmp_path / "landing", "token") as server:
        requests.get(server.url + "healthz", timeout=10)
        return sample_names(server.metrics.registry)


def pipeline_names(tmp_path: Path) -> set[str]:
    """Every series of the exporter: a home with an ingest and a release, an outbox with a clean tick."""
    import datetime as dt

    from pipelines.clock import utc_naive
    from pipelines.governance.outbox import Outbox
    from pipelines.selfmetrics import pipeline_registry
    from pipelines.sources.base import empty_quarantine
    from pipelines.warehouse import Warehouse

    warehouse = Warehouse(tmp_path / "home")
    warehouse.replace_partition("allocator_events", dt.date(2026, 11, 2), {}, empty_quarantine(), files_read=1,
                                records_read=2, records_loaded=1, records_quarantined=1)
    outbox = Outbox(tmp_path / "outbox.db", tmp_path / "landing")
    outbox.record_tick(utc_naive(), 0.1, [])
    outbox.close()
    return sample_names(pipeline_registry(warehouse, tmp_path / "outbox.db"))


def test_every_metric_a_rule_reads_is_one_the_code_exports(tmp_path: Path) -> None:
    exported = allocator_names(tmp_path) | webhook_names(tmp_path) | pipeline_names(tmp_path)
    read = {name for rule in alerting_rules() for name in METRIC_NAME.findall(rule["expr"])}
    assert read, "the rules read no gpupool_ or allocator_ metric"
    assert read - exported == set(), f"rules read metrics nothing exports; exported: {sorted(exported)}"
