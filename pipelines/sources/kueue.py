"""Parser for Kueue Workloads, as the Kubernetes API lists them → raw.job_events (+ raw.job_gpus).

Input: a `WorkloadList` JSON document (`GET /apis/kueue.x-k8s.io/<v1beta1|v1beta2>/workloads`;
also `kubectl get workloads -A -o json`, a `List`, or one `Workload`). A record is one Workload
(its line_number is its 1-based index in `items`). A day file written by the connector may hold
the same Workload more than once, one copy per attempt-state it was seen in (`attempt_state`):
their events are merged, an event seen in several copies keeps the copy that saw it directly
(not inferred), else the latest. Pods (`PodList` documents, read by `parse_kueue_file` from the
folder's `pods*.json`) only tell which nodes an attempt ran on; they are not records. The objects
themselves are read (and checked) by `pipelines/sources/kueue_objects.py`.

A Workload's status keeps only the latest transition of each condition, so one object shows at
most: its creation, the current attempt's admission, start and end, and the end of the previous
attempt. Event ids are deterministic (`kueue:<namespace>/<name>:<uid[:8]>:<attempt>:<type>`), so
the snapshots of several days add up to the history and repeat nothing (staging keeps the latest
delivery of each id). job_id is `<namespace>/<name>` of the Workload (what enforcement targets).

Mapping:
- submit (attempt 1) at metadata.creationTimestamp; tenant = the `tenant_label` label when
  configured and present, else the namespace's in `tenant_by_namespace`, else the namespace;
  queue = spec.queueName (the LocalQueue); priority = spec.priority; job_name = the owner (the
  Job) else the Workload's name; template and user from the configured labels (or annotations);
  GPUs = Σ over podSets of count × the pod's GPUs (`nvidia.com/gpu`, or `nvidia.com/mig-<profile>`
  instances: share_mode mig); gpu_model from the admission's flavor for the GPU resource
  (`flavor_gpu_models`, else the GPU family in the flavor's name), else the podSet's
  `nvidia.com/gpu.product` node selector. A submit whose attempt is still waiting says why in
  `reason` (QuotaReserved False: Pending / Inadmissible with Kueue's message; admission checks
  pending; no attempt yet).
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from pathlib import Path

import polars as pl

from allocator.model import TEMPLATES
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
)
from pipelines.sources.kueue_objects import (
    DEACTIVATION_REASONS,
    GROUP,
    Condition,
    KueueMapping,
    Pod,
    Workload,
    flavor_model,
    gpu_request,
    load_mapping,
    read_pods,
    read_workload,
    workload_gpu_model,
    workload_pods,
    workload_tenant,
)

SOURCE = "kueue"
RAW_LIMIT = 2000

_MIG_SLICES = re.compile(r"^(\d+)g\.")
_MIG_COMPUTE_SLICES = {"A30": 4}  # A100 and H100 have 7


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
        "tenant": workload_tenant(w, mapping),
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


def mig_fraction(profile: str, model: str | None) -> float:
    """The share of a GPU a MIG profile holds: its compute slices of the model's (`3g.40gb` of an A100: 3/7)."""
    found = _MIG_SLICES.match(profile)
    slices = _MIG_COMPUTE_SLICES.get(model or "", 7)
    return min(int(found.group(1)) / slices, 1.0) if found else 1.0


def _place(w: Workload, attempt: _Attempt, pods: Sequence[Pod], mapping: KueueMapping, out: _Out) -> None:
    """job_gpus rows of one started attempt: from its pods, else from a hostname-level TAS assignment."""
    lower = attempt.admit.at if attempt.admit else None
    mine = [p for p in workload_pods(w, pods, lower, attempt.end_at) if p.node and p.gpus]
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
                model = flavor_model(flavor, mapping) or workload_gpu_model(w, mapping)
                profile = (
                    None if name == mapping.gpu_resource else name.removeprefix(mapping.mig_resource_prefix)
                )
                fraction = 1.0 if profile is None else mig_fraction(profile, model)
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
                empty_answer=True,
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
    return _result(events, placements, rejects, source_file, len(items), len(items) - len(rejects), notes,
                   empty_answer=not items)  # an empty WorkloadList: no Workload that day


def _result(
    events: list[dict],
    placements: list[dict],
    rejects: Rejects,
    source_file: str,
    read: int,
    loaded: int,
    notes: list[str],
    *,
    empty_answer: bool = False,
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
        empty_answer=empty_answer,
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
