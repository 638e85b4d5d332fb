"""The policy catalog: the shipped files load, mistakes fail with where and what, exemptions expire,
and the warehouse's idle seed agrees with the catalog."""
from __future__ import annotations

import datetime as dt

import pytest
import yaml

from pipelines.contracts import Mode, PolicyKind, StepAction
from pipelines.paths import MODELS_DIR
from pipelines.policies.catalog import (
    DEFAULT_POLICIES,
    LOOKBACK_MARGIN,
    MIN_WINDOW,
    CatalogError,
    default_lookback,
    load_catalog,
)
from pipelines.policies.idle import IDLE_PARAMS, idle_rule_rows
from tests.policies.frames import catalog_with

NOW = dt.datetime(2026, 11, 1, 12, 0)


def test_shipped_catalog_loads_with_the_seven_policies():
    catalog = load_catalog()
    assert sorted(catalog.policies) == sorted(["idle-allocation", "zombie", "idle-interactive", "overrun",
                                               "oversized", "retry-storm", "template-breach", "gpu-health",
                                               "host-bound"])
    assert catalog.rate_limits.reclaims_per_hour_total == 20
    assert catalog.rate_limits.reclaims_per_hour_per_tenant == 5
    assert catalog.rate_limits.drains_per_hour == 2
    assert catalog.policies_of(PolicyKind.ZOMBIE) == ["zombie"]
    assert {n: p.mode for n, p in catalog.policies.items() if p.mode == Mode.SHADOW}.keys() == {
        "oversized", "retry-storm", "template-breach", "gpu-health"}
    for p in catalog.policies.values():
        assert p.description["en"] and p.description["zh"]


def test_most_specific_scope_wins(tmp_path):
    def edit(doc):
        doc["policies"]["idle-allocation"]["overrides"].append(
            {"queue": "vision-train", "params": {"window_minutes": 10}})

    catalog = catalog_with(tmp_path, edit)
    rule = catalog.rule("idle-allocation", queue="vision-train", template="inference")
    assert rule.scope == "queue:vision-train"
    assert rule.params["window_minutes"] == 10
    assert [s.action for s in rule.steps] == [StepAction.REMIND]  # the template's steps stay
    assert catalog.rule("idle-allocation", queue="other").scope == "default"
    with pytest.raises(KeyError, match="no policy 'idle'"):
        catalog.rule("idle")


def test_with_mode_forces_every_policy():
    shadow = load_catalog().with_mode(Mode.SHADOW)
    assert {p.mode for p in shadow.policies.values()} == {Mode.SHADOW}
    assert load_catalog().rule("idle-allocation").mode == Mode.ENFORCE


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["policies"]["zombie"].update(kind="hung"), r"policies.zombie.kind: 'hung' is not a policy kind"),
    (lambda d: d["policies"]["zombie"]["steps"].append({"action": "kill"}), r"steps\[2\].action: 'kill'"),
    (lambda d: d["policies"]["zombie"]["steps"].append({"action": "reclaim", "after_s": -5}),
     r"after_s: -5: expected a whole number >= 0"),
    (lambda d: d["policies"]["idle-allocation"]["params"].update(window_minutes=-30),
     r"params.window_minutes: -30: expected a whole number >= 1"),
    (lambda d: d["policies"]["idle-allocation"]["params"].update(activity_threshold=5),
     r"activity_threshold: 5: expected a number between 0 and 1"),
    (lambda d: d["policies"]["idle-allocation"]["params"].update(window_minute=30),
     r"params.window_minute: not a parameter of idle_allocation"),
    (lambda d: d["policies"]["idle-allocation"]["params"].pop("min_coverage"), r"params.min_coverage: missing"),
    (lambda d: d["policies"]["overrun"].update(mode="on"), r"policies.overrun.mode: 'on'; use shadow or enforce"),
    (lambda d: d["policies"]["overrun"]["overrides"].append({"params": {}}),
     r"overrides\[1\]: name exactly one of queue or template"),
    (lambda d: d["rate_limits"].update(reclaims_per_hour_total=-1), r"rate_limits.reclaims_per_hour_total: -1"),
    (lambda d: d.pop("version"), r": version: missing or empty"),
])
def test_catalog_mistakes_name_the_file_and_key(tmp_path, edit, message):
    with pytest.raises(CatalogError, match=message) as err:
        catalog_with(tmp_path, edit)
    assert str(tmp_path / "policies.yml") in str(err.value)


def test_unreadable_files_fail_clearly(tmp_path):
    with pytest.raises(CatalogError, match="file not found"):
        load_catalog(tmp_path / "nope.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("policies: [unclosed")
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog(bad)


def test_exemptions_match_by_scope_and_expire(tmp_path):
    entries = [
        {"tenant": "speech", "policy": "idle-allocation", "reason": "benchmark", "granted_by": "ops",
         "expires_at": "2026-11-02T00:00:00Z"},
        {"tenant": "vision", "job_id": "j-7", "reason": "demo", "granted_by": "ops", "expires_at": "2026-10-01T00:00:00Z"},
    ]
    catalog = catalog_with(tmp_path, lambda d: None, entries)
    assert catalog.exemption_for("idle-allocation", "speech", "q", "j-1", NOW).reason == "benchmark"
    assert catalog.exemption_for("zombie", "speech", "q", "j-1", NOW) is None
    assert catalog.exemption_for("idle-allocation", "speech", "q", "j-1", dt.datetime(2026, 11, 2)) is None
    aware = dt.datetime(2026, 11, 2, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=1)))  # 23:30 UTC the day before
    assert catalog.exemption_for("idle-allocation", "speech", "q", "j-1", aware) is not None
    assert catalog.exemption_for("zombie", "vision", "q", "j-7", NOW) is None  # expired


