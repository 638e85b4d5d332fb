"""KueueEnforcer against a fake CustomObjectsApi serving the recorded objects (no cluster here).

The fake keeps the recorded Workloads, ClusterQueues, LocalQueues and ResourceFlavors, records every
call, applies merge patches as the API server does (resourceVersion checked, 409 when stale) and
plays the part of the Kueue controller that matters here: a Workload set spec.active=false is
evicted (Evicted=True, reason Deactivated, quota released) once it has been read `evict_after_reads`
times since, and reactivating an evicted one requeues it.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from allocator.model import Action, ActionKind, Outcome
from pipelines.connectors.kubernetes import KubernetesConfig
from pipelines.enforcement.base import ActionLedger
from pipelines.enforcement.kueue import KueueEnforcer
from pipelines.sources.allocator_log import parse_audit_log

FIXTURES = Path(__file__).parent / "fixtures"
NOW = dt.datetime(2024, 3, 22, 12, 0, 0)
TRAIN = "team-a/job-train-llm-5b7c1"  # admitted and running since 2024-03-19T20:49:17Z


def _items(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_text())["items"]


def _api_error(status: int, reason: str, message: str) -> ApiException:
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": status,
        }
    )
    return error


def _merge(target: dict, patch: dict) -> None:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeCustomObjects:
    def __init__(
        self,
        *,
        evict_after_reads: int = 1,
        kueue_running: bool = True,
        old_crd: bool = False,
        conflicts: int = 0,
    ):
        self.workloads = {
            (w["metadata"]["namespace"], w["metadata"]["name"]): w for w in _items("workloads.json")[:13]
        }
        self.cluster = {
            (plural, o["metadata"]["name"]): o
            for plural, name in (
                ("clusterqueues", "clusterqueues.json"),
                ("resourceflavors", "resourceflavors.json"),
            )
            for o in _items(name)
        }
        self.local = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in _items("localqueues.json")
        }
        self.calls: list[tuple] = []
        self.evict_after_reads, self.kueue_running, self.old_crd, self.conflicts = (
            evict_after_reads,
            kueue_running,
            old_crd,
            conflicts,
        )
        self._reads_since_deactivation: dict[tuple, int] = {}

    def patches(self) -> list[tuple]:
        return [c for c in self.calls if c[0] == "patch"]

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **kwargs):
        assert (group, version) == ("kueue.x-k8s.io", "v1beta1")
        self.calls.append(("get", plural, namespace, name))
        store = self.workloads if plural == "workloads" else self.local
        obj = store.get((namespace, name))
        if obj is None:
            raise _api_error(404, "NotFound", f'{plural}.kueue.x-k8s.io "{name}" not found')
        key = (namespace, name)
        if plural == "workloads" and key in self._reads_since_deactivation and self.kueue_running:
            self._reads_since_deactivation[key] += 1
            if self._reads_since_deactivation[key] > self.evict_after_reads:
                self._evict(obj)
                del self._reads_since_deactivation[key]
        return copy.deepcopy(obj)

    def get_cluster_custom_object(self, group, version, plural, name, **kwargs):
        self.calls.append(("get", plural, None, name))
        obj = self.cluster.get((plural, name))
        if obj is None:
            raise _api_error(404, "NotFound", f'{plural}.kueue.x-k8s.io "{name}" not found')
        return copy.deepcopy(obj)

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body, **kwargs):
        self.calls.append(("patch", namespace, name, copy.deepcopy(body), kwargs.get("field_validation")))
        obj = self.workloads.get((namespace, name))
        if obj is None:
            raise _api_error(404, "NotFound", f'workloads.kueue.x-k8s.io "{name}" not found')
        if self.conflicts:  # Kueue updated the status in between
            self.conflicts -= 1
            obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != obj["metadata"]["resourceVersion"]:
            raise _api_error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on workloads.kueue.x-k8s.io "{name}": '
                f"the object has been modified; please apply your changes to the latest "
                f"version and try again",
            )
        spec = body.get("spec") or {}
        if (
            "maximumExecutionTimeSeconds" in spec
            and self.old_crd
            and kwargs.get("field_validation") == "Strict"
        ):
            raise _api_error(
                400,
                "BadRequest",
                ".spec.maximumExecutionTimeSeconds: field not declared in schema, "
                'strict decoding error: unknown field "spec.maximumExecutionTimeSeconds"',
            )
        _merge(obj, {k: v for k, v in body.items() if k != "metadata"})
        _merge(
            obj,
            {"metadata": {k: v for k, v in (body.get("metadata") or {}).items() if k != "resourceVersion"}},
        )
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        if spec.get("active") is False:
            self._reads_since_deactivation[(namespace, name)] = 0
        if spec.get("active") is True:
            self._reads_since_deactivation.pop((namespace, name), None)
            if any(
                c["type"] == "Evicted" and c["status"] == "True" for c in obj["status"].get("conditions", [])
            ):
                self._condition(obj, "Requeued", "True", "Reactivated", "The workload was reactivated")
        return copy.deepcopy(obj)

    def _condition(self, obj: dict, kind: str, status: str, reason: str, message: str) -> None:
        conditions = [c for c in obj["status"].setdefault("conditions", []) if c["type"] != kind]
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": "2024-03-22T12:00:01Z",
            }
        )
        obj["status"]["conditions"] = conditions

    def _evict(self, obj: dict) -> None:
        self._condition(obj, "Evicted", "True", "Deactivated", "The workload is deactivated")
        self._condition(obj, "QuotaReserved", "False", "Pending", "The workload is deactivated")
        self._condition(obj, "Admitted", "False", "NoReservation", "The workload has no reservation")
        obj["status"].pop("admission", None)


class Clock:
    """time.monotonic and time.sleep for the enforcer: sleeping moves the clock."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def api() -> FakeCustomObjects:
    return FakeCustomObjects()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _enforcer(tmp_path, api, clock, **config) -> KueueEnforcer:
    ledger = ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "kueue")
    settings = KubernetesConfig(**{"preempt_timeout_s": 10, "preempt_poll_s": 2, **config})
    return KueueEnforcer(ledger, settings, api, sleep=clock.sleep, clock=clock)


