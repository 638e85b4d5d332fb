"""Live governance on Kueue: the tick's Kueue reader (pipelines/governance/running_kueue.py) and the
remind step's Event on the pods (pipelines/enforcement/kueue.py), through the official client against
the recorded API server (tests/kubernetes/api_server.py; no cluster here, see fixtures/PROVENANCE.md).

Namespace team-a (fixtures/governance-workloads-team-a.json) holds job-train-llm-5b7c1 (admitted
2024-03-19T20:49:17Z, pods ready 20:49:41Z, 3 pods x 2 GPUs: train-llm-0-h7x2k and train-llm-1-m4tns
on gpu-node-1, train-llm-2-b8wqf on gpu-node-2, user alice, template training), job-resumed-9a1b2
(preempted once, re-admitted 2024-03-21T16:10:00Z, pod resumed-p8r3t on gpu-node-2 with 2 GPUs), one
waiting for admission checks, one finished, one evicted, one without a uid and job-notebook-4d5e6,
Admitted without status.admission; its PodList adds resumed-zz9q1, Running without spec.nodeName.
Namespace team-b holds nothing running. The GPUs' pod labels come from dcgm-exporter text built from
a real scrape that labels a GPU with its pod (tests/fixtures/real-data/dcgm-exporter/
metrics_sample_h100_k8s_pod_labels_nvidia_aicr.prom), parsed and landed as the scrape rounds are.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import re
from pathlib import Path

import polars as pl
import pytest

from allocator.model import Action, ActionKind, Outcome
from pipelines.config import ConfigError
from pipelines.connectors.kubernetes import KubernetesAnswerError, KubernetesConfig
from pipelines.connectors.prometheus import PrometheusConfig, PrometheusError
from pipelines.contracts import StepAction, contract
from pipelines.enforcement.base import ActionLedger
from pipelines.enforcement.kueue import EVENT_REASON, KueueEnforcer, reminder_event
from pipelines.governance.dryrun import dry_run
from pipelines.governance.factory import build_readers
from pipelines.governance.live import POD_GPU_SCHEMA, SAMPLE_SCHEMA, SCRAPE_SOURCE, pod_gpus
from pipelines.governance.outbox import Outbox
from pipelines.governance.running_kueue import (
    UNINDEXED,
    KueueWork,
    PrometheusPods,
    ScrapeRoundPods,
    kueue_running_work,
)
from pipelines.governance.telemetry import shared_prometheus_minutes
from pipelines.governance.tick import governance_tick
from pipelines.sources.dcgm_text import parse_dcgm_text
from pipelines.sources.kueue_objects import read_pods, read_workload
from tests.conftest import REAL_DATA
from tests.connectors.conftest import LoopbackServer, send
from tests.governance.test_running_work import idle_catalog
from tests.kubernetes.api_server import RecordedApiServer

FIXTURES = Path(__file__).parent / "fixtures"
PROM = REAL_DATA / "dcgm-exporter" / "metrics_sample_h100_k8s_pod_labels_nvidia_aicr.prom"
NOW = dt.datetime(2024, 3, 22, 12, 0)
TRAIN, RESUMED = "team-a/job-train-llm-5b7c1", "team-a/job-resumed-9a1b2"
KUEUE = "/apis/kueue.x-k8s.io/v1beta1"
# the GPUs dcgm-exporter labels with a pod in the latest round
LABELLED = {
    "gpu-node-1": {0: "train-llm-0-h7x2k", 1: "train-llm-0-h7x2k", 2: "train-llm-1-m4tns", 3: "train-llm-1-m4tns"},
    "gpu-node-2": {0: "train-llm-2-b8wqf", 1: "train-llm-2-b8wqf", 2: "resumed-p8r3t"},
    "gpu-node-3": {7: "train-llm-0-h7x2k"},  # the pod runs on gpu-node-1: not its GPU
}


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def exporter_text(host: str, pods: dict[int, str], util: float) -> str:
    """The real scrape's DCGM_FI_DEV_GPU_UTIL lines for `host`, each GPU in `pods` labelled with its
    pod in namespace team-a (as the exporter labels GPU 0 in the recording), the others with none."""
    out = []
    for line in PROM.read_text().splitlines():
        if not line.startswith("DCGM_FI_DEV_GPU_UTIL{"):
            continue
        labels = re.sub(r',container="[^"]*",namespace="[^"]*",pod="[^"]*",pod_uid="[^"]*"', "",
                        line.rsplit(" ", 1)[0]).replace('Hostname="gpu-node-1"', f'Hostname="{host}"')
        gpu = int(re.search(r'gpu="(\d+)"', labels)[1])
        if gpu in pods:
            labels = labels[:-1] + f',container="main",namespace="team-a",pod="{pods[gpu]}",pod_uid=""}}'
        out.append(f"{labels} {util:g}")
    return "\n".join(out) + "\n"


def land_round(landing: Path, at: dt.datetime, labelled: dict[str, dict[int, str]], util: float = 0.0) -> None:
    """One scrape round at `at`, as the scrape connector lands it (raw.dcgm_samples in Parquet)."""
    text = "".join(exporter_text(host, pods, util) for host, pods in labelled.items())
    parsed = parse_dcgm_text(text, "scrape", scraped_at=at)
    assert parsed.quarantine.height == 0
    folder = landing / SCRAPE_SOURCE / at.date().isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    contract("dcgm_samples").conform(parsed.tables["dcgm_samples"]).write_parquet(
        folder / f"scrape-{at:%H%M%S}-r{at:%H%M}.parquet")


def land_rounds(landing: Path, minutes: int = 3) -> None:
    """Rounds a minute apart until NOW; the first also labels gpu-node-2's GPU 3 with resumed-p8r3t,
    which the later ones say is free again."""
    for m in range(minutes, 0, -1):
        at = NOW - dt.timedelta(minutes=m, seconds=-10)
        labelled = copy.deepcopy(LABELLED)
        if m == minutes:
            labelled["gpu-node-2"][3] = "resumed-p8r3t"
        land_round(landing, at, labelled)


def api_routes(answers: dict[str, dict]) -> dict:
    """GET routes of the namespaced listings: `answers` maps a path under /apis or /api to its document."""
    return {("GET", path): (lambda query, body, doc=doc: (200, doc)) for path, doc in answers.items()}


LISTINGS = {
    f"{KUEUE}/namespaces/team-a/workloads": "governance-workloads-team-a.json",
    f"{KUEUE}/namespaces/team-b/workloads": "governance-workloads-team-b.json",
    "/api/v1/namespaces/team-a/pods": "governance-pods-team-a.json",
    "/api/v1/namespaces/team-b/pods": "governance-pods-team-b.json",
}


@pytest.fixture
def server():
    server = RecordedApiServer(api_routes({path: fixture(name) for path, name in LISTINGS.items()}))
    yield server
    server.close()


def config(url: str, **governance) -> KubernetesConfig:
    return KubernetesConfig(api_server=url, token="t0ken", verify_ssl=False,
                            governance={"namespaces": ["team-a", "team-b"], **governance})


def by_id(work) -> dict[str, dict]:
    return {j["job_id"]: j for j in work.jobs}


def test_the_reader_lists_only_the_namespaces_in_scope_and_reads_the_running_workloads(server, tmp_path):
    land_rounds(tmp_path)
    work = KueueWork(config(server.url), tmp_path, clock=lambda: NOW).read()
    listed = sorted((path, query.get("labelSelector")) for _, path, query, _, _ in server.requests)
    assert listed == [
        ("/api/v1/namespaces/team-a/pods", "kueue.x-k8s.io/podset"),
        ("/api/v1/namespaces/team-b/pods", "kueue.x-k8s.io/podset"),
        (f"{KUEUE}/namespaces/team-a/workloads", None),
        (f"{KUEUE}/namespaces/team-b/workloads", None),
    ]
    tokens = {next(v for k, v in h.items() if k.lower() == "authorization") for *_, h, _ in server.requests}
    assert tokens == {"Bearer t0ken"}
    assert work.source == "kueue" and work.queues == []
    jobs = by_id(work)
    assert set(jobs) == {TRAIN, RESUMED}  # the others wait, ended, were evicted or cannot be read
    train = jobs[TRAIN]
    assert (train["attempt"], train["tenant"], train["queue"], train["user"], train["state"]) == (
        1, "team-a", "user-queue", "alice", "RUNNING")
    assert (train["started_at"], train["ended_at"]) == ("2024-03-19T20:49:41Z", None)  # PodsReady
    assert sorted((g["host"], g["gpu"]) for g in train["gpus"]) == [
        ("gpu-node-1", 0), ("gpu-node-1", 1), ("gpu-node-1", 2), ("gpu-node-1", 3),
        ("gpu-node-2", 0), ("gpu-node-2", 1)]  # not gpu-node-3's GPU 7, which names a pod of gpu-node-1
    assert {g["fraction"] for g in train["gpus"]} == {1.0}
    spec = train["spec"]
    assert (spec["template"], spec["gpu_model"], spec["share_mode"], spec["cluster_queue"]) == (
        "training", "A100", "whole", "cluster-queue")
    resumed = jobs[RESUMED]
    assert (resumed["attempt"], resumed["started_at"], resumed["user"]) == (2, "2024-03-21T16:10:25Z", None)
    # GPU 3 named resumed-p8r3t in an older round only: the pod's other GPU has no index
    assert [(g["host"], g["gpu"]) for g in resumed["gpus"]] == [("gpu-node-2", 2)]
    assert work.skipped == {
        UNINDEXED: 1,
        "Running pod without spec.nodeName": 1,
        "Workload Admitted without status.admission.clusterQueue": 1,  # job-notebook-4d5e6
        "Workload unreadable: field 'metadata.uid' is missing": 1,
    }


def test_a_workload_whose_gpus_no_series_names_is_listed_without_gpus(server, tmp_path):
    work = KueueWork(config(server.url), tmp_path, clock=lambda: NOW).read()  # no rounds landed
    jobs = by_id(work)
    assert set(jobs) == {TRAIN, RESUMED} and jobs[TRAIN]["gpus"] == [] == jobs[RESUMED]["gpus"]
    assert work.skipped[UNINDEXED] == 8  # 3 pods x 2 GPUs, and resumed-p8r3t's 2


def test_pod_gpus_reads_the_latest_labels_of_each_series_and_rounds_without_pod_columns(tmp_path):
    folder = tmp_path / SCRAPE_SOURCE / NOW.date().isoformat()
    folder.mkdir(parents=True)
    old, latest = NOW - dt.timedelta(minutes=2), NOW - dt.timedelta(minutes=1)
    # a round written before the pod columns were kept: it names no pod
    pl.DataFrame([(old, "gpu-node-1", 0, None, "DCGM_FI_DEV_GPU_UTIL", 0.0)], schema=SAMPLE_SCHEMA,
                 orient="row").write_parquet(folder / f"scrape-{old:%H%M%S}-a.parquet")
    rows = [  # GPU 0 time-sliced by two pods; GPU 1 was p1's and is free now; a MIG instance of GPU 2
        (latest, "gpu-node-1", 0, None, None, "team-a", "p1"), (latest, "gpu-node-1", 0, None, None, "team-a", "p2"),
        (old, "gpu-node-1", 1, None, None, "team-a", "p1"), (latest, "gpu-node-1", 1, None, None, None, None),
        (latest, "gpu-node-1", 2, 3, "1g.10gb", "team-a", "p3"),
    ]
    frame = pl.DataFrame(rows, schema=["sampled_at", "host", "gpu", "gpu_instance_id", "gpu_instance_profile",
                                       "k8s_namespace", "k8s_pod"], orient="row")
    frame.with_columns(metric=pl.lit("DCGM_FI_DEV_GPU_UTIL"), value=pl.lit(0.0)).write_parquet(
        folder / f"scrape-{latest:%H%M%S}-b.parquet")
    held = pod_gpus(tmp_path, NOW, dt.timedelta(minutes=5))
    assert held.rows() == [("team-a", "p1", "gpu-node-1", 0, None, None), ("team-a", "p2", "gpu-node-1", 0, None, None),
                           ("team-a", "p3", "gpu-node-1", 2, 3, "1g.10gb")]
    assert pod_gpus(tmp_path, NOW, dt.timedelta(seconds=90)).height == 3  # the older round is outside
    assert pod_gpus(tmp_path / "none", NOW, dt.timedelta(minutes=5)).is_empty()


def test_a_mig_workload_holds_its_instances_by_the_owner_of_its_pods():
    """workloads.json item 12 (team-c): 2 pods with one 1g.10gb instance each, started by a Kueue
    before 0.9 (no workload annotation on the pods: they are the Workload's through its owner Job)."""
    workloads = {"items": [fixture("workloads.json")["items"][11]]}
    pods = fixture("pods.json")
    held = pl.DataFrame([("team-c", "mig-infer-0-zq8wd", "gpu-node-5", 0, 7, "1g.10gb"),
                         ("team-c", "mig-infer-1-r5vb7", "gpu-node-5", 0, 8, "1g.10gb")],
                        schema=POD_GPU_SCHEMA, orient="row")
    settings = KubernetesConfig(governance={"namespaces": ["team-c"]})
    [job] = kueue_running_work(workloads, pods, held, settings).jobs
    assert (job["job_id"], job["spec"]["share_mode"], job["started_at"]) == (
        "team-c/job-mig-infer-8b9c0", "mig", "2024-03-21T12:00:40Z")
    assert job["gpus"] == [
        {"host": "gpu-node-5", "gpu": 0, "gpu_instance_id": i, "gpu_instance_profile": "1g.10gb", "fraction": 1 / 7}
        for i in (7, 8)]


def test_queue_template_and_tenant_mappings(tmp_path):
    land_rounds(tmp_path)
    workloads, pods = fixture("governance-workloads-team-a.json"), fixture("governance-pods-team-a.json")
    del workloads["items"][0]["metadata"]["labels"]["gpupool.io/template"]
    workloads["items"][3]["metadata"]["labels"]["gpupool.io/template"] = "not-a-template"
    settings = KubernetesConfig(
        tenant_by_namespace={"team-a": "vision"}, user_label="gpupool.io/owner",
        governance={"namespaces": ["team-a"], "queue_from": "cluster_queue",
                    "template_by_queue": {"cluster-queue": "experiment"}, "default_template": "interactive"})
    jobs = by_id(kueue_running_work(workloads, pods, pod_gpus(tmp_path, NOW, dt.timedelta(minutes=5)), settings))
    assert {(j["tenant"], j["queue"], j["spec"]["template"], j["user"]) for j in jobs.values()} == {
        ("vision", "cluster-queue", "experiment", None)}
    settings.governance.template_by_queue.clear()
    jobs = by_id(kueue_running_work(workloads, pods, pod_gpus(tmp_path, NOW, dt.timedelta(minutes=5)), settings))
    assert {j["spec"]["template"] for j in jobs.values()} == {"interactive"}


def test_what_a_server_answers_outside_the_namespaces_in_scope_is_skipped(tmp_path):
    workloads = fixture("governance-workloads-team-a.json")
    pods = fixture("governance-pods-team-a.json")
    stray = copy.deepcopy(workloads["items"][0])
    stray["metadata"]["namespace"] = "team-c"
    workloads["items"].append(stray)
    pods["items"].append({**copy.deepcopy(pods["items"][0]), "metadata": {
        **pods["items"][0]["metadata"], "namespace": "team-c", "uid": "70000001-0000-4000-8000-000000000099"}})
    pods["items"].append("not a pod")
    settings = KubernetesConfig(governance={"namespaces": ["team-a"]})
    work = kueue_running_work(workloads, pods, pod_gpus(tmp_path, NOW, dt.timedelta(minutes=5)), settings)
    assert set(by_id(work)) == {TRAIN, RESUMED}
    assert work.skipped["Workload outside the namespaces in scope"] == 1
    assert work.skipped["pod outside the namespaces in scope"] == 1
    assert work.skipped["pod unreadable: pod is string, expected a JSON object"] == 1
    with pytest.raises(ValueError, match="no 'items' list"):
        kueue_running_work({"kind": "Status"}, pods, pod_gpus(tmp_path, NOW, dt.timedelta(minutes=5)), settings)


def test_an_answer_that_is_not_json_or_no_answer_is_the_engine_unreadable(tmp_path):
    routes = api_routes({path: fixture(name) for path, name in LISTINGS.items()})
    routes[("GET", f"{KUEUE}/namespaces/team-b/workloads")] = lambda query, body: (200, "<html>proxy error</html>")
    server = RecordedApiServer(routes)
    try:
        with pytest.raises(KubernetesAnswerError, match="WorkloadList in team-b"):
            KueueWork(config(server.url), tmp_path, clock=lambda: NOW).read()
        outbox = Outbox(tmp_path / "outbox.db", tmp_path)
        try:
            report = governance_tick(NOW, landing=tmp_path, catalog=idle_catalog(), outbox=outbox, client=None,
                                     enforcers={}, work=[KueueWork(config(server.url), tmp_path, clock=lambda: NOW)])
        finally:
            outbox.close()
    finally:
        server.close()
    assert report.running_by_source == {"kueue": None} and report.running_jobs is None
    assert "running jobs (kueue): KubernetesAnswerError" in report.summary()
    assert "nothing planned this tick for kueue" in report.summary()
    gone = KueueWork(config(server.url), tmp_path, clock=lambda: NOW)  # the server is closed now
    with pytest.raises(Exception, match="Connection refused|Max retries"):
        gone.read()


def test_pods_from_a_prometheus_answering_no_query_answer_make_the_engine_unreadable(tmp_path):
    server = RecordedApiServer(api_routes({path: fixture(name) for path, name in LISTINGS.items()}))
    prometheus = LoopbackServer(lambda request: send(request, 200, b"<html>proxy error</html>"))
    pods = PrometheusPods(PrometheusConfig(url=prometheus.url, retries=0))
    outbox = Outbox(tmp_path / "outbox.db", tmp_path)
    try:
        with pytest.raises(PrometheusError, match="unreadable answer to the pods query"):
            KueueWork(config(server.url), tmp_path, pods=pods, clock=lambda: NOW).read()
        report = governance_tick(NOW, landing=tmp_path, catalog=idle_catalog(), outbox=outbox, client=None,
                                 enforcers={}, work=[KueueWork(config(server.url), tmp_path, pods=pods,
                                                               clock=lambda: NOW)])
    finally:
        outbox.close()
        prometheus.stop()
        server.close()
    assert report.running_by_source == {"kueue": None}
    assert "running jobs (kueue): PrometheusError" in report.summary()


def test_the_factory_reads_kueue_only_where_its_governance_section_names_namespaces(tmp_path):
    config_file = tmp_path / "gpupool.yml"
    config_file.write_text("kubernetes:\n  api_server: https://127.0.0.1:6443\n")
    assert build_readers(config_file, None, tmp_path) == []
    config_file.write_text("kubernetes:\n  api_server: https://127.0.0.1:6443\n  governance:\n"
                           "    namespaces: [team-a]\n    default_template: training\n")
    [reader] = build_readers(config_file, None, tmp_path)
    assert reader.source == "kueue" and reader.config.namespaces == ["team-a"]
    prometheus = "prometheus:\n  url: http://127.0.0.1:9090\n  selector: 'job=\"dcgm\"'\n"
    config_file.write_text(prometheus + config_file.read_text())
    [reader] = build_readers(config_file, None, tmp_path, "prometheus")  # the pods' GPUs from where telemetry is
    assert isinstance(reader.pods, PrometheusPods) and reader.pods.config.url == "http://127.0.0.1:9090"
    assert reader.pods.client is shared_prometheus_minutes(reader.pods.config).client  # one pool, not one a tick
    assert 'timestamp(DCGM_FI_DEV_FB_USED{job="dcgm"})' in reader.pods.query()
    [reader] = build_readers(config_file, None, tmp_path)
    assert isinstance(reader.pods, ScrapeRoundPods)
    for bad, message in (("namespaces: []", "namespaces"), ("namespaces: [Team_A]", "not a Kubernetes namespace"),
                         ("namespaces: [a]\n    default_template: batch", "not a template"),
                         ("namespaces: [a]\n    partitions: [x]", "partitions")):
        config_file.write_text(f"kubernetes:\n  governance:\n    {bad}\n")
        with pytest.raises(ConfigError, match=message):
            build_readers(config_file, None, tmp_path)


# --- the remind step's marks: the Workload's annotation and an Event on each running pod -----------


class Cluster:
    """The recorded API server with the Workloads of team-a readable and patchable by name, its pods
    listable, and Events created (POST) into `events`, 409 for a name already there; `refuse`: the
    Status every Event creation is answered with instead."""

    def __init__(self, refuse: dict | None = None):
        self.objects = {w["metadata"]["name"]: w for w in fixture("governance-workloads-team-a.json")["items"]}
        self.events: dict[str, dict] = {}
        self.refuse = refuse
        base = f"{KUEUE}/namespaces/team-a/workloads"
        routes = api_routes({"/api/v1/namespaces/team-a/pods": fixture("governance-pods-team-a.json")})
        for name in ("job-train-llm-5b7c1", "job-resumed-9a1b2"):
            routes[("GET", f"{base}/{name}")] = routes[("PATCH", f"{base}/{name}")] = self._workload(name)
        routes[("POST", "/api/v1/namespaces/team-a/events")] = self._event
        self.server_routes = routes
        self.server = RecordedApiServer(routes)

    def _workload(self, name: str):
        def answer(query, body):
            obj = self.objects[name]
            if body is not None:
                notes = (body.get("metadata") or {}).get("annotations") or {}
                obj["metadata"].setdefault("annotations", {}).update(notes)
            return 200, obj
        return answer

    def _event(self, query, body):
        if self.refuse is not None:
            return self.refuse["code"], self.refuse
        name = body["metadata"]["name"]
        if name in self.events:
            return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists",
                         "message": f'events "{name}" already exists'}
        self.events[name] = body
        return 201, body

    def posts(self) -> list[tuple[str, dict]]:
        return [(path, body) for method, path, _, _, body in self.server.requests if method == "POST"]