def test_shipped_exemption_example_has_expired():
    [example] = load_catalog().exemptions
    assert example.expires_at < NOW
    assert load_catalog().exemption_for(example.policy, example.tenant, example.queue, None, NOW) is None


def test_exemption_without_expiry_or_reason_is_refused(tmp_path):
    with pytest.raises(CatalogError, match=r"exemptions\[0\].expires_at: None: required"):
        catalog_with(tmp_path, lambda d: None, [{"tenant": "a", "reason": "r", "granted_by": "g"}])
    with pytest.raises(CatalogError, match=r"exemptions\[0\].reason: required"):
        catalog_with(tmp_path, lambda d: None, [{"tenant": "a", "granted_by": "g", "expires_at": "2027-01-01"}])


def test_gpupool_yml_may_point_at_other_files(tmp_path, monkeypatch):
    (tmp_path / "gov").mkdir()
    (tmp_path / "gov" / "rules.yml").write_text(DEFAULT_POLICIES.read_text().replace('"2026.11.1"', '"site-7"'))
    (tmp_path / "gov" / "allow.yml").write_text("exemptions: []\n")
    config = tmp_path / "gpupool.yml"
    config.write_text("governance:\n  policies: gov/rules.yml\n  exemptions: gov/allow.yml\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(config))
    catalog = load_catalog()
    assert catalog.version == "site-7" and catalog.exemptions == ()


def test_idle_rule_rows_resolve_as_the_catalog_does(tmp_path):
    """The rows the warehouse reads (marts.dim_idle_rules) pick, most specific first, the rule
    `catalog.rule` gives any queue and template: overrides of both kinds, merged."""
    doc = yaml.safe_load(DEFAULT_POLICIES.read_text())
    doc["policies"]["idle-allocation"]["overrides"] += [
        {"queue": "batch", "params": {"spike_max_minutes": 5}},
        {"queue": "night", "params": {"window_minutes": 90, "memory_floor_mib": 2048}},
    ]
    (tmp_path / "policies.yml").write_text(yaml.safe_dump(doc))
    catalog = load_catalog(tmp_path / "policies.yml")
    rows = idle_rule_rows(catalog)
    assert len(rows) == 3 * 3  # (any, batch, night) x (any, inference, interactive)

    def warehouse_rule(queue, template):
        matching = [r for r in rows if r["queue"] in (None, queue) and r["template"] in (None, template)]
        return min(matching, key=lambda r: (r["queue"] is None, r["template"] is None))

    for queue in ("batch", "night", "other"):
        for template in ("inference", "interactive", "training"):
            rule = catalog.rule("idle-allocation", queue=queue, template=template)
            row = warehouse_rule(queue, template)
            assert row["scope"] == rule.scope and row["enabled"] == rule.params["enabled"], (queue, template)
            for param in (*IDLE_PARAMS, "window_minutes"):
                assert row[param] == rule.params[param], (queue, template, param)


def test_idle_rule_rows_need_an_idle_allocation_policy(tmp_path):
    doc = yaml.safe_load(DEFAULT_POLICIES.read_text())
    del doc["policies"]["idle-allocation"]
    (tmp_path / "policies.yml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match="no idle_allocation policy"):
        idle_rule_rows(load_catalog(tmp_path / "policies.yml"))


def test_readme_documents_every_policy():
    text = (MODELS_DIR / "policies" / "README.md").read_text()
    for name in yaml.safe_load(DEFAULT_POLICIES.read_text())["policies"]:
        assert f"`{name}`" in text


def test_one_lookback_for_the_sensor_and_the_simulator_with_one_floor(tmp_path):
    """pipelines/governance/tick.py reads every kind's longest window, the simulator each kind's own: both
    from default_lookback, never under MIN_WINDOW (the kinds without a window read the floor)."""
    catalog = load_catalog()
    assert default_lookback(catalog) == dt.timedelta(minutes=120) + LOOKBACK_MARGIN  # zombie's limit_minutes
    assert default_lookback(catalog, (PolicyKind.ZOMBIE,)) == default_lookback(catalog)
    assert default_lookback(catalog, (PolicyKind.OVERRUN,)) == MIN_WINDOW + LOOKBACK_MARGIN
    assert default_lookback(catalog, (PolicyKind.IDLE_ALLOCATION,)) == dt.timedelta(minutes=60) + LOOKBACK_MARGIN

    def short_windows(doc: dict) -> None:  # idle-allocation's windows all under the floor
        doc["policies"]["idle-allocation"]["params"]["window_minutes"] = 5
        doc["policies"]["idle-allocation"]["overrides"][0]["params"]["window_minutes"] = 10

    short = catalog_with(tmp_path, short_windows)
    assert default_lookback(short, (PolicyKind.IDLE_ALLOCATION,)) == MIN_WINDOW + LOOKBACK_MARGIN