@pytest.fixture
def enforcer(tmp_path, api, clock) -> KueueEnforcer:
    return _enforcer(tmp_path, api, clock)


def _audit(tmp_path) -> list[dict]:
    day_file = tmp_path / "landing" / "allocator_audit" / NOW.date().isoformat() / "kueue.jsonl"
    parsed = parse_audit_log(day_file.read_bytes(), str(day_file))
    assert parsed.quarantine.height == 0
    return parsed.tables["audit_events"].to_dicts()


def _action(kind: ActionKind, target: str = TRAIN, key: str | None = None, **fields) -> Action:
    return Action(kind, key or f"{kind.value}:{target}:v1", target, "governance-bot", **fields)


def test_reclaim_dry_run_then_apply_then_already_done(enforcer, api, tmp_path):
    action = _action(
        ActionKind.RECLAIM,
        reason="idle 45 min",
        policy="idle-reclaim",
        policy_version="v3",
        evidence={"idle_minutes": 45},
    )
    dry = enforcer.apply(dataclasses.replace(action, dry_run=True), NOW)
    assert dry.outcome == Outcome.DRY_RUN
    assert dry.reason == (
        f"dry run: would patch Workload {TRAIN} spec.active=false: idle 45 min (policy idle-reclaim v3)"
    )
    assert api.patches() == []

    applied = enforcer.apply(action, NOW)
    assert applied.outcome == Outcome.APPLIED
    assert applied.effects == {"state": "CANCELLED", "active": False, "gpus_released": 6}
    resource_version = api.workloads[("team-a", "job-train-llm-5b7c1")]["metadata"]["resourceVersion"]
    assert api.patches() == [
        (
            "patch",
            "team-a",
            "job-train-llm-5b7c1",
            {"spec": {"active": False}, "metadata": {"resourceVersion": str(int(resource_version) - 1)}},
            None,
        )
    ]

    again = enforcer.apply(action, NOW)
    assert again.outcome == Outcome.ALREADY_DONE and again.reason.startswith(
        "already applied at 2024-03-22T12:00:00"
    )
    assert len(api.patches()) == 1

    audit = _audit(tmp_path)
    assert [(a["decision"], a["action"], a["object_kind"], a["object_name"], a["source"]) for a in audit] == [
        ("dry_run", "enforcement.reclaim", "job", TRAIN, "kueue"),
        ("applied", "enforcement.reclaim", "job", TRAIN, "kueue"),
        ("already_done", "enforcement.reclaim", "job", TRAIN, "kueue"),
    ]
    before = json.loads(audit[1]["before_json"])
    assert (before["admitted"], before["gpus"], before["evidence"]) == (True, 6, {"idle_minutes": 45})
    assert json.loads(audit[1]["after_json"]) == {"active": False}


