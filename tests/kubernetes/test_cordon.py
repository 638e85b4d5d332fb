"""Cordon and uncordon (drain, undrain) through the Kubernetes API, with recorded answers.

The real client stack runs (CoreV1Api, ApiClient, its REST client): only the HTTP connection pool
is a fake, which serves the recorded Node objects of fixtures/node_*.json by method and path,
applies a PATCH as the API server applies this one (a strategic merge patch of plain fields and
annotations: null deletes; a stale resourceVersion answers 409) and records every request, so
the tests see the exact URL, content type and body sent.

The Node fixtures follow the Node schema of the Kubernetes API (core/v1, as `kubectl get node -o json`
prints it for a kubeadm v1.29 node with the NVIDIA GPU Operator's labels); gpu-node-08 is cordoned
the way `kubectl cordon` leaves a node (spec.unschedulable and the node.kubernetes.io/unschedulable
taint the node lifecycle controller adds). node_not_found.json is the API server's 404 Status.
"""
from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, Configuration, CoreV1Api

from allocator.model import Action, ActionKind, Outcome
from pipelines.connectors.kubernetes import KubernetesConfig
from pipelines.enforcement.base import ActionLedger
from pipelines.enforcement.kubernetes import DRAIN_REASON, DRAINED_BY, KubernetesNodeEnforcer
from pipelines.enforcement.kueue import KueueEnforcer
from pipelines.sources.allocator_log import parse_audit_log

FIXTURES = Path(__file__).parent / "fixtures"
NOW = dt.datetime(2024, 3, 22, 12, 0, 0)
SERVER = "https://10.0.0.1:6443"


class Response:
    """What urllib3's pool answers, as far as the kubernetes client reads it."""

    def __init__(self, status: int, doc: dict):
        self.status = status
        self.reason = {200: "OK", 404: "Not Found", 409: "Conflict"}[status]
        self.data = json.dumps(doc).encode()
        self.headers = {"Content-Type": "application/json"}

    def getheaders(self) -> dict:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)


def merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeApiServer:
    """The HTTP connection pool of the client: recorded Nodes, answered and patched by path."""

    def __init__(self, *names: str):
        self.nodes = {n: json.loads((FIXTURES / f"node_{n}.json").read_text()) for n in names}
        self.requests: list[dict] = []
        self.conflicts = 0  # answer the next PATCHes 409 after changing the node, as another writer would

    def request(self, method: str, url: str, body: str | None = None, headers: dict | None = None, **_) -> Response:
        self.requests.append({"method": method, "url": url, "body": json.loads(body) if body else None,
                              "content_type": (headers or {}).get("Content-Type")})
        assert url.startswith(f"{SERVER}/api/v1/nodes/")
        name = url.removeprefix(f"{SERVER}/api/v1/nodes/").split("?")[0]
        node = self.nodes.get(name)
        if node is None:
            missing = json.loads((FIXTURES / "node_not_found.json").read_text())
            missing["message"] = f'nodes "{name}" not found'
            return Response(404, missing)
        if method == "GET":
            return Response(200, node)
        assert method == "PATCH"
        patch = json.loads(body)
        meta = node["metadata"]
        if self.conflicts:
            self.conflicts -= 1
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        if patch.get("metadata", {}).get("resourceVersion", meta["resourceVersion"]) != meta["resourceVersion"]:
            return Response(409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
                                  "code": 409, "message": f'Operation cannot be fulfilled on nodes "{name}": the '
                                  f"object has been modified; please apply your changes to the latest version "
                                  f"and try again"})
        merge(node, {k: v for k, v in patch.items() if k != "metadata"})
        merge(meta, {k: v for k, v in patch.get("metadata", {}).items() if k != "resourceVersion"})
        if node["spec"].get("unschedulable") is False:
            node["spec"].pop("unschedulable")  # omitempty: false is not written back
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return Response(200, node)

    def patches(self) -> list[dict]:
        return [r for r in self.requests if r["method"] == "PATCH"]