@pytest.fixture
def cluster():
    cluster = Cluster()
    yield cluster
    cluster.server.close()


def kueue_enforcer(tmp_path: Path, url: str) -> KueueEnforcer:
    return KueueEnforcer(ActionLedger(tmp_path / "kueue-ledger.db", tmp_path / "landing", "kueue"),
                         KubernetesConfig(api_server=url, token="t0ken"))


REMIND = Action(
    ActionKind.REMIND, "idle-allocation:f1:0:remind", TRAIN, "governance-bot",
    reason="GPU activity 0% over the last 45 min on 2 of 6 GPUs (threshold 5%, window 30 min); "
           "reclaim in 1 h unless it is used",
    policy="idle-allocation", policy_version="1",
    evidence={"gpus": [{"host": "gpu-node-1", "gpu": 0, "idle_minutes": 45},
                       {"host": "gpu-node-1", "gpu": 1, "idle_minutes": 45}],
              "gpus_held": 6, "next_step": {"action": "reclaim", "after_s": 3600}},
)


def test_remind_annotates_the_workload_and_records_an_event_on_each_running_pod(cluster, tmp_path):
    enforcer = kueue_enforcer(tmp_path, cluster.server.url)
    dry = enforcer.apply(dataclasses.replace(REMIND, dry_run=True), NOW)
    assert dry.outcome == Outcome.DRY_RUN and cluster.posts() == []
    assert ("would annotate Workload team-a/job-train-llm-5b7c1 with gpupool.io/reminded-at and record an "
            "Event on its running pods (train-llm-0-h7x2k, train-llm-1-m4tns, train-llm-2-b8wqf)") in dry.reason

    result = enforcer.apply(REMIND, NOW)
    assert result.outcome == Outcome.APPLIED
    assert result.effects["reminded"] == "alice" and result.effects["namespace"] == "team-a"
    patches = [body for method, _, _, _, body in cluster.server.requests if method == "PATCH"]
    assert patches == [{"metadata": {"annotations": {
        "gpupool.io/reminded-at": "2024-03-22T12:00:00Z",
        "gpupool.io/reminder": REMIND.reason + " (policy idle-allocation 1)"}, "resourceVersion": "41200"}}]
    posts = cluster.posts()
    assert [path for path, _ in posts] == ["/api/v1/namespaces/team-a/events"] * 3  # the Failed pod gets none
    pods = {p["metadata"]["name"]: p for p in fixture("governance-pods-team-a.json")["items"]}
    message = ("Workload team-a/job-train-llm-5b7c1: idle GPUs gpu-node-1/0, gpu-node-1/1 (2 of the 6 it holds). "
               + REMIND.reason + " (policy idle-allocation 1)")
    for _, body in posts:
        pod = body["involvedObject"]["name"]
        assert body == {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": body["metadata"]["name"], "namespace": "team-a"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": "team-a",
                               "uid": pods[pod]["metadata"]["uid"]},
            "reason": EVENT_REASON, "message": message, "type": "Warning",
            "source": {"component": "gpupool-governance"}, "reportingComponent": "gpupool-governance",
            "reportingInstance": "gpupool-governance",
            "firstTimestamp": "2024-03-22T12:00:00Z", "lastTimestamp": "2024-03-22T12:00:00Z", "count": 1,
        }
        assert body["metadata"]["name"].startswith(f"{pod}.gpupool-")
    assert sorted(result.effects["events"]) == sorted(cluster.events)

    again = enforcer.apply(REMIND, NOW + dt.timedelta(minutes=1))
    assert again.outcome == Outcome.ALREADY_DONE and len(cluster.posts()) == 3  # no second Event
    # an apply whose answer was lost (a new ledger): the same Event names, answered 409, count as made
    lost = kueue_enforcer(tmp_path / "lost", cluster.server.url).apply(REMIND, NOW)
    assert lost.outcome == Outcome.APPLIED and sorted(lost.effects["events"]) == sorted(cluster.events)
    assert len(cluster.events) == 3 and "events_failed" not in lost.effects