def test_preempt_deactivates_waits_for_the_eviction_and_requeues(enforcer, api, clock):
    api.evict_after_reads = 2
    result = enforcer.apply(_action(ActionKind.PREEMPT, reason="owner needs its quota back"), NOW)
    assert result.outcome == Outcome.APPLIED, result.reason
    assert result.effects == {"state": "PENDING", "attempt": 2, "requeued": True, "gpus_released": 6}
    steps = [(c[0], c[3]["spec"]["active"] if c[0] == "patch" else c[1]) for c in api.calls]
    assert steps == [
        ("get", "workloads"),
        ("patch", False),
        ("get", "workloads"),
        ("get", "workloads"),
        ("get", "workloads"),
        ("patch", True),
    ]
    assert clock.sleeps == [2, 2]
    workload = api.workloads[("team-a", "job-train-llm-5b7c1")]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in workload["status"]["conditions"]}
    assert workload["spec"]["active"] is True
    assert conditions["Evicted"] == ("True", "Deactivated") and conditions["Requeued"] == (
        "True",
        "Reactivated",
    )


def test_preempt_without_an_eviction_reactivates_and_says_so(tmp_path, clock):
    api = FakeCustomObjects(kueue_running=False)
    result = _enforcer(tmp_path, api, clock).apply(_action(ActionKind.PREEMPT), NOW)
    assert result.outcome == Outcome.REFUSED
    assert result.reason.startswith(f"Kueue did not evict Workload {TRAIN} within 10 s of its deactivation")
    assert [c[3]["spec"]["active"] for c in api.patches()] == [False, True]
    assert api.workloads[("team-a", "job-train-llm-5b7c1")]["spec"]["active"] is True
    assert clock.now >= 10


@pytest.mark.parametrize(
    ("target", "config", "protection"),
    [
        ("team-c/job-mig-infer-8b9c0", {}, "label gpupool.io/protected=true"),
        (TRAIN, {"protected_namespaces": ["team-a"]}, "namespace team-a"),
        (
            TRAIN,
            {"protected_label": "tier", "protected_priority_classes": ["prod-serving"]},
            "priority class prod-serving",
        ),
    ],
)
def test_protected_workloads_are_refused(tmp_path, api, clock, target, config, protection):
    api.workloads[("team-a", "job-train-llm-5b7c1")]["spec"]["priorityClassName"] = "prod-serving"
    enforcer = _enforcer(tmp_path, api, clock, **config)
    for kind in (ActionKind.RECLAIM, ActionKind.PREEMPT, ActionKind.CAP_RUNTIME):
        result = enforcer.apply(_action(kind, target, runtime_s=3600), NOW)
        assert result.outcome == Outcome.REFUSED
        assert result.reason.startswith(f"protected workload ({protection}) is exempt from automatic")
    assert api.patches() == []


def test_inference_template_is_protected(enforcer, api):
    api.workloads[("team-a", "job-train-llm-5b7c1")]["metadata"]["labels"]["gpupool.io/template"] = (
        "inference"
    )
    result = enforcer.apply(_action(ActionKind.RECLAIM), NOW)
    assert result.reason == "protected workload (template inference) is exempt from automatic reclaim"


