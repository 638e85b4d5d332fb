"""Parser for Kueue Workloads, as the Kubernetes API lists them → raw.job_events (+ raw.job_gpus).

Input: a `WorkloadList` JSON document (`GET /apis/kueue.x-k8s.io/<v1beta1|v1beta2>/workloads`;
also `kubectl get workloads -A -o json`, a `List`, or one `Workload`). A record is one Workload
(its line_number is its 1-based index in `items`). A day file written by the connector may hold
the same Workload more than once, one copy per attempt-state it was seen in (`attempt_state`):
their events are merged, an event seen in several copies keeps the copy that saw it directly
(not inferred), else the latest. Pods (`PodList` documents, read by `parse_kueue_file` from the
folder's `pods*.json`) only tell which nodes an attempt ran on; they are not records.

A Workload's status keeps only the latest transition of each condition, so one object shows at
most: its creation, the current attempt's admission, start and end, and the end of the previous
attempt. Event ids are deterministic (`kueue:<namespace>/<name>:<uid[:8]>:<attempt>:<type>`), so
the snapshots of several days add up to the history and repeat nothing (staging keeps the latest
delivery of each id). job_id is `<namespace>/<name>` of the Workload (what enforcement targets).

Mapping:
- submit (attempt 1) at metadata.creationTimestamp; tenant = the `tenant_label` label when
  configured and present, else the namespace; queue = spec.queueName (the LocalQueue); priority
  = spec.priority; job_name = the owner (the Job) else the Workload's name; template and user from
  the configured labels (or annotations); GPUs = Σ over podSets of count × the pod's GPUs
  (`nvidia.com/gpu`, or `nvidia.com/mig-<profile>` instances: share_mode mig); gpu_model from the
  admission's flavor for the GPU resource (`flavor_gpu_models`, else the GPU family in the flavor's
  name), else the podSet's `nvidia.com/gpu.product` node selector. A submit whose attempt is still
  waiting says why in `reason` (QuotaReserved False: Pending / Inadmissible with Kueue's message;
  admission checks pending; no attempt yet).
- Attempts: E = evictions so far = max(Σ status.schedulingStats.evictions[].count,
  status.requeueState.count, 1 if an Evicted condition exists); the current attempt is E + 1.
- admit at the Admitted=True transition; start at PodsReady=True; finish at Finished=True
  (Succeeded → COMPLETED, Failed → FAILED, other reasons → CANCELLED).
- Evicted=True (evicted, not re-admitted): the eviction ends attempt E at its transition time:
  `preempt` for reason Preempted (with the Preempted condition's reason, e.g. InClusterQueue),
  `requeue` for the other reasons (PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped, ...);
  a deactivation (reason Deactivated, or InactiveWorkload before Kueue 0.10) is a `finish`:
  TIMEOUT when the cause is MaximumExecutionTimeExceeded, FAILED for RequeuingLimitExceeded,
  else CANCELLED. PodsReady/Admitted transitions before the eviction belong to attempt E.
- Re-admitted after an eviction (Evicted=False, "Previously: ..."): the eviction time is no longer
  in the status; attempt E ends at the Requeued=True transition (when Kueue put it back in the
  queue), else at the new quota reservation, with a reason that says so. The same event id as the
  direct observation: an earlier snapshot that saw the eviction itself wins within a file.
- spec.active=false without a deactivation eviction (deactivated while queued): `finish`
  CANCELLED at the latest condition transition.

job_gpus, for an attempt with a start: one row per GPU (or MIG instance) on the node its pod ran
on: from the Pods of the Workload (annotation `kueue.x-k8s.io/workload`, or the same owner as the
Workload), created within the attempt, at most the admitted count per podSet (running pods
first); else from a Topology-Aware-Scheduling assignment at the `kubernetes.io/hostname` level.
gpu is null (Kubernetes does not say which device index a pod got). GPUs with no known node give
no row and are counted in the notes.

Quarantined: a document that is not JSON or not a WorkloadList; an item that is not an object,
of another kind or API group, without namespace, name, uid or creationTimestamp, without
podSets, with a GPU quantity that is not a whole number, or a condition without type, status or
a valid lastTransitionTime.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from pathlib import Path

import polars as pl
from pydantic import BaseModel, Field

from pipelines.config import section
from pipelines.contracts import contract
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import (
    Columns,
    DocumentError,
    RecordError,
    Rejects,
    compact_json,
    decode_document,
    json_type,
    load_json_document,
    parse_rfc3339,
)

SOURCE = "kueue"
GROUP = "kueue.x-k8s.io"
CONFIG_SECTION = "kubernetes"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # set by Kueue on the pods it starts (0.9+)
PODSET_LABEL = "kueue.x-k8s.io/podset"
HOSTNAME_LEVEL = "kubernetes.io/hostname"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's node label
TEMPLATES = ("training", "inference", "experiment", "interactive")
DEACTIVATION_REASONS = ("Deactivated", "InactiveWorkload")
RAW_LIMIT = 2000
MAX_DEVICES = 1024  # per container: more than any node has

_GPU_FAMILY = re.compile(
    r"gh200|gb200|b200|b100|h200|h100|h800|a800|a100|a40|a30|a16|a10g|a10|l40s|l40|l4|v100|t4|p100|p40|"
    r"mi300x|mi250x|mi250|mi210|mi100|rtx_?a?\d{4}"
)
_MIG_SLICES = re.compile(r"^(\d+)g\.")
_MIG_COMPUTE_SLICES = {"A30": 4}  # A100 and H100 have 7


class KueueMapping(BaseModel):
    """How Workloads map to the job tables: the mapping part of the `kubernetes:` config section."""

    tenant_label: str | None = Field(
        None, description="Workload label naming the tenant; default the namespace"
    )
    template_label: str | None = Field(
        "gpupool.io/template", description="label (or annotation) with the template"
    )
    user_label: str | None = Field(
        "gpupool.io/user", description="label (or annotation) with the submitting user"
    )
    flavor_gpu_models: dict[str, str] = Field(
        default_factory=dict, description="ResourceFlavor name → canonical GPU model (H100, A100, ...)"
    )
    gpu_resource: str = "nvidia.com/gpu"
    mig_resource_prefix: str = "nvidia.com/mig-"


def load_mapping(path: Path | None = None) -> KueueMapping:
    """The mapping fields of the `kubernetes:` section of the configuration file (defaults without one)."""
    return section(CONFIG_SECTION, KueueMapping, path) or KueueMapping()


def gpu_model_from(text: str | None) -> str | None:
    """The canonical GPU model named in a flavor name or product label (`a100-80gb` → A100), or None."""
    if not text:
        return None
    found = _GPU_FAMILY.search(text.lower())
    return found.group(0).replace("_", "").upper() if found else None


# --- reading objects ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    at: datetime

    @property
    def true(self) -> bool:
        return self.status == "True"

    def text(self) -> str:
        return f"{self.reason}: {self.message}" if self.message else self.reason


def _obj(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise RecordError(f"{where} is {json_type(value)}, expected a JSON object")
    return value


def _opt_obj(parent: Mapping, key: str, where: str) -> dict:
    value = parent.get(key)
    return {} if value is None else _obj(value, f"{where}{key}")


def _list(parent: Mapping, key: str, where: str) -> list:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecordError(f"field '{where}{key}' is {json_type(value)}, expected array")
    return value


def _str(parent: Mapping, key: str, where: str, *, required: bool = False) -> str | None:
    value = parent.get(key)
    if value is None or value == "":
        if required:
            raise RecordError(f"field '{where}{key}' is {'empty' if value == '' else 'missing'}")
        return None
    if not isinstance(value, str):
        raise RecordError(f"field '{where}{key}' is {json_type(value)}, expected string")
    return value


def _int(parent: Mapping, key: str, where: str) -> int | None:
    value = parent.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"field '{where}{key}' is {json_type(value)}, expected integer")
    if not -(2**31) <= value < 2**31:
        raise RecordError(f"field '{where}{key}' is {value}, out of range for a 32-bit integer")
    return value


def _time(parent: Mapping, key: str, where: str, *, required: bool = False) -> datetime | None:
    text = _str(parent, key, where, required=required)
    return None if text is None else parse_rfc3339(text, f"{where}{key}")


def _whole(value: object, name: str) -> int:
    """A Kubernetes quantity of a device resource: a whole number (`2` or `"2"`), at most MAX_DEVICES
    (no node holds more; a larger count would make as many job_gpus rows)."""
    if isinstance(value, str) and value.isascii() and value.isdigit():  # isdigit alone accepts '²'
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        if value > MAX_DEVICES:
            raise RecordError(f"resource {name} is {value}, more devices than a node holds (at most {MAX_DEVICES})")
        return value
    raise RecordError(f"resource {name} is {compact_json(value)}, expected a whole number of devices")


def _conditions(status: Mapping) -> dict[str, Condition]:
    out: dict[str, Condition] = {}
    for index, item in enumerate(_list(status, "conditions", "status.")):
        where = f"status.conditions[{index}]."
        cond = _obj(item, f"status.conditions[{index}]")
        kind = _str(cond, "type", where, required=True)
        state = _str(cond, "status", where, required=True)
        if state not in ("True", "False", "Unknown"):
            raise RecordError(f"field '{where}status' is {state!r}, expected True, False or Unknown")
        out[kind] = Condition(
            kind,
            state,
            _str(cond, "reason", where) or "",
            _str(cond, "message", where) or "",
            _time(cond, "lastTransitionTime", where, required=True),
        )
    return out


def _gpus_of(pod_spec: Mapping, mapping: KueueMapping, where: str) -> dict[str, int]:
    """GPU devices one pod needs, by resource name: Σ containers, or the largest init container if more."""

    def per_container(key: str) -> list[dict[str, int]]:
        out = []
        for index, item in enumerate(_list(pod_spec, key, where)):
            at = f"{where}{key}[{index}].resources."
            resources = _opt_obj(_obj(item, f"{where}{key}[{index}]"), "resources", f"{where}{key}[{index}].")
            requests = _opt_obj(resources, "requests", at)
            limits = _opt_obj(resources, "limits", at)  # device requests default to their limits
            counts = {}
            for name in {**limits, **requests}:
                if name == mapping.gpu_resource or name.startswith(mapping.mig_resource_prefix):
                    counts[name] = _whole(requests.get(name, limits.get(name)), f"{at}{name}")
            out.append(counts)
        return out

    total: dict[str, int] = {}
    for counts in per_container("containers"):
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
    for counts in per_container("initContainers"):
        for name, n in counts.items():
            total[name] = max(total.get(name, 0), n)
    return {name: n for name, n in total.items() if n > 0}


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int  # pods
    gpus: dict[str, int]  # per pod, by resource
    node_selector: dict


@dataclass(frozen=True)
class Assignment:
    count: int | None
    flavors: dict[str, str]
    hosts: tuple[tuple[str, int], ...]  # (node, pods) from a hostname-level topology assignment


@dataclass(frozen=True)
class Workload:
    """What the parser and the enforcer read from a Workload object."""

    namespace: str
    name: str
    uid: str
    created_at: datetime
    labels: dict
    annotations: dict
    owner_uids: frozenset[str]
    owner_name: str | None
    queue: str | None
    priority: int | None
    priority_class: str | None
    active: bool
    max_execution_s: int | None
    pod_sets: tuple[PodSet, ...]
    conditions: dict[str, Condition]
    cluster_queue: str | None
    assignments: dict[str, Assignment]
    admission_checks: tuple[tuple[str, str], ...]
    evictions: int
    requeue_at: datetime | None
    past_admitted_s: int
    stats_causes: tuple[str, ...]
    resource_version: str | None

    @property
    def job_id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def cond(self, kind: str, *, true: bool | None = None) -> Condition | None:
        found = self.conditions.get(kind)
        if found is None or (true is not None and found.true != true):
            return None
        return found

    @property
    def evicted(self) -> Condition | None:
        return self.cond("Evicted", true=True)

    @property
    def finished(self) -> Condition | None:
        return self.cond("Finished", true=True)

    @property
    def admitted(self) -> Condition | None:
        return self.cond("Admitted", true=True)

    @property
    def quota_reserved(self) -> Condition | None:
        return self.cond("QuotaReserved", true=True)

    @property
    def attempt(self) -> int:
        """The current attempt: evictions so far + 1."""
        return self.evictions + 1

    def label(self, key: str | None) -> str | None:
        if not key:
            return None
        value = self.labels.get(key, self.annotations.get(key))
        return value if isinstance(value, str) and value else None


def read_workload(item: object, mapping: KueueMapping | None = None) -> Workload:
    """One Workload object → `Workload`; RecordError names what is wrong."""
    mapping = mapping or KueueMapping()
    obj = _obj(item, "item")
    kind = obj.get("kind")
    if kind is not None and kind != "Workload":
        raise RecordError(f"kind is {kind!r}, expected 'Workload'")
    api_version = obj.get("apiVersion")
    if api_version is not None and not (isinstance(api_version, str) and api_version.startswith(f"{GROUP}/")):
        raise RecordError(f"apiVersion is {api_version!r}, expected {GROUP}/v1beta1 or v1beta2")
    meta = _opt_obj(obj, "metadata", "")
    spec = _opt_obj(obj, "spec", "")
    status = _opt_obj(obj, "status", "")
    owners = [
        _obj(o, f"metadata.ownerReferences[{i}]")
        for i, o in enumerate(_list(meta, "ownerReferences", "metadata."))
    ]
    controller = next((o for o in owners if o.get("controller") is True), owners[0] if owners else None)
    pod_sets = []
    raw_sets = _list(spec, "podSets", "spec.")
    if not raw_sets:
        raise RecordError("field 'spec.podSets' is missing or empty")
    for index, item_set in enumerate(raw_sets):
        where = f"spec.podSets[{index}]."
        ps = _obj(item_set, f"spec.podSets[{index}]")
        template = _opt_obj(ps, "template", where)
        pod_spec = _opt_obj(template, "spec", f"{where}template.")
        count = _int(ps, "count", where)
        if count is None or count < 0:
            raise RecordError(f"field '{where}count' is {ps.get('count')!r}, expected a count >= 0")
        pod_sets.append(
            PodSet(
                _str(ps, "name", where) or "main",
                count,
                _gpus_of(pod_spec, mapping, f"{where}template.spec."),
                _opt_obj(pod_spec, "nodeSelector", f"{where}template.spec."),
            )
        )
    admission = _opt_obj(status, "admission", "status.")
    assignments = {}
    for index, item_psa in enumerate(_list(admission, "podSetAssignments", "status.admission.")):
        where = f"status.admission.podSetAssignments[{index}]."
        psa = _obj(item_psa, f"status.admission.podSetAssignments[{index}]")
        flavors = {str(k): str(v) for k, v in _opt_obj(psa, "flavors", where).items()}
        assignments[_str(psa, "name", where) or "main"] = Assignment(
            _int(psa, "count", where),
            flavors,
            _hostname_domains(_opt_obj(psa, "topologyAssignment", where), where),
        )
    checks = tuple(
        (str(c.get("name")), str(c.get("state")))
        for c in (_obj(x, "status.admissionChecks[]") for x in _list(status, "admissionChecks", "status."))
    )
    requeue = _opt_obj(status, "requeueState", "status.")
    stats = _list(_opt_obj(status, "schedulingStats", "status."), "evictions", "status.schedulingStats.")
    stat_count, causes = 0, []
    for index, entry in enumerate(stats):
        where = f"status.schedulingStats.evictions[{index}]."
        ev = _obj(entry, f"status.schedulingStats.evictions[{index}]")
        stat_count += _int(ev, "count", where) or 0
        causes += [c for c in (_str(ev, "reason", where), _str(ev, "underlyingCause", where)) if c]
    conditions = _conditions(status)
    active = spec.get("active")
    if active is not None and not isinstance(active, bool):
        raise RecordError(f"field 'spec.active' is {json_type(active)}, expected boolean")
    evictions = max(stat_count, _int(requeue, "count", "status.requeueState.") or 0, 1 if "Evicted" in conditions else 0)
    if evictions >= 2**31 - 1:  # the current attempt is evictions + 1, an INTEGER column
        raise RecordError(f"{evictions} evictions: the attempt number is out of range for a 32-bit integer")
    return Workload(
        namespace=_str(meta, "namespace", "metadata.", required=True),
        name=_str(meta, "name", "metadata.", required=True),
        uid=_str(meta, "uid", "metadata.", required=True),
        created_at=_time(meta, "creationTimestamp", "metadata.", required=True),
        labels=_opt_obj(meta, "labels", "metadata."),
        annotations=_opt_obj(meta, "annotations", "metadata."),
        owner_uids=frozenset(str(o["uid"]) for o in owners if o.get("uid")),
        owner_name=str(controller["name"]) if controller and controller.get("name") else None,
        queue=_str(spec, "queueName", "spec."),
        priority=_int(spec, "priority", "spec."),
        priority_class=_str(spec, "priorityClassName", "spec."),
        active=active is not False,
        max_execution_s=_int(spec, "maximumExecutionTimeSeconds", "spec."),
        pod_sets=tuple(pod_sets),
        conditions=conditions,
        cluster_queue=_str(admission, "clusterQueue", "status.admission."),
        assignments=assignments,
        admission_checks=checks,
        evictions=evictions,
        requeue_at=_time(requeue, "requeueAt", "status.requeueState."),
        past_admitted_s=_int(status, "accumulatedPastExexcutionTimeSeconds", "status.") or 0,
        stats_causes=tuple(causes),
        resource_version=_str(meta, "resourceVersion", "metadata."),
    )


def _hostname_domains(topology: Mapping, where: str) -> tuple[tuple[str, int], ...]:
    levels = _list(topology, "levels", f"{where}topologyAssignment.")
    if not levels or levels[-1] != HOSTNAME_LEVEL:
        return ()
    out = []
    for index, item in enumerate(_list(topology, "domains", f"{where}topologyAssignment.")):
        at = f"{where}topologyAssignment.domains[{index}]."
        domain = _obj(item, at.rstrip("."))
        values = _list(domain, "values", at)
        count = _int(domain, "count", at)
        if not values or not isinstance(values[-1], str) or count is None or count < 0:
            raise RecordError(
                f"{at.rstrip('.')} is {compact_json(domain)[:120]}, expected values and a count"
            )
        out.append((values[-1], count))
    return tuple(out)


def attempt_state(item: object) -> tuple[str | None, int, bool]:
    """(uid, evictions, evicted now): the connector keeps one copy of a Workload per such state a day.
    An unreadable Workload gives (its uid or None, -1, False): one copy, the latest."""
    try:
        w = read_workload(item)
    except RecordError:
        meta = item.get("metadata") if isinstance(item, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        return (uid if isinstance(uid, str) and uid else None), -1, False
    return w.uid, w.evictions, w.evicted is not None


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    created_at: datetime
    node: str | None
    phase: str
    workload: str | None
    pod_set: str | None
    owner_uids: frozenset[str]
    gpus: dict[str, int]


def read_pods(docs: Iterable[object], mapping: KueueMapping) -> tuple[list[Pod], list[str]]:
    """The pods of PodList documents (deduplicated by uid, the last copy kept) and what could not be read."""
    pods: dict[str, Pod] = {}
    problems: list[str] = []
    for doc in docs:
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            problems.append(
                str(doc.get("unreadable"))
                if isinstance(doc, dict) and doc.get("unreadable")
                else "a pods document is not a PodList (no 'items' list)"
            )
            continue
        for index, item in enumerate(items):
            try:
                pod = _read_pod(item, mapping)
            except RecordError as error:
                problems.append(f"pod items[{index}]: {error}")
                continue
            pods[pod.uid] = pod
    return list(pods.values()), problems


def _read_pod(item: object, mapping: KueueMapping) -> Pod:
    obj = _obj(item, "pod")
    meta = _opt_obj(obj, "metadata", "")
    spec = _opt_obj(obj, "spec", "")
    status = _opt_obj(obj, "status", "")
    owners = [_obj(o, "metadata.ownerReferences[]") for o in _list(meta, "ownerReferences", "metadata.")]
    annotations = _opt_obj(meta, "annotations", "metadata.")
    labels = _opt_obj(meta, "labels", "metadata.")
    return Pod(
        namespace=_str(meta, "namespace", "metadata.", required=True),
        name=_str(meta, "name", "metadata.", required=True),
        uid=_str(meta, "uid", "metadata.", required=True),
        created_at=_time(meta, "creationTimestamp", "metadata.", required=True),
        node=_str(spec, "nodeName", "spec."),
        phase=_str(status, "phase", "status.") or "Unknown",
        workload=annotations.get(WORKLOAD_ANNOTATION)
        if isinstance(annotations.get(WORKLOAD_ANNOTATION), str)
        else None,
        pod_set=labels.get(PODSET_LABEL) if isinstance(labels.get(PODSET_LABEL), str) else None,
        owner_uids=frozenset(str(o["uid"]) for o in owners if o.get("uid")),
        gpus=_gpus_of(spec, mapping, "spec."),
    )


# --- events ------------------------------------------------------------------------------------


@dataclass
class _Attempt:
    number: int
    admit: Condition | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None


@dataclass
class _Out:
    events: list[dict] = field(default_factory=list)
    placements: list[dict] = field(default_factory=list)
    unplaced_gpus: int = 0
    bad_template: int = 0


def gpu_request(w: Workload, mapping: KueueMapping) -> dict:
    """gpus_requested, share_mode, mig_profile and gpu_model of a Workload (admitted counts where known)."""
    whole, mig = 0, {}
    for ps in w.pod_sets:
        count = (
            w.assignments[ps.name].count
            if ps.name in w.assignments and w.assignments[ps.name].count is not None
            else ps.count
        )
        for name, n in ps.gpus.items():
            if name == mapping.gpu_resource:
                whole += count * n
            else:
                profile = name.removeprefix(mapping.mig_resource_prefix)
                mig[profile] = mig.get(profile, 0) + count * n
    if whole:
        mode, gpus, profile = "whole", whole, None
    elif mig:
        profile = max(mig, key=lambda p: mig[p])
        mode, gpus = "mig", sum(mig.values())
    else:
        mode, gpus, profile = None, 0, None
    if gpus > 2**31 - 1:
        raise RecordError(f"GPUs requested ({gpus}) out of range for a 32-bit integer")
    return {
        "gpus_requested": gpus,
        "share_mode": mode,
        "mig_profile": profile,
        "gpu_model": _model(w, mapping),
    }


def _flavor_model(flavor: str | None, mapping: KueueMapping) -> str | None:
    if not flavor:
        return None
    return mapping.flavor_gpu_models.get(flavor) or gpu_model_from(flavor)


def _model(w: Workload, mapping: KueueMapping) -> str | None:
    for ps in w.pod_sets:
        assignment = w.assignments.get(ps.name)
        for name in ps.gpus:
            model = _flavor_model(assignment.flavors.get(name) if assignment else None, mapping)
            if model:
                return model
    for ps in w.pod_sets:
        if ps.gpus:
            model = gpu_model_from(str(ps.node_selector.get(GPU_PRODUCT_LABEL) or ""))
            if model:
                return model
    return None


def _waiting(w: Workload) -> str:
    reserved = w.cond("QuotaReserved")
    if reserved is not None and not reserved.true:
        return reserved.text()
    if reserved is not None and w.admission_checks:
        pending = ", ".join(f"{name} {state}" for name, state in w.admission_checks if state != "Ready")
        return f"quota reserved in ClusterQueue {w.cluster_queue}; waiting for admission checks: {pending}"
    return "no admission attempt yet (not at the head of its ClusterQueue, or Kueue has not seen it)"


def _eviction_kind(reason: str, message: str) -> str:
    """preempt, requeue or finish (deactivation) for an eviction's reason (or 'Previously:' message)."""
    if reason in DEACTIVATION_REASONS:
        return "finish"
    if reason == "Preempted" or message.startswith("Preempted"):
        return "preempt"
    return "requeue"