def test_events_that_cannot_be_created_leave_the_annotation_and_say_so(tmp_path):
    cluster = Cluster(refuse={"kind": "Status", "code": 403, "reason": "Forbidden",
                              "message": 'events is forbidden: User "gpupool" cannot create resource "events"'})
    try:
        result = kueue_enforcer(tmp_path, cluster.server.url).apply(REMIND, NOW)
    finally:
        cluster.server.close()
    assert result.outcome == Outcome.APPLIED and result.effects["events"] == []
    assert set(result.effects["events_failed"]) == {"train-llm-0-h7x2k", "train-llm-1-m4tns", "train-llm-2-b8wqf"}
    assert "Event on pod train-llm-0-h7x2k not created: HTTP 403 Forbidden: events is forbidden" in result.reason
    annotations = cluster.objects["job-train-llm-5b7c1"]["metadata"]["annotations"]
    assert annotations["gpupool.io/reminded-at"] == "2024-03-22T12:00:00Z"


def test_a_remind_whose_pods_cannot_be_listed_annotates_and_says_so(tmp_path):
    cluster = Cluster()
    cluster.server.close()
    routes = {key: route for key, route in cluster.server_routes.items() if "pods" not in key[1]}
    cluster.server = RecordedApiServer(routes)
    overrun = dataclasses.replace(REMIND, evidence={"metric": "runtime_s"}, reason="run time 5 h, over 4 h")
    try:
        result = kueue_enforcer(tmp_path, cluster.server.url).apply(overrun, NOW)
    finally:
        cluster.server.close()
    assert result.outcome == Outcome.APPLIED and result.effects["events"] == [] and cluster.posts() == []
    assert result.reason == ("run time 5 h, over 4 h (policy idle-allocation 1); no Event on its pods: cannot list "
                             "the pods of namespace team-a: HTTP 404 Not Found: /api/v1/namespaces/team-a/pods "
                             "not found")
    assert cluster.objects["job-train-llm-5b7c1"]["metadata"]["annotations"]["gpupool.io/reminder"] == \
        "run time 5 h, over 4 h (policy idle-allocation 1)"