@pytest.mark.parametrize(
    ("kind", "target", "reason"),
    [
        (
            ActionKind.RECLAIM,
            "team-a/job-finetune-2b8c3",
            "Workload team-a/job-finetune-2b8c3 is finished (Succeeded)",
        ),
        (
            ActionKind.RECLAIM,
            "team-b/job-sweep-8d2f1",
            "Workload team-b/job-sweep-8d2f1 holds no quota (not admitted): nothing to reclaim",
        ),
        (
            ActionKind.PREEMPT,
            "team-b/job-low-prio-4f6a8",
            "Workload team-b/job-low-prio-4f6a8 holds no quota (not admitted): nothing to preempt",
        ),
        (
            ActionKind.RECLAIM,
            "team-b/job-notebook-0c3d4",
            "Workload team-b/job-notebook-0c3d4 is already inactive (spec.active=false)",
        ),
        (
            ActionKind.REMIND,
            "team-b/job-sweep-8d2f1",
            "Workload team-b/job-sweep-8d2f1 is not admitted: nothing runs to remind about",
        ),
        (
            ActionKind.RECLAIM,
            "team-a/job-gone",
            "no Workload team-a/job-gone in the cluster (deleted, or never existed)",
        ),
        (
            ActionKind.RECLAIM,
            "job-train-llm-5b7c1",
            "target 'job-train-llm-5b7c1' is not <namespace>/<workload name>",
        ),
    ],
)
def test_refusals_name_the_reason_and_change_nothing(enforcer, api, tmp_path, kind, target, reason):
    result = enforcer.apply(_action(kind, target), NOW)
    assert (result.outcome, result.reason) == (Outcome.REFUSED, reason)
    assert api.patches() == []
    assert _audit(tmp_path)[-1]["decision"] == "refused"


def test_a_refused_key_may_be_tried_again_and_a_reused_key_is_refused(enforcer, api):
    api.workloads[("team-a", "job-train-llm-5b7c1")]["spec"]["active"] = False
    action = _action(ActionKind.RECLAIM, key="reclaim-42")
    assert enforcer.apply(action, NOW).outcome == Outcome.REFUSED
    api.workloads[("team-a", "job-train-llm-5b7c1")]["spec"]["active"] = True
    assert enforcer.apply(action, NOW).outcome == Outcome.APPLIED
    reused = enforcer.apply(_action(ActionKind.RECLAIM, "team-c/job-mig-infer-8b9c0", key="reclaim-42"), NOW)
    assert reused.outcome == Outcome.REFUSED
    assert reused.reason == f"idempotency key reclaim-42 was used for reclaim on {TRAIN}"


def test_cap_runtime_sets_maximum_execution_time_before_admission(enforcer, api):
    result = enforcer.apply(_action(ActionKind.CAP_RUNTIME, "team-b/job-sweep-8d2f1", runtime_s=7200), NOW)
    assert result.outcome == Outcome.APPLIED and result.effects == {"runtime_cap_s": 7200}
    ((_, namespace, name, body, validation),) = api.patches()
    assert (namespace, name, body["spec"], validation) == (
        "team-b",
        "job-sweep-8d2f1",
        {"maximumExecutionTimeSeconds": 7200},
        "Strict",
    )
    assert api.workloads[("team-b", "job-sweep-8d2f1")]["spec"]["maximumExecutionTimeSeconds"] == 7200
    lower = enforcer.apply(
        _action(ActionKind.CAP_RUNTIME, "team-b/job-sweep-8d2f1", key="cap-2", runtime_s=9000), NOW
    )
    assert lower.reason == "the Workload's maximumExecutionTimeSeconds is already 7200 (asked 9000)"


def test_cap_runtime_on_a_kueue_without_the_field_is_refused(tmp_path, clock):
    api = FakeCustomObjects(old_crd=True)
    result = _enforcer(tmp_path, api, clock).apply(
        _action(ActionKind.CAP_RUNTIME, "team-b/job-sweep-8d2f1", runtime_s=7200), NOW
    )
    assert result.outcome == Outcome.REFUSED
    assert result.reason.startswith(
        "this Kueue has no spec.maximumExecutionTimeSeconds (Kueue 0.10 or later is "
        "needed): HTTP 400 BadRequest: "
    )
    assert "maximumExecutionTimeSeconds" not in api.workloads[("team-b", "job-sweep-8d2f1")]["spec"]


def test_cap_runtime_on_an_admitted_workload(enforcer, api):
    early = dt.datetime(2024, 3, 19, 21, 0, 0)  # admitted 643 s
    refused = enforcer.apply(_action(ActionKind.CAP_RUNTIME, runtime_s=3600), early)
    assert refused.outcome == Outcome.REFUSED
    assert refused.reason.startswith(
        "Kueue does not allow changing spec.maximumExecutionTimeSeconds while the "
        "Workload is admitted; the cap would end it at 2024-03-19T21:49:17Z"
    )
    late = enforcer.apply(
        _action(ActionKind.CAP_RUNTIME, key="cap-late", runtime_s=3600), dt.datetime(2024, 3, 19, 22)
    )
    assert late.outcome == Outcome.APPLIED
    assert late.effects == {"runtime_cap_s": 3600, "state": "TIMEOUT", "active": False, "gpus_released": 6}
    assert [c[3]["spec"] for c in api.patches()] == [{"active": False}]


