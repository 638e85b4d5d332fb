"""Kueue's running work for the governance tick: admitted Workloads and their running pods, in the
allocator API's job_view (see pipelines/governance/running.py), engine `kueue`.

`KueueWork.read` lists, in each namespace `kubernetes.governance.namespaces` names and nowhere else,
the Workloads (`kueue.x-k8s.io`, the version the connector uses) and the pods Kueue started (label
`kueue.x-k8s.io/podset`), through the Kueue connector's paged, bounded listing (one deadline for
both). A Workload runs when it is admitted (Admitted=True), active and not finished; its pods are
those `kueue_objects.workload_pods` names (Kueue's workload annotation, or the Workload's owner),
created since the admission, in phase Running. Mapping:

    job_id       <namespace>/<name> (what the Kueue enforcer targets and the ingest loads)
    attempt      evictions so far + 1 (`Workload.attempt`, as the ingest counts them)
    tenant       `kueue_objects.workload_tenant`: the tenant label, `tenant_by_namespace`, the namespace
    queue        the LocalQueue (spec.queueName) or, with queue_from: cluster_queue, the ClusterQueue
                 that admitted it
    user         the `user_label` label or annotation (gpupool.io/user)
    template     the `template_label` label or annotation (gpupool.io/template) when it names a template,
                 else `template_by_queue`, else `default_template`
    started_at   the PodsReady=True transition of this admission, else the admission (a Kueue without
                 PodsReady conditions: image pulls then count as idle time)
    expected_runtime_s, time_limit_s   spec.maximumExecutionTimeSeconds

Each pod's GPUs by index come from dcgm-exporter: run with Kubernetes mapping (its default in
NVIDIA's chart), it asks the kubelet's pod-resources API which pod holds each device and labels that
GPU's series with the pod and namespace; the scrape rounds the `dcgm_scrape` sensor lands keep those
labels (raw.dcgm_samples' k8s_pod, k8s_namespace), and `live.pod_gpus` reads them from the rounds of
the last `pod_gpu_lookback_s` (`ScrapeRoundPods`). A pool whose telemetry is Prometheus
(`governance.telemetry: prometheus`) reads the same labels from the series Prometheus holds at the
tick (`PrometheusPods`), so it needs no second scraper for this either. The kubelet's pod-resources API itself is a gRPC socket on each node,
which gpupool (running off the nodes) cannot reach; the exporter is already there, and the same
series carry the telemetry the policies judge, so the GPU and its activity come from one source.
The series' Hostname must be the node name (NVIDIA's chart sets NODE_NAME for that); a series naming
the pod on another node than its spec.nodeName is not used.

What cannot be read is skipped and counted in `RunningWork.skipped`, as the Slurm reader does: a
Workload or pod the API answers malformed, one outside the namespaces in scope (never read, but a
server could answer one), an admitted Workload without status.admission, a Running pod without
spec.nodeName. A GPU that no series names (the exporter not scraped yet, or not mapping pods) has
no index: it is counted, and a Workload with none indexed is still listed, without GPUs: it runs
(its open findings stay open), but nothing is judged on it until its GPUs are known. A listing
that fails (API server down, a refused token, an answer that is not a list) raises: the tick
then plans nothing for Kueue and says why.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import polars as pl

from allocator.model import TEMPLATES
from pipelines.clock import utc_naive
from pipelines.connectors.kubernetes import KubernetesConfig, KubernetesGovernance
from pipelines.connectors.kueue import KueueClient
from pipelines.connectors.prometheus import PrometheusClient, PrometheusConfig, PrometheusError
from pipelines.governance.live import ACTIVITY_METRICS, POD_SAMPLE, pod_gpus, pods_holding
from pipelines.governance.running import RunningWork, skip_reason
from pipelines.sources.jsonl import RecordError
from pipelines.sources.kueue import mig_fraction
from pipelines.sources.kueue_objects import (
    Pod,
    Workload,
    gpu_request,
    read_pods,
    read_workload,
    workload_pods,
    workload_tenant,
)
from pipelines.sources.labels import EXPORTER_CONTAINER_LABELS, INSTANCE_LABEL, LABEL_COLUMNS
from pipelines.sources.prometheus import AnswerRejected, vector_series

SOURCE = "kueue"
UNINDEXED = "GPUs of running pods that no dcgm-exporter series names (no GPU index)"


def _now() -> dt.datetime:
    return utc_naive(dt.datetime.now(dt.UTC))


def _rfc3339(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def kueue_template(w: Workload, queue: str, config: KubernetesConfig, scope: KubernetesGovernance) -> str | None:
    """The Workload's template: its template label (or annotation) when it names a template, else its
    queue's, else the default."""
    labelled = w.label(config.template_label)
    if labelled in TEMPLATES:
        return labelled
    return scope.template_by_queue.get(queue, scope.default_template)