def core_api(server: FakeApiServer) -> CoreV1Api:
    configuration = Configuration()
    configuration.host = SERVER
    configuration.api_key = {"authorization": "test-token"}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    client = ApiClient(configuration)
    client.rest_client.pool_manager = server
    return CoreV1Api(client)


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer("gpu-node-07", "gpu-node-08")


@pytest.fixture
def ledger(tmp_path) -> ActionLedger:
    return ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "kueue")


@pytest.fixture
def enforcer(ledger, server) -> KubernetesNodeEnforcer:
    return KubernetesNodeEnforcer(ledger, KubernetesConfig(api_server=SERVER, token="test-token"), core_api(server))


def drain(target: str, key: str, **fields) -> Action:
    return Action(ActionKind.DRAIN, key, target, "governance-bot", reason="xid 79 three times in 24 h", **fields)


def undrain(target: str, key: str) -> Action:
    return Action(ActionKind.UNDRAIN, key, target, "governance-bot", reason="health checks pass")


def audit(tmp_path, engine: str) -> list[dict]:
    day_file = tmp_path / "landing" / "allocator_audit" / NOW.date().isoformat() / f"{engine}.jsonl"
    parsed = parse_audit_log(day_file.read_bytes(), str(day_file))
    assert parsed.quarantine.height == 0
    return parsed.tables["audit_events"].to_dicts()


