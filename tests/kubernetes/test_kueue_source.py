"""The Kueue Workload parser and the Kueue connector, on recorded API answers (there is no cluster here).

tests/kubernetes/fixtures/workloads.json is a WorkloadList whose statuses are the Kueue docs' own
examples (admitted, pending for quota, admission checks, unattempted, inadmissible, preempted), plus
finished, re-admitted, deactivated, MIG and topology-aware ones and four malformed items;
pods.json is the PodList of their pods (see fixtures/PROVENANCE.md).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from pipelines.connectors.kubernetes import KubernetesConfig, api_client, load_kubernetes_config
from pipelines.connectors.kueue import KueueClient, Snapshot, land_snapshot, merge_workloads
from pipelines.ingest import ingest_partition
from pipelines.resources.kueue import KueueState
from pipelines.sources.kueue import parse_kueue_file, parse_kueue_workloads
from pipelines.sources.kueue_objects import KueueMapping, attempt_state
from tests.kubernetes.api_server import RecordedApiServer

FIXTURES = Path(__file__).parent / "fixtures"
MAPPING = KueueMapping(flavor_gpu_models={"tas-flavor": "H100"})
T = dt.datetime.fromisoformat


def _doc(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def _parse(workloads: dict | bytes, pods: list | None = None, mapping: KueueMapping = MAPPING):
    data = workloads if isinstance(workloads, bytes) else json.dumps(workloads).encode()
    return parse_kueue_workloads(
        data, "workloads.json", [_doc("pods.json")] if pods is None else pods, mapping
    )


def _events(result) -> set[tuple]:
    return {
        (r["job_id"], r["attempt"], r["event_type"], r["occurred_at"].isoformat(), r["state"])
        for r in result.tables["job_events"].to_dicts()
    }


EXPECTED_EVENTS = {
    # admitted and running (docs: "Admitted Workload")
    ("team-a/job-train-llm-5b7c1", 1, "submit", "2024-03-19T20:49:10", "PENDING"),
    ("team-a/job-train-llm-5b7c1", 1, "admit", "2024-03-19T20:49:17", "PENDING"),
    ("team-a/job-train-llm-5b7c1", 1, "start", "2024-03-19T20:49:41", "RUNNING"),
    # waiting: insufficient quota, admission checks, never attempted, inadmissible
    ("team-b/job-sweep-8d2f1", 1, "submit", "2024-03-21T13:42:58", "PENDING"),
    ("team-a/job-dws-train-3a9e0", 1, "submit", "2024-05-03T20:01:55", "PENDING"),
    ("default/job-strict-fifo-7c1d2", 1, "submit", "2024-03-21T13:50:00", "PENDING"),
    ("default/job-misconfigured-1e4b5", 1, "submit", "2024-03-21T13:55:20", "PENDING"),
    # preempted, waiting again (docs: "Is my Job preempted?")
    ("team-b/job-low-prio-4f6a8", 1, "submit", "2024-03-21T15:30:00", "PENDING"),
    ("team-b/job-low-prio-4f6a8", 1, "preempt", "2024-03-21T15:49:55", "PREEMPTED"),
    # finished
    ("team-a/job-finetune-2b8c3", 1, "submit", "2024-03-20T08:00:00", "PENDING"),
    ("team-a/job-finetune-2b8c3", 1, "admit", "2024-03-20T08:00:02", "PENDING"),
    ("team-a/job-finetune-2b8c3", 1, "start", "2024-03-20T08:00:30", "RUNNING"),
    ("team-a/job-finetune-2b8c3", 1, "finish", "2024-03-20T10:15:00", "COMPLETED"),
    ("team-b/job-eval-6d9e4", 1, "submit", "2024-03-20T09:00:00", "PENDING"),
    ("team-b/job-eval-6d9e4", 1, "admit", "2024-03-20T09:00:01", "PENDING"),
    ("team-b/job-eval-6d9e4", 1, "start", "2024-03-20T09:00:20", "RUNNING"),
    ("team-b/job-eval-6d9e4", 1, "finish", "2024-03-20T09:20:00", "FAILED"),
    # re-admitted after a preemption: attempt 1 ends when it was requeued, attempt 2 runs
    ("team-a/job-resumed-9a1b2", 1, "submit", "2024-03-21T15:00:00", "PENDING"),
    ("team-a/job-resumed-9a1b2", 1, "preempt", "2024-03-21T15:49:56", "PREEMPTED"),
    ("team-a/job-resumed-9a1b2", 2, "admit", "2024-03-21T16:10:00", "PENDING"),
    ("team-a/job-resumed-9a1b2", 2, "start", "2024-03-21T16:10:25", "RUNNING"),
    # deactivated (what reclaim does), and deactivated by Kueue at its maximum execution time
    ("team-b/job-notebook-0c3d4", 1, "submit", "2024-03-22T06:59:00", "PENDING"),
    ("team-b/job-notebook-0c3d4", 1, "start", "2024-03-22T07:00:00", "RUNNING"),
    ("team-b/job-notebook-0c3d4", 1, "finish", "2024-03-22T09:00:00", "CANCELLED"),
    ("team-a/job-overrun-5e6f7", 1, "submit", "2024-03-22T10:00:00", "PENDING"),
    ("team-a/job-overrun-5e6f7", 1, "finish", "2024-03-22T11:00:05", "TIMEOUT"),
    # MIG and topology-aware scheduling
    ("team-c/job-mig-infer-8b9c0", 1, "submit", "2024-03-21T12:00:00", "PENDING"),
    ("team-c/job-mig-infer-8b9c0", 1, "admit", "2024-03-21T12:00:03", "PENDING"),
    ("team-c/job-mig-infer-8b9c0", 1, "start", "2024-03-21T12:00:40", "RUNNING"),
    ("default/job-tas-train-2d3e4", 1, "submit", "2024-03-21T14:00:00", "PENDING"),
    ("default/job-tas-train-2d3e4", 1, "admit", "2024-03-21T14:00:02", "PENDING"),
    ("default/job-tas-train-2d3e4", 1, "start", "2024-03-21T14:00:31", "RUNNING"),
}


def test_workload_conditions_become_job_events():
    result = _parse(_doc("workloads.json"))
    assert _events(result) == EXPECTED_EVENTS
    assert result.records_read == 17 and result.records_loaded == 13
    assert result.records_read == result.records_loaded + result.quarantine.height


def test_submit_carries_who_where_what_and_why_it_waits():
    events = {
        (r["job_id"], r["event_type"]): r
        for r in _parse(_doc("workloads.json")).tables["job_events"].to_dicts()
    }
    train = events[("team-a/job-train-llm-5b7c1", "submit")]
    assert (train["tenant"], train["queue"], train["user_name"], train["job_name"], train["template"]) == (
        "team-a",
        "user-queue",
        "alice",
        "train-llm",
        "training",
    )
    assert (train["gpus_requested"], train["gpu_model"], train["share_mode"], train["priority"]) == (
        6,
        "A100",
        "whole",
        100,
    )
    assert json.loads(train["spec_json"]) == {"cluster_queue": "cluster-queue", "owner": "train-llm"}
    assert train["event_id"] == "kueue:team-a/job-train-llm-5b7c1:3f1c2a9e:1:submit"
    assert events[("team-b/job-sweep-8d2f1", "submit")]["reason"] == (
        "Pending: couldn't assign flavors to pod set main: insufficient quota for cpu in flavor "
        "default-flavor in ClusterQueue"
    )
    assert events[("default/job-misconfigured-1e4b5", "submit")]["reason"] == (
        "Inadmissible: LocalQueue user-queue doesn't exist"
    )
    dws = events[("team-a/job-dws-train-3a9e0", "submit")]
    assert "waiting for admission checks: dws-prov Pending" in dws["reason"] and dws["gpu_model"] == "H100"
    assert events[("default/job-strict-fifo-7c1d2", "submit")]["reason"].startswith(
        "no admission attempt yet"
    )
    mig = events[("team-c/job-mig-infer-8b9c0", "submit")]
    assert (mig["share_mode"], mig["mig_profile"], mig["gpus_requested"], mig["template"]) == (
        "mig",
        "1g.10gb",
        2,
        "inference",
    )
    preempt = events[("team-b/job-low-prio-4f6a8", "preempt")]
    assert preempt["reason"].startswith(
        "Preempted: Preempted to accommodate a higher priority Workload "
        "(InClusterQueue); waiting: Pending: couldn't assign flavors"
    )
    resumed = events[("team-a/job-resumed-9a1b2", "preempt")]
    assert "no longer in the Workload's status: this is when it was requeued" in resumed["reason"]
    assert "maximum execution time" in events[("team-a/job-overrun-5e6f7", "finish")]["reason"]


def test_job_gpus_from_pods_and_topology_assignment():
    result = _parse(_doc("workloads.json"))
    gpus = result.tables["job_gpus"]
    per_host = {
        (
            r["job_id"],
            r["attempt"],
            r["host"],
            r["gpu_model"],
            r["gpu_instance_profile"],
            round(r["fraction"], 4),
            r["assigned_at"].isoformat(),
            r["len"],
        )
        for r in gpus.group_by(
            "job_id", "attempt", "host", "gpu_model", "gpu_instance_profile", "fraction", "assigned_at"
        )
        .len()
        .to_dicts()
    }
    assert per_host == {
        # three running pods of 2 GPUs; the failed pod the Job controller replaced is not counted
        ("team-a/job-train-llm-5b7c1", 1, "gpu-node-1", "A100", None, 1.0, "2024-03-19T20:49:41", 4),
        ("team-a/job-train-llm-5b7c1", 1, "gpu-node-2", "A100", None, 1.0, "2024-03-19T20:49:41", 2),
        ("team-a/job-finetune-2b8c3", 1, "gpu-node-3", "H100", None, 1.0, "2024-03-20T08:00:30", 4),
        # only the pod created for attempt 2, not the first attempt's
        ("team-a/job-resumed-9a1b2", 2, "gpu-node-2", "A100", None, 1.0, "2024-03-21T16:10:25", 2),
        # pods without Kueue's annotation, matched by their owner Job
        (
            "team-c/job-mig-infer-8b9c0",
            1,
            "gpu-node-5",
            "A100",
            "1g.10gb",
            round(1 / 7, 4),
            "2024-03-21T12:00:40",
            2,
        ),
        ("default/job-tas-train-2d3e4", 1, "tas-node-1", "H100", None, 1.0, "2024-03-21T14:00:31", 2),
        ("default/job-tas-train-2d3e4", 1, "tas-node-2", "H100", None, 1.0, "2024-03-21T14:00:31", 2),
    }
    assert gpus["gpu"].null_count() == gpus.height and set(gpus["source"]) == {"kueue"}
    # job-eval's pod is gone, job-notebook's too: their GPUs have no node
    assert any(note.startswith("2 GPUs of started attempts have no known node") for note in result.notes)


def test_without_pods_only_topology_assignments_give_nodes():
    result = _parse(_doc("workloads.json"), pods=[])
    assert set(result.tables["job_gpus"]["job_id"]) == {"default/job-tas-train-2d3e4"}
    assert any(note.startswith("16 GPUs of started attempts have no known node") for note in result.notes)


def test_malformed_workloads_are_quarantined_with_reasons():
    quarantine = _parse(_doc("workloads.json")).quarantine
    reasons = dict(zip(quarantine["line_number"], quarantine["reason"], strict=True))
    assert reasons == {
        14: "items[13]: field 'metadata.uid' is missing",
        15: "items[14]: resource spec.podSets[0].template.spec.containers[0].resources.nvidia.com/gpu "
        'is "1.5", expected a whole number of devices',
        16: "items[15]: field 'status.conditions[0].lastTransitionTime' is 'yesterday', expected an "
        "RFC 3339 time with Z or an offset",
        17: "items[16]: kind is 'Pod', expected 'Workload'",
    }
    assert set(quarantine["source"]) == {"kueue"} and quarantine["raw"].str.contains('"metadata"').all()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"kind": "WorkloadList", "items": [', "invalid JSON document"),
        (b'{"apiVersion": "v1", "kind": "ConfigMap"}', "document kind is 'ConfigMap', expected WorkloadList"),
        (
            b'{"apiVersion": "batch/v1", "kind": "WorkloadList", "items": []}',
            "document apiVersion is 'batch/v1'",
        ),
        (b"[1, 2]", "document is array, expected a WorkloadList object"),
    ],
)
def test_a_document_that_is_not_a_workload_list_is_one_quarantined_record(body, reason):
    result = parse_kueue_workloads(body, "bad.json")
    assert (result.records_read, result.records_loaded, result.quarantine.height) == (1, 0, 1)
    assert result.quarantine["reason"][0].startswith(reason)


def test_a_pod_list_is_not_records_of_its_own():
    result = parse_kueue_workloads((FIXTURES / "pods.json").read_bytes(), "pods.json")
    assert (result.records_read, result.records_loaded, result.quarantine.height) == (0, 0, 0)
    assert result.tables["job_events"].height == 0 and "PodList" in result.notes[0]


def test_single_v1beta2_workload_and_cpu_only_requests():
    result = _parse(_doc("workload-v1beta2.json"), pods=[])
    rows = result.tables["job_events"].to_dicts()
    assert [(r["event_type"], r["occurred_at"].isoformat()) for r in rows] == [
        ("submit", "2024-03-19T20:49:12"),
        ("admit", "2024-03-19T20:49:17"),
    ]
    assert (rows[0]["gpus_requested"], rows[0]["share_mode"], rows[0]["gpu_model"]) == (0, None, None)


def test_tenant_label_and_unknown_template_label():
    doc = _doc("workloads.json")
    doc["items"] = doc["items"][:1]
    doc["items"][0]["metadata"]["labels"].update({"team": "llm-research", "gpupool.io/template": "batch"})
    result = _parse(doc, mapping=KueueMapping(tenant_label="team"))
    submit = result.tables["job_events"].filter(pl.col("event_type") == "submit").row(0, named=True)
    assert (submit["tenant"], submit["template"]) == ("llm-research", None)
    assert any("template label outside" in note for note in result.notes)
    # the namespace's tenant only where the label names none (the governance tick reads it alike)
    mapped = KueueMapping(tenant_label="team", tenant_by_namespace={"team-a": "vision", "team-b": "nlp"})
    doc = _doc("workloads.json")
    doc["items"] = doc["items"][:2]
    doc["items"][0]["metadata"]["labels"]["team"] = "llm-research"
    submits = _parse(doc, mapping=mapped).tables["job_events"].filter(pl.col("event_type") == "submit")
    assert dict(submits.select("job_id", "tenant").iter_rows()) == {
        "team-a/job-train-llm-5b7c1": "llm-research", "team-b/job-sweep-8d2f1": "nlp"}


def test_event_ids_are_deterministic():
    first, second = _parse(_doc("workloads.json")), _parse(_doc("workloads.json"))
    assert first.tables["job_events"].equals(second.tables["job_events"])
    ids = first.tables["job_events"]["event_id"]
    assert ids.n_unique() == ids.len() and ids.str.starts_with("kueue:").all()


def _running_copy(item: dict) -> dict:
    """The same Workload as an earlier snapshot saw it: admitted and running, before its eviction."""
    earlier = copy.deepcopy(item)
    earlier["metadata"]["resourceVersion"] = "40001"
    earlier["status"] = {
        "admission": {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 2,
                    "flavors": {"nvidia.com/gpu": "a100-80gb"},
                    "resourceUsage": {"nvidia.com/gpu": "2"},
                }
            ],
        },
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "Quota reserved in ClusterQueue cluster-queue",
                "lastTransitionTime": "2024-03-21T15:30:05Z",
            },
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Admitted",
                "message": "The workload is admitted",
                "lastTransitionTime": "2024-03-21T15:30:05Z",
            },
            {
                "type": "PodsReady",
                "status": "True",
                "reason": "Started",
                "message": "All pods reached readiness",
                "lastTransitionTime": "2024-03-21T15:30:12Z",
            },
        ],
    }
    return earlier


def _evicted_copy(item: dict) -> dict:
    """job-resumed as a snapshot saw it between its preemption and its re-admission."""
    evicted = copy.deepcopy(item)
    evicted["metadata"]["resourceVersion"] = "40002"
    evicted["status"] = {
        "conditions": [
            {
                "type": "Evicted",
                "status": "True",
                "reason": "Preempted",
                "message": "Preempted to accommodate a higher priority Workload",
                "lastTransitionTime": "2024-03-21T15:49:55Z",
            },
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "insufficient quota",
                "lastTransitionTime": "2024-03-21T15:49:56Z",
            },
        ],
        "schedulingStats": {
            "evictions": [{"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 1}]
        },
    }
    return evicted


def test_day_file_merges_the_snapshots_of_a_workload():
    items = {i["metadata"]["name"]: i for i in _doc("workloads.json")["items"][:13]}
    low, resumed = items["job-low-prio-4f6a8"], items["job-resumed-9a1b2"]
    first = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "WorkloadList",
        "metadata": {},
        "items": [_running_copy(low), _evicted_copy(resumed)],
    }
    second = {**first, "items": [low, resumed]}
    day = merge_workloads(merge_workloads(None, first), second)
    assert len(day["items"]) == 4 and merge_workloads(day, second) == day  # a repeat adds nothing
    assert [attempt_state(i)[1:] for i in day["items"]] == [(0, False), (1, True), (1, True), (1, False)]

    result = _parse(day)
    events = {
        (r["job_id"], r["attempt"], r["event_type"]): r["occurred_at"].isoformat()
        for r in result.tables["job_events"].to_dicts()
    }
    assert events == {
        ("team-b/job-low-prio-4f6a8", 1, "submit"): "2024-03-21T15:30:00",
        ("team-b/job-low-prio-4f6a8", 1, "admit"): "2024-03-21T15:30:05",
        ("team-b/job-low-prio-4f6a8", 1, "start"): "2024-03-21T15:30:12",
        ("team-b/job-low-prio-4f6a8", 1, "preempt"): "2024-03-21T15:49:55",
        ("team-a/job-resumed-9a1b2", 1, "submit"): "2024-03-21T15:00:00",
        # the snapshot that saw the eviction wins over the later one that only saw the requeue
        ("team-a/job-resumed-9a1b2", 1, "preempt"): "2024-03-21T15:49:55",
        ("team-a/job-resumed-9a1b2", 2, "admit"): "2024-03-21T16:10:00",
        ("team-a/job-resumed-9a1b2", 2, "start"): "2024-03-21T16:10:25",
    }
    assert result.records_read == 4 and result.records_loaded == 4


# --- connector -----------------------------------------------------------------------------------


class FakeCustomObjects:
    """CustomObjectsApi.list_*_custom_object serving recorded WorkloadList pages; records each call."""

    def __init__(self, items: list[dict], page: int):
        self.items, self.page, self.calls = items, page, []

    def _answer(self, items: list[dict], kwargs: dict) -> dict:
        start = int(kwargs.get("_continue") or 0)
        rest = items[start : start + self.page]
        token = str(start + self.page) if start + self.page < len(items) else ""
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "WorkloadList",
            "metadata": {"continue": token, "resourceVersion": "49990"},
            "items": rest,
        }

    def list_cluster_custom_object(self, group, version, plural, **kwargs):
        self.calls.append(("cluster", group, version, plural, kwargs))
        return self._answer(self.items, kwargs)

    def list_namespaced_custom_object(self, group, version, namespace, plural, **kwargs):
        self.calls.append(("namespaced", group, version, namespace, plural, kwargs))
        return self._answer(
            [i for i in self.items if i.get("metadata", {}).get("namespace") == namespace], kwargs
        )


class FakeCore:
    def __init__(self, pods: dict):
        self.pods, self.calls = pods, []

    def list_pod_for_all_namespaces(self, **kwargs):
        self.calls.append(kwargs)
        return SimpleNamespace(
            data=json.dumps(self.pods).encode()
        )  # the urllib3 answer with _preload_content=False


def test_kueue_client_lists_every_page_with_the_official_client_calls():
    items = _doc("workloads.json")["items"]
    custom, core = FakeCustomObjects(items, page=5), FakeCore(_doc("pods.json"))
    client = KueueClient(KubernetesConfig(page_size=5), custom, core)
    snap = client.snapshot(dt.date(2024, 3, 21))
    assert snap.workloads["kind"] == "WorkloadList" and snap.workloads["items"] == items
    assert [c[:4] for c in custom.calls] == [("cluster", "kueue.x-k8s.io", "v1beta1", "workloads")] * 4
    assert [c[4].get("_continue") for c in custom.calls] == [None, "5", "10", "15"]
    assert (
        core.calls[0]["label_selector"] == "kueue.x-k8s.io/podset"
        and core.calls[0]["_preload_content"] is False
    )
    assert snap.pods == _doc("pods.json")


def test_kueue_client_lists_only_the_configured_namespaces():
    custom = FakeCustomObjects(_doc("workloads.json")["items"], page=100)
    client = KueueClient(
        KubernetesConfig(namespaces=["team-b", "team-c"], kueue_version="v1beta2"), custom, None
    )
    names = [i["metadata"]["name"] for i in client.workloads()["items"]]
    assert names == [
        "job-sweep-8d2f1",
        "job-low-prio-4f6a8",
        "job-eval-6d9e4",
        "job-notebook-0c3d4",
        "job-mig-infer-8b9c0",
    ]
    assert [(c[0], c[2], c[3]) for c in custom.calls] == [
        ("namespaced", "v1beta2", "team-b"),
        ("namespaced", "v1beta2", "team-c"),
    ]


def test_api_client_from_kubeconfig_and_from_api_server_with_token_from_env(tmp_path, monkeypatch):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "lab",
                "clusters": [
                    {
                        "name": "lab",
                        "cluster": {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True},
                    },
                    {
                        "name": "prod",
                        "cluster": {"server": "https://10.9.9.9:6443", "insecure-skip-tls-verify": True},
                    },
                ],
                "users": [{"name": "bot", "user": {"token": "kubeconfig-token"}}],
                "contexts": [
                    {"name": "lab", "context": {"cluster": "lab", "user": "bot"}},
                    {"name": "prod", "context": {"cluster": "prod", "user": "bot"}},
                ],
            }
        )
    )
    client = api_client(KubernetesConfig(kubeconfig=str(kubeconfig), context="prod"))
    assert client.configuration.host == "https://10.9.9.9:6443"
    assert client.configuration.api_key["authorization"] == "Bearer kubeconfig-token"

    config_file = tmp_path / "gpupool.yml"
    config_file.write_text(
        "kubernetes:\n  api_server: https://k8s.example:6443\n  token: ${K8S_TOKEN}\n"
        "  namespaces: [team-a]\n  flavor_gpu_models: {tas-flavor: H100}\n"
    )
    monkeypatch.setenv("K8S_TOKEN", "from-the-environment")
    config = load_kubernetes_config(config_file)
    assert config.namespaces == ["team-a"] and config.flavor_gpu_models == {"tas-flavor": "H100"}
    configuration = api_client(config).configuration
    assert configuration.host == "https://k8s.example:6443"
    assert configuration.get_api_key_with_prefix("authorization") == "Bearer from-the-environment"


def test_land_snapshot_merges_workloads_and_pods_into_the_day_files(tmp_path):
    day = dt.date(2024, 3, 21)
    items = {i["metadata"]["name"]: i for i in _doc("workloads.json")["items"][:13]}
    pods = _doc("pods.json")
    first = Snapshot(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "WorkloadList",
            "metadata": {},
            "items": [_running_copy(items["job-low-prio-4f6a8"])],
        },
        {**pods, "items": pods["items"][:3]},
    )
    second = Snapshot(
        {**first.workloads, "items": [items["job-low-prio-4f6a8"], items["job-finetune-2b8c3"]]},
        {**pods, "items": pods["items"][2:]},
    )
    land_snapshot(tmp_path, day, first)
    paths = land_snapshot(tmp_path, day, second)
    assert [p.name for p in paths] == ["workloads.json", "pods.json"]
    workloads = json.loads(paths[0].read_text())
    assert [(i["metadata"]["name"], attempt_state(i)[1]) for i in workloads["items"]] == [
        ("job-low-prio-4f6a8", 0),
        ("job-low-prio-4f6a8", 1),
        ("job-finetune-2b8c3", 0),
    ]
    assert len(json.loads(paths[1].read_text())["items"]) == len(pods["items"])
    assert not list(paths[0].parent.glob(".*.partial"))


def test_offline_resource_lands_a_recording_that_ingests(tmp_path, warehouse, monkeypatch):
    day = dt.date(2024, 3, 21)
    recorded = tmp_path / "recorded" / day.isoformat()
    recorded.mkdir(parents=True)
    for name in ("workloads.json", "pods.json"):
        (recorded / name).write_bytes((FIXTURES / name).read_bytes())
    config_file = tmp_path / "gpupool.yml"
    config_file.write_text("kubernetes:\n  flavor_gpu_models:\n    tas-flavor: H100\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(config_file))

    resource = KueueState(offline_dir=str(tmp_path / "recorded"))
    assert [p.name for p in resource.land(warehouse.landing, day)] == ["workloads.json", "pods.json"]
    with pytest.raises(FileNotFoundError, match="no recorded Kueue Workloads for 2024-03-22"):
        resource.land(warehouse.landing, day + dt.timedelta(days=1))

    report = ingest_partition(warehouse, "kueue", day)
    assert (report.files_read, report.records_read, report.records_loaded, report.records_quarantined) == (
        2,
        17,
        13,
        4,
    )
    assert report.rows_by_table == {"job_events": len(EXPECTED_EVENTS), "job_gpus": 18}
    with warehouse.connect(read_only=True) as con:
        models = con.execute(
            "select distinct gpu_model from raw.job_gpus where source = 'kueue' order by 1"
        ).fetchall()
    assert models == [("A100",), ("H100",)]

    direct = parse_kueue_file(warehouse.landing / "kueue" / day.isoformat() / "workloads.json")
    assert direct.tables["job_gpus"].height == 18  # the folder's pods.json read alongside


# --- the official client over HTTP ---------------------------------------------------------------


def test_the_official_client_pages_through_the_api():
    items = _doc("workloads.json")["items"]
    pods = _doc("pods.json")

    def workloads(query, body):
        start = int(query.get("continue") or 0)
        end = start + int(query["limit"])
        token = str(end) if end < len(items) else ""
        return 200, {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "WorkloadList",
            "metadata": {"continue": token, "resourceVersion": "49990"},
            "items": items[start:end],
        }

    server = RecordedApiServer(
        {
            ("GET", "/apis/kueue.x-k8s.io/v1beta1/workloads"): workloads,
            ("GET", "/api/v1/pods"): lambda query, body: (200, pods),
        }
    )
    try:
        config = KubernetesConfig(api_server=server.url, token="token-from-env", page_size=8)
        snap = KueueClient.from_config(config).snapshot(dt.date(2024, 3, 21))
    finally:
        server.close()
    assert snap.workloads["items"] == items and snap.pods == pods
    lists = [
        (m, p, q.get("limit"), q.get("continue"), q.get("labelSelector")) for m, p, q, _, _ in server.requests
    ]
    assert lists == [
        ("GET", "/apis/kueue.x-k8s.io/v1beta1/workloads", "8", None, None),
        ("GET", "/apis/kueue.x-k8s.io/v1beta1/workloads", "8", "8", None),
        ("GET", "/apis/kueue.x-k8s.io/v1beta1/workloads", "8", "16", None),
        ("GET", "/api/v1/pods", "8", None, "kueue.x-k8s.io/podset"),
    ]
    assert {h.get("authorization") for _, _, _, h, _ in server.requests} == {"Bearer token-from-env"}