def _deactivation_state(w: Workload, evicted: Condition | None) -> str:
    target = w.cond("DeactivationTarget")
    texts = " ".join(
        [evicted.text() if evicted else "", target.text() if target else "", *w.stats_causes]
    ).lower()
    if "maximumexecutiontimeexceeded" in texts or "maximum execution time" in texts:
        return "TIMEOUT"
    if "requeuinglimitexceeded" in texts or "requeuing limit" in texts:
        return "FAILED"
    return "CANCELLED"


def workload_rows(w: Workload, mapping: KueueMapping, pods: Sequence[Pod] = ()) -> _Out:
    """The job_events rows (with an `_exact` flag: seen directly, not inferred) and job_gpus rows of
    one Workload."""
    out = _Out()
    gpus = gpu_request(w, mapping)
    template = w.label(mapping.template_label)
    if template is not None and template not in TEMPLATES:
        out.bad_template += 1
        template = None
    spec = {
        "cluster_queue": w.cluster_queue,
        "priority_class": w.priority_class,
        "time_limit_s": w.max_execution_s,
        "owner": w.owner_name,
    }
    spec = {k: v for k, v in spec.items() if v is not None}
    common = {
        "job_id": w.job_id,
        "tenant": w.label(mapping.tenant_label) or w.namespace,
        "queue": w.queue,
        "user_name": w.label(mapping.user_label),
        "job_name": w.owner_name or w.name,
        "template": template,
        "priority": w.priority,
        "spec_json": compact_json(spec) if spec else None,
    }
    prefix = f"kueue:{w.job_id}:{w.uid[:8]}"

    def add(
        kind: str,
        attempt: int,
        at: datetime,
        state: str,
        reason: str | None,
        *,
        exact: bool = True,
        with_gpus: bool = False,
    ) -> None:
        row = {
            **common,
            "event_id": f"{prefix}:{attempt}:{kind}",
            "occurred_at": at,
            "event_type": kind,
            "attempt": attempt,
            "state": state,
            "reason": reason,
            "exit_code": None,
            "_exact": exact,
            **(
                gpus
                if with_gpus
                else {"gpus_requested": None, "share_mode": None, "mig_profile": None, "gpu_model": None}
            ),
        }
        out.events.append(row)

    evictions, current = w.evictions, w.attempt
    evicted, finished = w.evicted, w.finished
    ready = w.cond("PodsReady", true=True)
    admitted = w.admitted
    attempts: dict[int, _Attempt] = {}
    waiting = None if admitted or finished or not w.active else _waiting(w)
    add("submit", 1, w.created_at, "PENDING", waiting if current == 1 else None, with_gpus=True)

    def admit_start(number: int, after: datetime | None, before: datetime | None) -> _Attempt:
        attempt = attempts.setdefault(number, _Attempt(number))

        def within(c: Condition | None) -> bool:
            return c is not None and (after is None or c.at >= after) and (before is None or c.at <= before)

        if within(admitted):
            attempt.admit = admitted
            checks = (
                f"; admission checks: {', '.join(n for n, _ in w.admission_checks)}"
                if w.admission_checks
                else ""
            )
            add(
                "admit",
                number,
                admitted.at,
                "PENDING",
                f"admitted by ClusterQueue {w.cluster_queue}{checks}" if w.cluster_queue else admitted.text(),
                with_gpus=True,
            )
        if within(ready) and (attempt.admit is None or ready.at >= attempt.admit.at):
            attempt.start_at = ready.at
            add("start", number, ready.at, "RUNNING", None)
        return attempt

    if evicted is not None:
        ended = admit_start(evictions, None, evicted.at)
        ended.end_at = evicted.at
        kind = _eviction_kind(evicted.reason, evicted.message)
        if kind == "finish":  # deactivated: the attempt it ended is the job's last
            if finished is not None:
                add("finish", evictions, finished.at, _finish_state(finished), finished.text())
            else:
                add(
                    "finish",
                    evictions,
                    evicted.at,
                    _deactivation_state(w, evicted),
                    f"deactivated: {evicted.text()}",
                )
        else:
            preempted = w.cond("Preempted", true=True)
            detail = f" ({preempted.reason})" if kind == "preempt" and preempted and preempted.reason else ""
            requeue = f"; requeue at {w.requeue_at.isoformat()}Z" if w.requeue_at else ""
            now_waiting = f"; waiting: {_waiting(w)}" if w.active and finished is None else ""
            add(
                kind,
                evictions,
                evicted.at,
                "PREEMPTED" if kind == "preempt" else "REQUEUED",
                f"{evicted.text()}{detail}{requeue}{now_waiting}",
            )
            if finished is not None:  # ended while evicted: no new attempt started
                add("finish", evictions, finished.at, _finish_state(finished), finished.text())
            elif not w.active:
                add(
                    "finish",
                    current,
                    _last_change(w),
                    "CANCELLED",
                    "deactivated while queued (spec.active=false)",
                )
    else:
        lower = None
        if (
            evictions >= 1
        ):  # re-admitted (or queued again) after an eviction whose time the status no longer has
            previous = w.cond("Evicted")
            message = previous.message.removeprefix("Previously: ") if previous else ""
            kind = "preempt" if message.startswith("Preempted") else "requeue"
            reserved = w.quota_reserved
            requeued = w.cond("Requeued", true=True)
            if requeued and (reserved is None or requeued.at <= reserved.at):
                at, how = requeued.at, "requeued"
            else:
                at, how = (
                    (reserved.at if reserved else previous.at if previous else w.created_at),
                    "re-admitted",
                )
            what = f"evicted: {message}" if message else f"evicted (the status counts {evictions})"
            add(
                kind,
                evictions,
                at,
                "PREEMPTED" if kind == "preempt" else "REQUEUED",
                f"{what}; the eviction time is no longer in the Workload's status: this is when it was {how}",
                exact=False,
            )
            lower = at
            attempts.setdefault(evictions, _Attempt(evictions)).end_at = at
        admit_start(current, lower, None)
        if finished is not None:
            add("finish", current, finished.at, _finish_state(finished), finished.text())
        elif not w.active:
            add(
                "finish",
                current,
                _last_change(w),
                _deactivation_state(w, None),
                "deactivated (spec.active=false); Kueue has not evicted it yet"
                if admitted
                else "deactivated (spec.active=false) while queued",
            )
    for attempt in attempts.values():
        if attempt.start_at is not None:
            _place(w, attempt, pods, mapping, out)
    return out