def test_remind_annotates_the_workload(enforcer, api):
    result = enforcer.apply(_action(ActionKind.REMIND, reason="idle for 30 min"), NOW)
    assert result.outcome == Outcome.APPLIED
    annotations = api.workloads[("team-a", "job-train-llm-5b7c1")]["metadata"]["annotations"]
    assert annotations == {
        "gpupool.io/reminded-at": "2024-03-22T12:00:00Z",
        "gpupool.io/reminder": "idle for 30 min",
    }


def test_a_workload_changed_in_between_is_read_and_judged_again(tmp_path, clock):
    api = FakeCustomObjects(conflicts=1)
    result = _enforcer(tmp_path, api, clock).apply(_action(ActionKind.RECLAIM), NOW)
    assert result.outcome == Outcome.APPLIED
    assert [c[0] for c in api.calls] == ["get", "patch", "get", "patch"]
    stubborn = FakeCustomObjects(conflicts=5)
    again = _enforcer(tmp_path / "b", stubborn, clock).apply(_action(ActionKind.RECLAIM), NOW)
    assert (again.outcome, again.reason) == (
        Outcome.REFUSED,
        f"Workload {TRAIN} kept changing while it was read and patched (HTTP 409)",
    )


def _json_patch(doc: dict, ops: list[dict]) -> dict:
    """Apply test/replace operations (RFC 6902) as `kubectl patch --type=json` would."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [int(p) if p.isdigit() else p for p in op["path"].strip("/").split("/")]
        node = doc
        for part in parents:
            node = node[part]
        if op["op"] == "test":
            assert node[last] == op["value"], f"test failed at {op['path']}"
        else:
            node[last] = op["value"]
    return doc


def test_quota_change_is_proposed_with_the_cluster_queue_patch(enforcer, api, tmp_path):
    result = enforcer.apply(
        _action(
            ActionKind.QUOTA_CHANGE,
            "team-a/user-queue",
            quota={"A100": 24, "H100": 8},
            reason="A100 queue wait p90 over 2 h",
        ),
        NOW,
    )
    assert result.outcome == Outcome.PROPOSED and result.proposal_id.startswith("kueue-qp-")
    assert api.patches() == []
    command = result.effects["admin_command"]
    assert command.startswith("kubectl patch clusterqueue cluster-queue --type=json -p '")
    ops = json.loads(command.split(" -p ", 1)[1].strip("'"))
    patched = _json_patch(api.cluster[("clusterqueues", "cluster-queue")], ops)
    gpu_flavors = {
        f["name"]: f["resources"][0]["nominalQuota"] for f in patched["spec"]["resourceGroups"][1]["flavors"]
    }
    assert gpu_flavors == {"a100-80gb": 24, "h100-80gb": 8}
    audit = _audit(tmp_path)[-1]
    assert (audit["decision"], audit["action"], audit["object_kind"]) == (
        "proposed",
        "enforcement.quota_proposal",
        "clusterqueue",
    )
    after = json.loads(audit["after_json"])
    assert after["nominal_quota"]["a100-80gb"] == {
        "gpu_model": "A100",
        "resource": "nvidia.com/gpu",
        "before": 16,
        "after": 24,
    }
    assert after["json_patch"] == ops


def test_quota_change_finds_the_model_of_a_flavor_by_its_node_labels(enforcer, api):
    queue = api.cluster[("clusterqueues", "tas-cluster-queue")]
    refused = enforcer.apply(_action(ActionKind.QUOTA_CHANGE, "tas-cluster-queue", quota={"H100": 32}), NOW)
    assert refused.outcome == Outcome.REFUSED
    assert refused.reason == (
        "no flavor of ClusterQueue tas-cluster-queue carries H100 GPUs (its nvidia.com/gpu "
        "flavors: tas-flavor (model unknown)); name it in kubernetes.flavor_gpu_models"
    )
    api.cluster[("resourceflavors", "tas-flavor")]["spec"]["nodeLabels"]["nvidia.com/gpu.product"] = (
        "NVIDIA-H100-80GB-HBM3"
    )
    proposed = enforcer.apply(
        _action(ActionKind.QUOTA_CHANGE, "tas-cluster-queue", key="qc-2", quota={"H100": 32}), NOW
    )
    assert proposed.outcome == Outcome.PROPOSED
    assert "/spec/resourceGroups/0/flavors/0/resources/2/nominalQuota" in proposed.effects["admin_command"]
    assert queue == api.cluster[("clusterqueues", "tas-cluster-queue")]


@pytest.mark.parametrize(
    ("target", "quota", "reason"),
    [
        ("cluster-queue", {"L40S": 4}, "no flavor of ClusterQueue cluster-queue carries L40S GPUs"),
        (
            "cluster-queue",
            {"A100": 2.5},
            "quota A100 is 2.5: a ClusterQueue's nominalQuota of nvidia.com/gpu counts",
        ),
        ("no-such-queue", {"A100": 4}, "no clusterqueue no-such-queue in the cluster"),
        ("team-z/user-queue", {"A100": 4}, "no LocalQueue team-z/user-queue in the cluster"),
    ],
)
def test_quota_change_refusals(enforcer, target, quota, reason):
    result = enforcer.apply(_action(ActionKind.QUOTA_CHANGE, target, quota=quota), NOW)
    assert result.outcome == Outcome.REFUSED and result.reason.startswith(reason)


def test_the_ledger_must_be_kueue_s(tmp_path, api):
    with pytest.raises(ValueError, match="the ledger is for engine 'slurm', expected 'kueue'"):
        KueueEnforcer(
            ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "slurm"), KubernetesConfig(), api
        )


def test_the_official_client_sends_the_merge_patches(tmp_path):
    from kubernetes.client import CustomObjectsApi

    from pipelines.connectors.kubernetes import api_client
    from tests.kubernetes.api_server import RecordedApiServer

    objects = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in _items("workloads.json")[:13]}

    def workload(namespace: str, name: str):
        def answer(query, body):
            obj = objects[(namespace, name)]
            if body is not None:
                _merge(obj, {k: v for k, v in body.items() if k != "metadata"})
            return 200, obj

        return answer

    base = "/apis/kueue.x-k8s.io/v1beta1/namespaces"
    server = RecordedApiServer(
        {
            (method, f"{base}/{ns}/workloads/{name}"): workload(ns, name)
            for method in ("GET", "PATCH")
            for ns, name in (("team-a", "job-train-llm-5b7c1"), ("team-b", "job-sweep-8d2f1"))
        }
    )
    try:
        config = KubernetesConfig(api_server=server.url, token="t0ken")
        enforcer = KueueEnforcer(
            ActionLedger(tmp_path / "ledger.db", tmp_path / "landing", "kueue"),
            config,
            CustomObjectsApi(api_client(config)),
        )
        assert enforcer.apply(_action(ActionKind.RECLAIM), NOW).outcome == Outcome.APPLIED
        capped = enforcer.apply(_action(ActionKind.CAP_RUNTIME, "team-b/job-sweep-8d2f1", runtime_s=600), NOW)
        assert capped.outcome == Outcome.APPLIED
    finally:
        server.close()
    patches = [
        (path.rsplit("/", 1)[1], query, headers["Content-Type"], body)
        for method, path, query, headers, body in server.requests
        if method == "PATCH"
    ]
    assert patches == [
        (
            "job-train-llm-5b7c1",
            {},
            "application/merge-patch+json",
            {
                "spec": {"active": False},
                "metadata": {
                    "resourceVersion": objects[("team-a", "job-train-llm-5b7c1")]["metadata"][
                        "resourceVersion"
                    ]
                },
            },
        ),
        (
            "job-sweep-8d2f1",
            {"fieldValidation": "Strict"},
            "application/merge-patch+json",
            {
                "spec": {"maximumExecutionTimeSeconds": 600},
                "metadata": {
                    "resourceVersion": objects[("team-b", "job-sweep-8d2f1")]["metadata"]["resourceVersion"]
                },
            },
        ),
    ]
    assert objects[("team-a", "job-train-llm-5b7c1")]["spec"]["active"] is False