def test_cordon_shadow_then_enforce_then_uncordon(enforcer, server, tmp_path):
    dry = enforcer.apply(drain("gpu-node-07/3", "drain:gpu-node-07:v1", dry_run=True), NOW)
    assert dry.outcome == Outcome.DRY_RUN and "would patch Node gpu-node-07 spec.unschedulable=true" in dry.reason
    assert server.patches() == []

    applied = enforcer.apply(drain("gpu-node-07/3", "drain:gpu-node-07:v1"), NOW)
    assert applied.outcome == Outcome.APPLIED, applied.reason
    assert "Kubernetes cordons whole nodes: GPU 3's node gpu-node-07" in applied.reason
    (patch,) = server.patches()
    assert patch["url"] == f"{SERVER}/api/v1/nodes/gpu-node-07"
    assert patch["content_type"] == "application/strategic-merge-patch+json"
    assert patch["body"] == {"metadata": {"resourceVersion": "4718022", "annotations": {
        DRAINED_BY: "drain:gpu-node-07:v1", DRAIN_REASON: "xid 79 three times in 24 h"}},
        "spec": {"unschedulable": True}}
    node = server.nodes["gpu-node-07"]
    assert node["spec"]["unschedulable"] is True and node["metadata"]["annotations"][DRAINED_BY] == "drain:gpu-node-07:v1"

    again = enforcer.apply(drain("gpu-node-07/3", "drain:gpu-node-07:v1"), NOW)
    assert again.outcome == Outcome.ALREADY_DONE and len(server.patches()) == 1
    other = enforcer.apply(drain("gpu-node-07", "drain:gpu-node-07:v2"), NOW)
    assert other.outcome == Outcome.REFUSED
    assert other.reason == "Node gpu-node-07 is already cordoned (by key drain:gpu-node-07:v1): not drained by this key"

    resumed = enforcer.apply(undrain("gpu-node-07", "undrain:gpu-node-07:v1"), NOW)
    assert resumed.outcome == Outcome.APPLIED, resumed.reason
    assert server.patches()[-1]["body"] == {"metadata": {"resourceVersion": "4718023", "annotations": {
        DRAINED_BY: None, DRAIN_REASON: None}}, "spec": {"unschedulable": False}}
    node = server.nodes["gpu-node-07"]
    assert "unschedulable" not in node["spec"] and DRAINED_BY not in node["metadata"]["annotations"]
    assert node["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] == "0"  # others' annotations stay
    assert enforcer.apply(undrain("gpu-node-07", "undrain:gpu-node-07:v1"), NOW).outcome == Outcome.ALREADY_DONE
    refused = enforcer.apply(undrain("gpu-node-07", "undrain:gpu-node-07:v2"), NOW)
    assert (refused.outcome, refused.reason) == (Outcome.REFUSED, "Node gpu-node-07 is not cordoned")

    records = audit(tmp_path, "kueue")
    assert [(r["action"], r["object_kind"], r["object_name"], r["decision"]) for r in records] == [
        ("enforcement.drain", "gpu", "gpu-node-07/3", "dry_run"),
        ("enforcement.drain", "gpu", "gpu-node-07/3", "applied"),
        ("enforcement.drain", "gpu", "gpu-node-07/3", "already_done"),
        ("enforcement.drain", "node", "gpu-node-07", "refused"),
        ("enforcement.undrain", "node", "gpu-node-07", "applied"),
        ("enforcement.undrain", "node", "gpu-node-07", "already_done"),
        ("enforcement.undrain", "node", "gpu-node-07", "refused"),
    ]
    assert json.loads(records[1]["before_json"]) == {"unschedulable": False, "resource_version": "4718022"}


def test_someone_elses_cordon_is_neither_ours_nor_lifted(enforcer, server):
    drained = enforcer.apply(drain("gpu-node-08", "drain:gpu-node-08:v1"), NOW)
    assert drained.outcome == Outcome.REFUSED and "(not by gpupool)" in drained.reason
    kept = enforcer.apply(undrain("gpu-node-08", "undrain:gpu-node-08:v1"), NOW)
    assert kept.outcome == Outcome.REFUSED and "cordoned by someone else" in kept.reason
    assert server.patches() == [] and server.nodes["gpu-node-08"]["spec"]["unschedulable"] is True


def test_unknown_nodes_conflicts_and_other_kinds(enforcer, server, tmp_path):
    missing = enforcer.apply(drain("gpu-node-99", "drain:gpu-node-99:v1"), NOW)
    assert (missing.outcome, missing.reason) == (Outcome.REFUSED, "no Node gpu-node-99 in the cluster")
    malformed = enforcer.apply(drain("gpu-node-07/", "drain:bad:v1"), NOW)
    assert malformed.outcome == Outcome.REFUSED and "is not a node (node-07) or a GPU" in malformed.reason
    server.conflicts = 1  # someone changes the node once between our read and patch: read and judged again
    assert enforcer.apply(drain("gpu-node-07", "drain:gpu-node-07:v3"), NOW).outcome == Outcome.APPLIED
    assert [r["body"]["metadata"]["resourceVersion"] for r in server.patches()] == ["4718022", "4718023"]
    server.conflicts = 2
    lost = enforcer.apply(undrain("gpu-node-07", "undrain:gpu-node-07:v3"), NOW)
    assert lost.outcome == Outcome.REFUSED and "kept changing" in lost.reason
    reclaim = enforcer.apply(Action(ActionKind.RECLAIM, "r-1", "team-a/job", "bot"), NOW)
    assert reclaim.outcome == Outcome.REFUSED and "only drains and undrains" in reclaim.reason
    with pytest.raises(ValueError, match="expected 'kueue'"):
        KubernetesNodeEnforcer(ActionLedger(tmp_path / "s.db", tmp_path / "landing", "slurm"), core=core_api(server))


def test_the_kueue_enforcer_hands_node_actions_to_the_node_enforcer(tmp_path, server):
    ledger = ActionLedger(tmp_path / "kueue.db", tmp_path / "landing", "kueue")
    enforcer = KueueEnforcer(ledger, KubernetesConfig(api_server=SERVER, token="test-token"), custom=object(),
                             core=core_api(server))
    assert enforcer.apply(drain("gpu-node-07", "drain:gpu-node-07:k"), NOW).outcome == Outcome.APPLIED
    assert enforcer.apply(drain("gpu-node-07", "drain:gpu-node-07:k"), NOW).outcome == Outcome.ALREADY_DONE
    assert [r["engine"] for r in (json.loads(line) for line in (
        tmp_path / "landing" / "allocator_audit" / NOW.date().isoformat() / "kueue.jsonl").read_text().splitlines())] \
        == ["kueue", "kueue"]