def started_at(w: Workload) -> dt.datetime:
    """When the admitted Workload's attempt started: its pods ready (PodsReady=True since the admission),
    else the admission."""
    admitted = w.admitted
    ready = w.cond("PodsReady", true=True)
    return ready.at if ready is not None and ready.at >= admitted.at else admitted.at


def kueue_job_view(w: Workload, pods: Sequence[Pod], held: Mapping[tuple[str, str], list[dict]],
                   config: KubernetesConfig, scope: KubernetesGovernance) -> tuple[dict, int]:
    """One running Workload as a job_view dict, and how many of its running pods' GPUs have no index.
    `pods`: its running pods, each on a node; `held`: (namespace, pod) -> the GPU series naming it.
    RecordError when a field the policies need cannot be read."""
    if w.cluster_queue is None:
        raise RecordError("Workload Admitted without status.admission.clusterQueue")
    queue = w.queue if scope.queue_from == "local_queue" else w.cluster_queue
    if queue is None:
        raise RecordError("Workload without spec.queueName")
    request = gpu_request(w, config)
    gpus, unindexed = [], 0
    for pod in pods:
        series = [s for s in held.get((pod.namespace, pod.name), []) if s["host"] == pod.node]
        unindexed += max(sum(pod.gpus.values()) - len(series), 0)
        for s in series:
            profile = s["gpu_instance_profile"] if s["gpu_instance_id"] is not None else None
            gpus.append({"host": s["host"], "gpu": s["gpu"], "gpu_instance_id": s["gpu_instance_id"],
                         "gpu_instance_profile": profile,
                         "fraction": 1.0 if profile is None else mig_fraction(profile, request["gpu_model"])})
    view = {
        "job_id": w.job_id, "attempt": w.attempt, "tenant": workload_tenant(w, config), "queue": queue,
        "user": w.label(config.user_label), "state": "RUNNING", "started_at": _rfc3339(started_at(w)),
        "ended_at": None, "gpus": gpus,
        "spec": {"template": kueue_template(w, queue, config, scope), "gpu_model": request["gpu_model"],
                 "share_mode": request["share_mode"] or "whole", "expected_runtime_s": w.max_execution_s,
                 "time_limit_s": w.max_execution_s, "local_queue": w.queue, "cluster_queue": w.cluster_queue,
                 "priority_class": w.priority_class},
    }
    return view, unindexed


def _held(gpus: pl.DataFrame) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for row in gpus.iter_rows(named=True):
        out.setdefault((row["namespace"], row["pod"]), []).append(row)
    return out


def kueue_running_work(workloads: Mapping, pods: Mapping | None, gpus: pl.DataFrame,
                       config: KubernetesConfig) -> RunningWork:
    """A WorkloadList and a PodList (as the API lists them) and the pods' GPU series (`live.pod_gpus`)
    -> the running Workloads of the namespaces in scope as job_view dicts; what cannot be read is
    skipped and counted by reason. RecordError when the WorkloadList has no items list."""
    scope = config.governance
    if scope is None:
        raise ValueError("kubernetes.governance is not set: it names the namespaces governance reads")
    items = workloads.get("items")
    if not isinstance(items, list):
        raise RecordError("the WorkloadList has no 'items' list")
    namespaces = set(scope.namespaces)
    skipped: Counter = Counter()
    pod_list, problems = read_pods([pods] if pods is not None else [], config)
    skipped.update(skip_reason(f"pod unreadable: {p.split(': ', 1)[-1]}") for p in problems)
    running = []
    for pod in pod_list:
        if pod.namespace not in namespaces:
            skipped["pod outside the namespaces in scope"] += 1
        elif pod.phase == "Running" and pod.node is None:
            skipped["Running pod without spec.nodeName"] += 1
        elif pod.phase == "Running":
            running.append(pod)
    held = _held(gpus)
    jobs = []
    for item in items:
        try:
            w = read_workload(item, config)
        except RecordError as error:
            skipped[skip_reason(f"Workload unreadable: {error}")] += 1
            continue
        if w.namespace not in namespaces:
            skipped["Workload outside the namespaces in scope"] += 1
            continue
        if w.admitted is None or w.finished is not None or not w.active:
            continue  # queued, ended, or deactivated (being stopped): not running work
        try:
            view, unindexed = kueue_job_view(w, workload_pods(w, running, since=w.admitted.at), held, config, scope)
        except RecordError as error:
            skipped[skip_reason(str(error))] += 1
            continue
        if unindexed:
            skipped[UNINDEXED] += unindexed
        jobs.append(view)
    return RunningWork(SOURCE, jobs, [], skipped)