def _finish_state(finished: Condition) -> str:
    return {"Succeeded": "COMPLETED", "Failed": "FAILED"}.get(finished.reason, "CANCELLED")


def _last_change(w: Workload) -> datetime:
    return max((c.at for c in w.conditions.values()), default=w.created_at)


def _mig_fraction(profile: str, model: str | None) -> float:
    found = _MIG_SLICES.match(profile)
    slices = _MIG_COMPUTE_SLICES.get(model or "", 7)
    return min(int(found.group(1)) / slices, 1.0) if found else 1.0


def _place(w: Workload, attempt: _Attempt, pods: Sequence[Pod], mapping: KueueMapping, out: _Out) -> None:
    """job_gpus rows of one started attempt: from its pods, else from a hostname-level TAS assignment."""
    lower = attempt.admit.at if attempt.admit else None
    mine = [
        p
        for p in pods
        if p.namespace == w.namespace
        and p.node
        and p.gpus
        and (p.workload == w.name or (p.owner_uids & w.owner_uids))
        and (lower is None or p.created_at >= lower)
        and (attempt.end_at is None or p.created_at <= attempt.end_at)
    ]
    rank = {"Running": 0, "Succeeded": 1}
    rows: list[dict] = []
    for ps in w.pod_sets:
        if not ps.gpus:
            continue
        assignment = w.assignments.get(ps.name)
        count = assignment.count if assignment and assignment.count is not None else ps.count
        single = len(w.pod_sets) == 1
        chosen = sorted(
            (p for p in mine if p.pod_set == ps.name or (p.pod_set is None and single)),
            key=lambda p: (rank.get(p.phase, 2), p.created_at, p.name),
        )[:count]
        hosts = [(p.node, p.gpus) for p in chosen]
        if not hosts and assignment and assignment.hosts and attempt.end_at is None:
            # islice: a domain's count comes from the input and may be huge
            hosts = list(islice(((node, ps.gpus) for node, n in assignment.hosts for _ in range(n)), count))
        for node, per_pod in hosts:
            for name, n in per_pod.items():
                flavor = assignment.flavors.get(name) if assignment else None
                model = _flavor_model(flavor, mapping) or _model(w, mapping)
                profile = (
                    None if name == mapping.gpu_resource else name.removeprefix(mapping.mig_resource_prefix)
                )
                fraction = 1.0 if profile is None else _mig_fraction(profile, model)
                rows.extend(
                    {
                        "job_id": w.job_id,
                        "attempt": attempt.number,
                        "host": node,
                        "gpu": None,
                        "uuid": None,
                        "gpu_instance_id": None,
                        "gpu_instance_profile": profile,
                        "gpu_model": model,
                        "fraction": fraction,
                        "assigned_at": attempt.start_at,
                    }
                    for _ in range(n)
                )
        wanted = count * sum(ps.gpus.values())
        placed = sum(sum(g.values()) for _, g in hosts)
        out.unplaced_gpus += max(wanted - placed, 0)
    out.placements.extend(rows)


