"""Kueue Workload and Pod objects as the Kubernetes API returns them, read into checked dataclasses.

Owns the Kueue vocabulary (API group, labels, deactivation reasons), the `kubernetes:` mapping
config, reading a Workload (`read_workload`) or the pods of PodLists (`read_pods`), and what a
Workload asks for (`gpu_request`). Pure: no I/O besides the config file. The Kueue parser
(`pipelines/sources/kueue.py`) and the Kueue enforcer build on it. A malformed object raises
RecordError naming the field; so does a time outside the plausible window (`plausible_time`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from pipelines.config import section
from pipelines.sources.jsonl import RecordError, compact_json, json_type, parse_rfc3339, plausible_time

GROUP = "kueue.x-k8s.io"
CONFIG_SECTION = "kubernetes"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # set by Kueue on the pods it starts (0.9+)
PODSET_LABEL = "kueue.x-k8s.io/podset"
HOSTNAME_LEVEL = "kubernetes.io/hostname"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's node label
DEACTIVATION_REASONS = ("Deactivated", "InactiveWorkload")
MAX_DEVICES = 1024  # per container: more than any node has

_GPU_FAMILY = re.compile(
    r"gh200|gb200|b200|b100|h200|h100|h800|a800|a100|a40|a30|a16|a10g|a10|l40s|l40|l4|v100|t4|p100|p40|"
    r"mi300x|mi250x|mi250|mi210|mi100|rtx_?a?\d{4}"
)


class KueueMapping(BaseModel):
    """How Workloads map to the job tables: the mapping part of the `kubernetes:` config section."""

    tenant_label: str | None = Field(
        None, description="Workload label naming the tenant; default the namespace"
    )
    tenant_by_namespace: dict[str, str] = Field(
        default_factory=dict,
        description="namespace → tenant, for Workloads without the tenant label (default: the namespace)",
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
    return None if text is None else plausible_time(parse_rfc3339(text, f"{where}{key}"), f"{where}{key}")


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


def workload_tenant(w: Workload, mapping: KueueMapping) -> str:
    """The tenant of a Workload: its `tenant_label`, else its namespace's in `tenant_by_namespace`, else
    the namespace (the ingest and the governance tick read it alike)."""
    return w.label(mapping.tenant_label) or mapping.tenant_by_namespace.get(w.namespace) or w.namespace


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


def workload_pods(
    w: Workload, pods: Iterable[Pod], since: datetime | None = None, until: datetime | None = None
) -> list[Pod]:
    """The pods of a Workload created within [since, until]: in its namespace, and named by Kueue's
    `kueue.x-k8s.io/workload` annotation or owned by the Workload's owner (Kueue before 0.9)."""
    return [
        p
        for p in pods
        if p.namespace == w.namespace
        and (p.workload == w.name or bool(p.owner_uids & w.owner_uids))
        and (since is None or p.created_at >= since)
        and (until is None or p.created_at <= until)
    ]


# --- what a Workload asks for ------------------------------------------------------------------


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
        "gpu_model": workload_gpu_model(w, mapping),
    }


def flavor_model(flavor: str | None, mapping: KueueMapping) -> str | None:
    """The GPU model of a ResourceFlavor: the configured one, else the GPU family in its name."""
    if not flavor:
        return None
    return mapping.flavor_gpu_models.get(flavor) or gpu_model_from(flavor)


def workload_gpu_model(w: Workload, mapping: KueueMapping) -> str | None:
    """The GPU model of a Workload: from its admitted flavors, else its podSets' product node selector."""
    for ps in w.pod_sets:
        assignment = w.assignments.get(ps.name)
        for name in ps.gpus:
            model = flavor_model(assignment.flavors.get(name) if assignment else None, mapping)
            if model:
                return model
    for ps in w.pod_sets:
        if ps.gpus:
            model = gpu_model_from(str(ps.node_selector.get(GPU_PRODUCT_LABEL) or ""))
            if model:
                return model
    return None