class PodGpus(Protocol):
    """Which pod holds each GPU now (live.POD_GPU_SCHEMA), as dcgm-exporter's pod labels say."""

    def read(self, now: dt.datetime, lookback: dt.timedelta) -> pl.DataFrame: ...


class ScrapeRoundPods:
    """The pod labels of the scrape rounds the `dcgm_scrape` sensor lands in `landing` (`live.pod_gpus`)."""

    def __init__(self, landing: Path):
        self.landing = Path(landing)

    def read(self, now: dt.datetime, lookback: dt.timedelta) -> pl.DataFrame:
        return pod_gpus(self.landing, now, lookback)


# the labels a series' GPU and pod are read from (pipelines/sources/labels.py), all others aggregated away
POD_QUERY_LABELS = tuple(dict.fromkeys(
    label for column in ("host", "gpu", "gpu_instance_id", "gpu_instance_profile", "k8s_namespace", "k8s_pod",
                         "k8s_container") for label in LABEL_COLUMNS[column]
)) + (INSTANCE_LABEL, *(c for c in EXPORTER_CONTAINER_LABELS if c not in LABEL_COLUMNS["k8s_container"]))
POD_SEEN_METRIC = "gpupool_pod_seen_at"  # the answer's series name: its value is a sample's time


class PrometheusPods:
    """The pod labels of the dcgm-exporter series Prometheus holds at the tick: one instant query,
    each label set's latest sample time (`timestamp()` of the activity series, the first of
    ACTIVITY_METRICS a label set has), reduced to the labels that name a GPU and a pod. Prometheus
    marks a series stale as soon as the exporter stops reporting it (the pod ended, or moved to
    another GPU), so only the current holders answer; samples older than the lookback are left out as
    the rounds' are. The label sets go through the scrape's own mapping (`vector_series`); one
    without a host or a GPU names no GPU (the telemetry read counts the same series as skipped)."""

    def __init__(self, config: PrometheusConfig, client: PrometheusClient | None = None):
        self.config = config
        self.client = client or PrometheusClient(config)

    def query(self) -> str:
        selector = "{" + self.config.selector + "}" if self.config.selector else ""
        latest = " or ".join(f"timestamp({metric}{selector})" for metric in ACTIVITY_METRICS)
        return (f'label_replace(max by ({", ".join(POD_QUERY_LABELS)}) ({latest}), '
                f'"__name__", "{POD_SEEN_METRIC}", "", "")')

    def read(self, now: dt.datetime, lookback: dt.timedelta) -> pl.DataFrame:
        at = now - dt.timedelta(milliseconds=1)
        body = self.client.query(self.query(), (at - dt.datetime(1970, 1, 1)).total_seconds())
        try:
            series, _ = vector_series(body, f"prometheus:{self.config.url} pods at {at:%Y-%m-%dT%H:%M:%S}")
        except AnswerRejected as exc:
            raise PrometheusError(f"{self.config.url}: unreadable answer to the pods query: {exc}") from None
        seen = pl.from_epoch((pl.col("value") * 1000).round().cast(pl.Int64), time_unit="ms").cast(pl.Datetime("us"))
        samples = (series.lazy()
                   .with_columns(sampled_at=seen)
                   .select(list(POD_SAMPLE)).cast(POD_SAMPLE)
                   .filter(pl.col("sampled_at") >= now - lookback, pl.col("sampled_at") < now))
        return pods_holding(samples)

    def close(self) -> None:
        self.client.close()


class KueueWork:
    """Kueue's admitted Workloads and their running pods, in `kubernetes.governance`'s namespaces only;
    the pods' GPUs from `pods` (default: the scrape rounds in `landing`). The API client is made at the
    first read, so a cluster that cannot be reached (no kubeconfig, say) is reported by the tick, not
    raised at wiring."""

    source = SOURCE

    def __init__(self, config: KubernetesConfig, landing: Path, *, pods: PodGpus | None = None,
                 clock: Callable[[], dt.datetime] = _now):
        if config.governance is None:
            raise ValueError("kubernetes.governance is not set: it names the namespaces governance reads")
        # the connector's listing, per namespace in scope (it lists the cluster only when given none)
        self.config = config.model_copy(update={"namespaces": list(config.governance.namespaces)})
        self.scope = config.governance
        self.pods = pods or ScrapeRoundPods(landing)
        self.clock = clock
        self._client: KueueClient | None = None

    @property
    def client(self) -> KueueClient:
        if self._client is None:
            self._client = KueueClient.from_config(self.config)
        return self._client

    def read(self) -> RunningWork:
        now = utc_naive(self.clock())
        snapshot = self.client.snapshot(now.date())
        held = self.pods.read(now, dt.timedelta(seconds=self.scope.pod_gpu_lookback_s))
        return kueue_running_work(snapshot.workloads, snapshot.pods, held, self.config)