# --- the parser --------------------------------------------------------------------------------

_EVENT_SCHEMA = contract("job_events").schema
_GPU_SCHEMA = contract("job_gpus").schema


def _items(doc: object) -> list:
    if not isinstance(doc, dict):
        raise RecordError(f"document is {json_type(doc)}, expected a WorkloadList object")
    kind = doc.get("kind")
    if kind == "Workload":
        return [doc]
    if kind not in ("WorkloadList", "List"):
        raise RecordError(f"document kind is {kind!r}, expected WorkloadList (or a List of Workloads)")
    api_version = doc.get("apiVersion")
    if kind == "WorkloadList" and not (isinstance(api_version, str) and api_version.startswith(f"{GROUP}/")):
        raise RecordError(f"document apiVersion is {api_version!r}, expected {GROUP}/v1beta1 or v1beta2")
    items = doc.get("items")
    if not isinstance(items, list):
        raise RecordError(f"field 'items' is {json_type(items)}, expected array")
    return items


def parse_kueue_workloads(
    data: bytes | str, source_file: str, pods: Sequence[object] = (), mapping: KueueMapping | None = None
) -> ParseResult:
    """A WorkloadList document → job_events and job_gpus; `pods` are PodList documents for the nodes.

    A PodList document given as `data` is not records of its own: it loads nothing (see the note).
    """
    mapping = mapping or KueueMapping()
    rejects = Rejects()
    try:
        doc = load_json_document(decode_document(data))
        if isinstance(doc, dict) and doc.get("kind") == "PodList":
            return _result(
                [],
                [],
                rejects,
                source_file,
                0,
                0,
                ["a PodList: read with the folder's WorkloadLists for the nodes, not records of its own"],
            )
        items = _items(doc)
    except RecordError as error:
        raw = (data if isinstance(data, str) else data.decode("utf-8", "replace"))[:RAW_LIMIT]
        syntax = isinstance(error, DocumentError)
        rejects.add(error.line_number if syntax else None, str(error), raw, "parse" if syntax else "validate")
        return _result([], [], rejects, source_file, 1, 0, [])
    pod_list, pod_problems = read_pods(pods, mapping)
    events: list[dict] = []
    placements: list[dict] = []
    notes, unplaced, bad_template = [], 0, 0
    for index, item in enumerate(items, start=1):
        try:
            workload = read_workload(item, mapping)
            rows = workload_rows(workload, mapping, pod_list)
        except RecordError as error:
            rejects.add(index, f"items[{index - 1}]: {error}", compact_json(item)[:RAW_LIMIT])
            continue
        events += [{**row, "line_number": index, "_order": index} for row in rows.events]
        placements += [{**row, "_order": index} for row in rows.placements]
        unplaced += rows.unplaced_gpus
        bad_template += rows.bad_template
    if unplaced:
        notes.append(
            f"{unplaced} GPUs of started attempts have no known node (no pods of theirs in the pods "
            f"documents, no hostname-level topology assignment): no job_gpus rows for them"
        )
    if bad_template:
        notes.append(
            f"{bad_template} Workloads have a template label outside {', '.join(TEMPLATES)}: ignored"
        )
    if pod_problems:
        notes.append(f"{len(pod_problems)} pods could not be read: {'; '.join(pod_problems[:3])}")
    return _result(events, placements, rejects, source_file, len(items), len(items) - len(rejects), notes)