def test_an_event_without_idle_gpus_is_a_plain_reminder():
    workload = read_workload(fixture("governance-workloads-team-a.json")["items"][0])
    [pod], _ = read_pods([{"items": [fixture("governance-pods-team-a.json")["items"][0]]}], KubernetesConfig())
    overrun = dataclasses.replace(REMIND, evidence={"metric": "runtime_s"}, reason="run time 5 h, over 4 h")
    event = reminder_event(workload, pod, overrun, NOW)
    assert (event["reason"], event["message"]) == (
        "GpupoolReminder", "Workload team-a/job-train-llm-5b7c1: run time 5 h, over 4 h (policy idle-allocation 1)")
    long_pod = dataclasses.replace(pod, name="p" * 199 + "-x")
    assert len(reminder_event(workload, long_pod, REMIND, NOW)["metadata"]["name"]) == 199 + 25
    assert ".." not in reminder_event(workload, dataclasses.replace(pod, name="a" * 199 + ".b"), REMIND,
                                      NOW)["metadata"]["name"]


def test_a_tick_over_kueue_reminds_through_the_annotation_and_the_events(cluster, tmp_path):
    """Idle rounds for an hour on job-train-llm's GPUs: the tick reads Kueue, finds it idle, and the
    remind step goes out as the Workload's annotation and an Event on each of its running pods."""
    landing = tmp_path / "landing"
    for m in range(62, 0, -1):
        land_round(landing, NOW - dt.timedelta(minutes=m, seconds=-10), LABELLED, util=0.0)
    listings = RecordedApiServer(api_routes({path: fixture(name) for path, name in LISTINGS.items()}))
    reader = KueueWork(config(listings.url), landing, clock=lambda: NOW)
    outbox = Outbox(tmp_path / "outbox.db", landing)
    try:
        report = governance_tick(NOW, landing=landing, catalog=idle_catalog(), outbox=outbox, client=None,
                                 enforcers={"kueue": kueue_enforcer(tmp_path, cluster.server.url)},
                                 lookback=dt.timedelta(minutes=60), work=[reader])
        rows = outbox.rows()
    finally:
        outbox.close()
        listings.close()
    assert not report.errors and report.running_by_source == {"kueue": 2}
    assert sorted(report.findings.select("source", "job_id").iter_rows()) == [
        ("kueue", RESUMED), ("kueue", TRAIN)]
    reminds = {r["job_id"]: r for r in rows if r["action"] == StepAction.REMIND.value}
    assert set(reminds) == {TRAIN, RESUMED}
    assert {r["outcome"] for r in reminds.values()} == {Outcome.APPLIED.value}
    assert sorted(b["involvedObject"]["name"] for _, b in cluster.posts()) == [
        "resumed-p8r3t", "train-llm-0-h7x2k", "train-llm-1-m4tns", "train-llm-2-b8wqf"]
    assert cluster.objects["job-resumed-9a1b2"]["metadata"]["annotations"]["gpupool.io/reminded-at"] == \
        "2024-03-22T12:00:00Z"