def _result(
    events: list[dict],
    placements: list[dict],
    rejects: Rejects,
    source_file: str,
    read: int,
    loaded: int,
    notes: list[str],
) -> ParseResult:
    event_cols = Columns(pl.Schema({**_EVENT_SCHEMA, "_exact": pl.Boolean, "_order": pl.Int32}))
    for row in events:
        event_cols.append(**row)
    frame = (
        event_cols.frame()
        .with_row_index("_row")
        # one row per event id: the copy that saw it directly, else the latest copy
        .sort(["_exact", "_order", "_row"])
        .unique(subset="event_id", keep="last", maintain_order=True)
        .sort("_row")
        .drop("_exact", "_order", "_row")
        .with_columns(source=pl.lit(SOURCE), source_file=pl.lit(source_file))
    )
    gpu_cols = Columns(
        pl.Schema(
            {
                **{k: v for k, v in _GPU_SCHEMA.items() if k not in ("source", "source_file")},
                "_order": pl.Int32,
            }
        )
    )
    for row in placements:
        gpu_cols.append(**row)
    gpus = gpu_cols.frame()
    # a placement is replaced as a whole: the latest copy of the Workload that placed the attempt
    gpus = (
        gpus.filter(pl.col("_order") == pl.col("_order").max().over("job_id", "attempt"))
        .drop("_order")
        .with_columns(source=pl.lit(SOURCE), source_file=pl.lit(source_file))
    )
    return ParseResult(
        tables={
            "job_events": contract("job_events").conform(frame),
            "job_gpus": contract("job_gpus").conform(gpus),
        },
        quarantine=rejects.frame(SOURCE, source_file),
        records_read=read,
        records_loaded=loaded,
        notes=notes,
    )


def parse_kueue_file(path: Path, mapping: KueueMapping | None = None) -> ParseResult:
    """One landed file, with the PodLists of its folder (`pods*.json`) for the nodes; the mapping from
    the configuration file's `kubernetes:` section unless given."""
    path = Path(path)
    pods = []
    for other in sorted(path.parent.glob("pods*.json")):
        if other == path:
            continue
        try:
            pods.append(load_json_document(decode_document(other.read_bytes())))
        except RecordError as error:
            pods.append({"unreadable": f"{other.name}: {error}"})
    return parse_kueue_workloads(path.read_bytes(), str(path), pods, mapping or load_mapping())