def test_a_dry_run_over_kueue_lists_the_workloads_and_only_reads(tmp_path):
    landing = tmp_path / "landing"
    for m in range(62, 0, -1):
        land_round(landing, NOW - dt.timedelta(minutes=m, seconds=-10), LABELLED, util=0.0)
    server = RecordedApiServer(api_routes({path: fixture(name) for path, name in LISTINGS.items()}))
    try:
        result = dry_run(NOW, landing=landing, catalog=idle_catalog(),
                         readers=[KueueWork(config(server.url), landing, clock=lambda: NOW)],
                         outbox_path=tmp_path / "outbox.db", lookback=dt.timedelta(minutes=60))
    finally:
        server.close()
    jobs = {r["job_id"]: r for r in result.jobs.iter_rows(named=True)}
    assert set(jobs) == {TRAIN, RESUMED} and {r["source"] for r in jobs.values()} == {"kueue"}
    assert jobs[TRAIN]["slots"] == ("gpu-node-1/0, gpu-node-1/1, gpu-node-1/2, gpu-node-1/3, gpu-node-2/0, "
                                    "gpu-node-2/1")
    assert jobs[TRAIN]["now"] == "idle-allocation: remind queued"
    assert {method for method, *_ in server.requests} == {"GET"}  # listed, nothing else asked
    assert not (tmp_path / "outbox.db").exists()
