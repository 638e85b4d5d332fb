"""Enforcement through Kueue, behind the same `Enforcer` interface as the built-in allocator.

The target of a job action is `<namespace>/<workload name>` (the job_id the `kueue` source loads).

    reclaim       deactivate the Workload: merge-patch spec.active=false. Kueue evicts it (Evicted,
                  reason Deactivated), stops its Job (the pods go) and releases its quota; it is not
                  requeued until someone sets spec.active=true again.
    preempt       evict and requeue, as Kueue's own preemption does: spec.active=false, wait until Kueue
                  has evicted it (Evicted=True with reason Deactivated, or its quota released), then
                  spec.active=true: Kueue requeues it and its next admission is attempt + 1 (the
                  `kubectl kueue stop/resume workload` pair). Not the Eviction API: evicting the pods of
                  a Kueue Job neither releases the Workload's quota nor requeues it (the Job controller
                  makes new pods under the same admission), so pods/eviction is never used.
    cap_runtime   spec.maximumExecutionTimeSeconds (Kueue >= 0.10), patched with fieldValidation=Strict so
                  that an older CRD answers "unknown field" and the action is refused with that reason.
                  Kueue forbids changing it while the Workload is admitted, hence: a Workload not yet
                  admitted is capped; an admitted one whose admitted time (this attempt's plus
                  status.accumulatedPastExexcutionTimeSeconds) is already past the cap is deactivated, as
                  Kueue does when the cap runs out (state TIMEOUT); any other admitted one is refused,
                  with the time the cap would end it.
    remind        annotate the Workload: gpupool.io/reminded-at (RFC 3339) and gpupool.io/reminder; then
                  record a core/v1 Event (type Warning, reason GpupoolIdleReminder, `reminder_event`) on
                  each of its running pods, which `kubectl describe pod` and `kubectl get events` show
                  the owner. The answer names the owner (`reminded`: the Workload's user label, what the
                  outbox's email and chat reminders go to), the namespace, the Events created and any
                  that failed (the annotation stands; the reason says which pods got none).
    drain,        cordon / uncordon the node (target `node-07`, or a GPU `node-07/3`: its node), handed to
    undrain       `KubernetesNodeEnforcer` (pipelines/enforcement/kubernetes.py) with this ledger and lock
    quota_change  proposed only (target: a ClusterQueue, or a LocalQueue `<namespace>/<name>`, resolved
                  to its ClusterQueue; quota {GPU model: GPUs}): each model maps to the flavor of the
                  ClusterQueue that carries it (`flavor_gpu_models`, the GPU family in the flavor's name,
                  or its ResourceFlavor's nvidia.com/gpu.product node label); the answer and the audit's
                  `after` hold the nominalQuota changes and the JSON patch an admin applies with kubectl
                  (its `test` ops make it fail if the quota changed in between).

Rules, as the allocator keeps them: the Workload is read first; one that does not exist (deleted,
or never existed), is finished, or (reclaim, preempt) is inactive or holds no quota, or (remind) is
not admitted, is refused with the reason. Protected Workloads are refused for reclaim, preempt and
cap_runtime: label `<protected_label>=true` (default gpupool.io/protected), a priority class in
`protected_priority_classes`, a namespace in `protected_namespaces`, or the template label saying
inference. Patches carry the resourceVersion that was read, so a Workload that changed in between
answers 409 and is read and judged again (once). A dry run answers `dry_run` with the patch it would
make and changes nothing. Idempotency and audit come from `ActionLedger` (engine `kueue`): the same
key again answers `already_done` and patches nothing; a key reused for another action or target is
refused; every answer is audited. Applies of one key are serialised by a file lock (striped by key).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException

from allocator.model import NODE_ACTIONS, Action, ActionKind, ActionResult, Outcome
from pipelines.connectors.kubernetes import KubernetesAnswerError, KubernetesConfig, api_client
from pipelines.connectors.kueue import KueueClient
from pipelines.enforcement.base import ActionLedger, action_reason, claim_key
from pipelines.enforcement.kubernetes import CONNECTION_ERRORS, KubernetesNodeEnforcer, api_error
from pipelines.sources.jsonl import RecordError
from pipelines.sources.kueue_objects import (
    DEACTIVATION_REASONS,
    GPU_PRODUCT_LABEL,
    GROUP,
    Pod,
    Workload,
    flavor_model,
    gpu_model_from,
    gpu_request,
    read_pods,
    read_workload,
    workload_pods,
)

REMINDED_AT = "gpupool.io/reminded-at"
REMINDER = "gpupool.io/reminder"
ANNOTATION_LIMIT = 1024
EVENT_REASON = "GpupoolIdleReminder"  # a reminder about idle GPUs (the finding names them)
EVENT_REASON_OTHER = "GpupoolReminder"  # any other remind step (an overrun, say)
EVENT_COMPONENT = "gpupool-governance"
EVENT_MESSAGE_LIMIT = 1024  # what `kubectl describe` shows in full; events.k8s.io/v1 caps its note there


def reminder_event(workload: Workload, pod: Pod, action: Action, now: dt.datetime) -> dict:
    """The core/v1 Event a remind step records on one of the Workload's pods (POST
    /api/v1/namespaces/<ns>/events): type Warning, reason GpupoolIdleReminder when the finding names
    idle GPUs (its per-GPU evidence; else GpupoolReminder), the message naming them and the reason
    with its next step. Its name is fixed by the idempotency key and the pod, so the same step never
    makes two Events on one pod."""
    evidence = action.evidence or {}
    slots = [f"{g.get('host')}/{g.get('gpu')}" for g in evidence.get("gpus") or [] if isinstance(g, dict)]
    held = evidence.get("gpus_held")
    message = f"Workload {workload.job_id}: "
    if slots:
        message += f"idle GPUs {', '.join(slots)}" + (f" ({len(slots)} of the {held} it holds)" if held else "") + ". "
    message += action_reason(action)
    digest = hashlib.sha256(f"{action.idempotency_key}\n{pod.uid}".encode()).hexdigest()[:16]
    stamp = now.isoformat(timespec="seconds") + "Z"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # a DNS subdomain of at most 253 characters, as the pod's name is
        "metadata": {"name": f"{pod.name[:200].rstrip('.-')}.gpupool-{digest}", "namespace": pod.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace,
                           "uid": pod.uid},
        "reason": EVENT_REASON if slots else EVENT_REASON_OTHER,
        "message": message[:EVENT_MESSAGE_LIMIT],
        "type": "Warning",
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": EVENT_COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


@dataclasses.dataclass
class _Plan:
    """What an action would do: the outcome if it goes ahead and the changes that make it."""

    outcome: Outcome
    reason: str
    patch: dict | None = None  # merge patch of the Workload
    requeue: bool = False  # preempt: deactivate, wait for the eviction, reactivate
    strict: bool = False  # fieldValidation=Strict (a field an old CRD may not have)
    describe: str = ""
    object_kind: str = "job"
    before: dict | None = None
    after: dict | None = None
    effects: dict = dataclasses.field(default_factory=dict)
    proposal_id: str | None = None
    events: list[dict] = dataclasses.field(default_factory=list)  # remind: core/v1 Events, after the patch


class _Conflict(Exception):
    """The Workload changed between the read and the patch (HTTP 409)."""


class KueueEnforcer:
    """`Enforcer` for Kueue (engine "kueue"). `custom` is a kubernetes CustomObjectsApi (tests pass
    a fake)."""

    engine = "kueue"

    def __init__(
        self,
        ledger: ActionLedger,
        config: KubernetesConfig | None = None,
        custom: object | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        lock_dir: Path | None = None,
        core: object | None = None,
    ):
        if ledger.engine != self.engine:
            raise ValueError(f"the ledger is for engine {ledger.engine!r}, expected {self.engine!r}")
        self.ledger = ledger
        self.config = config or KubernetesConfig()
        self.custom = custom if custom is not None else CustomObjectsApi(api_client(self.config))
        self.sleep = sleep
        self.clock = clock
        self.lock_dir = Path(lock_dir) if lock_dir else ledger.audit_root.parent / ".locks" / "kueue"
        # nodes are not Kueue's: the same cluster's node enforcer, sharing this ledger and its key locks
        self.nodes = KubernetesNodeEnforcer(ledger, self.config, core, lock_dir=self.lock_dir)

    # --- the interface ----------------------------------------------------------------------

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        if ActionKind(action.kind) in NODE_ACTIONS:
            return self.nodes.apply(action, now)
        with claim_key(self.lock_dir, action.idempotency_key):
            previous = self.ledger.answered_before(action, now, _object_kind(ActionKind(action.kind)))
            if previous is not None:
                return previous
            for tries_left in (1, 0):
                plan = self._plan(action, now)
                outcome, reason, effects = plan.outcome, plan.reason, dict(plan.effects)
                if outcome in (Outcome.APPLIED, Outcome.PROPOSED) and action.dry_run:
                    verb = "propose" if outcome == Outcome.PROPOSED else plan.describe or "apply"
                    outcome, reason = Outcome.DRY_RUN, f"dry run: would {verb}: {reason}"
                elif outcome == Outcome.APPLIED and (plan.patch is not None or plan.requeue):
                    try:
                        failure = self._execute(action.target, plan)
                    except _Conflict:
                        if tries_left:
                            continue
                        failure = (
                            f"Workload {action.target} kept changing while it was read and patched (HTTP 409)"
                        )
                    if failure:
                        outcome, reason, effects = Outcome.REFUSED, failure, {}
                    elif action.kind == ActionKind.REMIND:
                        reason, effects = self._post_events(plan.events, reason, effects)
                elif action.dry_run:
                    reason = f"dry run: {reason}"
                break
            return self.ledger.answer(
                action,
                now,
                outcome,
                reason,
                effects,
                object_kind=plan.object_kind,
                before=plan.before,
                after=plan.after,
                proposal_id=plan.proposal_id,
            )

    # --- deciding ---------------------------------------------------------------------------

    def _plan(self, action: Action, now: dt.datetime) -> _Plan:
        if action.kind == ActionKind.QUOTA_CHANGE:
            return self._plan_quota(action)
        namespace, _, name = action.target.partition("/")
        if not namespace or not name or "/" in name:
            return _Plan(Outcome.REFUSED, f"target {action.target!r} is not <namespace>/<workload name>")
        try:
            workload = self.find_workload(namespace, name)
        except CONNECTION_ERRORS as error:
            return _Plan(Outcome.REFUSED, f"cannot read Workload {action.target}: {api_error(error)}")
        except RecordError as error:
            return _Plan(Outcome.REFUSED, f"cannot read Workload {action.target}: {error}")
        if workload is None:
            return _Plan(
                Outcome.REFUSED, f"no Workload {action.target} in the cluster (deleted, or never existed)"
            )
        before = self.snapshot(workload)
        if action.evidence:
            before["evidence"] = action.evidence
        if workload.finished:
            return _Plan(
                Outcome.REFUSED,
                f"Workload {workload.job_id} is finished ({workload.finished.reason})",
                before=before,
            )
        reason = action_reason(action)
        gpus = before["gpus"]
        if action.kind == ActionKind.REMIND:
            if not workload.admitted:
                return _Plan(
                    Outcome.REFUSED,
                    f"Workload {workload.job_id} is not admitted: nothing runs to remind about",
                    before=before,
                )
            annotations = {
                REMINDED_AT: now.isoformat(timespec="seconds") + "Z",
                REMINDER: reason[:ANNOTATION_LIMIT],
            }
            pods, missing = self._running_pods(workload)
            events = [reminder_event(workload, pod, action, now) for pod in pods]
            marked = ", ".join(pod.name for pod in pods) or "none"
            return _Plan(
                Outcome.APPLIED,
                reason + (f"; no Event on its pods: {missing}" if missing else ""),
                self._versioned(workload, {"metadata": {"annotations": annotations}}),
                describe=f"annotate Workload {workload.job_id} with {REMINDED_AT} and record an Event on its "
                f"running pods ({marked})",
                before=before,
                after={"annotations": annotations, "events": [e["metadata"]["name"] for e in events]},
                # the owner as the outbox reads it for every engine; the namespace the Workload is in
                effects={"reminded": workload.label(self.config.user_label), "namespace": workload.namespace,
                         **annotations},
                events=events,
            )
        protection = self.protection(workload)
        if protection:
            what = {
                ActionKind.RECLAIM: "reclaim",
                ActionKind.PREEMPT: "preemption",
                ActionKind.CAP_RUNTIME: "run-time caps",
            }[action.kind]
            return _Plan(
                Outcome.REFUSED,
                f"protected workload ({protection}) is exempt from automatic {what}",
                before=before,
            )
        if action.kind == ActionKind.CAP_RUNTIME:
            return self._plan_cap(action, workload, before, reason, now)
        if not workload.active:
            return _Plan(
                Outcome.REFUSED,
                f"Workload {workload.job_id} is already inactive (spec.active=false)",
                before=before,
            )
        if not workload.quota_reserved:
            verb = "reclaim" if action.kind == ActionKind.RECLAIM else "preempt"
            return _Plan(
                Outcome.REFUSED,
                f"Workload {workload.job_id} holds no quota (not admitted): nothing to {verb}",
                before=before,
            )
        released = {"gpus_released": gpus}
        if action.kind == ActionKind.RECLAIM:
            return _Plan(
                Outcome.APPLIED,
                reason,
                self._versioned(workload, {"spec": {"active": False}}),
                describe=f"patch Workload {workload.job_id} spec.active=false",
                before=before,
                after={"active": False},
                effects={"state": "CANCELLED", "active": False, **released},
            )
        if action.kind == ActionKind.PREEMPT:
            after = {"state": "PENDING", "attempt": workload.attempt + 1}
            return _Plan(
                Outcome.APPLIED,
                reason,
                self._versioned(workload, {"spec": {"active": False}}),
                requeue=True,
                describe=f"patch Workload {workload.job_id} spec.active=false, wait for Kueue to evict it, "
                f"then spec.active=true (requeue)",
                before=before,
                after=after,
                effects={**after, "requeued": True, **released},
            )
        raise ValueError(f"unknown action kind {action.kind!r}")

    def _plan_cap(
        self, action: Action, workload: Workload, before: dict, reason: str, now: dt.datetime
    ) -> _Plan:
        cap = action.runtime_s
        if cap is None or cap < 1 or cap >= 2**31:
            return _Plan(
                Outcome.REFUSED,
                "cap_runtime needs 1 <= runtime_s < 2^31 (an int32 of seconds)",
                before=before,
            )
        if workload.max_execution_s is not None and workload.max_execution_s <= cap:
            return _Plan(
                Outcome.REFUSED,
                f"the Workload's maximumExecutionTimeSeconds is already "
                f"{workload.max_execution_s} (asked {cap})",
                before=before,
            )
        admitted = workload.admitted
        if admitted is None:
            patch = {"spec": {"maximumExecutionTimeSeconds": cap}}
            return _Plan(
                Outcome.APPLIED,
                reason,
                self._versioned(workload, patch),
                strict=True,
                describe=f"patch Workload {workload.job_id} spec.maximumExecutionTimeSeconds={cap}",
                before=before,
                after={"maximum_execution_s": cap},
                effects={"runtime_cap_s": cap},
            )
        admitted_s = workload.past_admitted_s + max(int((now - admitted.at).total_seconds()), 0)
        ends_at = admitted.at + dt.timedelta(seconds=cap - workload.past_admitted_s)
        if workload.active and admitted_s >= cap:
            effects = {
                "runtime_cap_s": cap,
                "state": "TIMEOUT",
                "active": False,
                "gpus_released": before["gpus"],
            }
            return _Plan(
                Outcome.APPLIED,
                f"{reason}; admitted {admitted_s} s >= cap {cap} s: deactivated, as Kueue "
                f"does when maximumExecutionTimeSeconds runs out",
                self._versioned(workload, {"spec": {"active": False}}),
                describe=f"patch Workload {workload.job_id} spec.active=false (cap already exceeded)",
                before=before,
                after={"active": False, "runtime_cap_s": cap},
                effects=effects,
            )
        return _Plan(
            Outcome.REFUSED,
            f"Kueue does not allow changing spec.maximumExecutionTimeSeconds while the "
            f"Workload is admitted; the cap would end it at "
            f"{ends_at.isoformat(timespec='seconds')}Z (admitted {admitted_s} s so far): "
            f"apply cap_runtime (or reclaim) again then",
            before=before,
        )

    def _plan_quota(self, action: Action) -> _Plan:
        quota = action.quota
        if not isinstance(quota, Mapping) or not quota:
            return _Plan(
                Outcome.REFUSED, "a quota change needs quota: {GPU model: GPUs}", object_kind="clusterqueue"
            )
        for model, gpus in quota.items():
            if isinstance(gpus, bool) or not isinstance(gpus, int | float) or gpus < 0 or gpus != int(gpus):
                return _Plan(
                    Outcome.REFUSED,
                    f"quota {model} is {gpus!r}: a ClusterQueue's nominalQuota of "
                    f"{self.config.gpu_resource} counts whole GPUs >= 0",
                    object_kind="clusterqueue",
                )
        try:
            name = self._cluster_queue_of(action.target)
            queue = self._get_cluster("clusterqueues", name)
            flavors = self._gpu_flavors(queue)
        except (LookupError, RecordError) as error:
            return _Plan(Outcome.REFUSED, str(error), object_kind="clusterqueue")
        except CONNECTION_ERRORS as error:
            return _Plan(
                Outcome.REFUSED,
                f"cannot read the queue {action.target}: {api_error(error)}",
                object_kind="clusterqueue",
            )
        changes, ops = {}, []
        for model, gpus in quota.items():
            matching = [f for f in flavors if f["gpu_model"] == str(model).upper()]
            if not matching:
                known = (
                    ", ".join(f"{f['flavor']} ({f['gpu_model'] or 'model unknown'})" for f in flavors)
                    or "none"
                )
                return _Plan(
                    Outcome.REFUSED,
                    f"no flavor of ClusterQueue {name} carries {model} GPUs (its "
                    f"{self.config.gpu_resource} flavors: {known}); name it in "
                    f"kubernetes.flavor_gpu_models",
                    object_kind="clusterqueue",
                )
            if len(matching) > 1:
                return _Plan(
                    Outcome.REFUSED,
                    f"{model} is carried by several flavors of ClusterQueue {name} "
                    f"({', '.join(f['flavor'] for f in matching)}): the change is ambiguous",
                    object_kind="clusterqueue",
                )
            flavor = matching[0]
            changes[flavor["flavor"]] = {
                "gpu_model": flavor["gpu_model"],
                "resource": self.config.gpu_resource,
                "before": flavor["nominal_quota"],
                "after": int(gpus),
            }
            ops += [
                {"op": "test", "path": flavor["path"], "value": flavor["nominal_quota"]},
                {"op": "replace", "path": flavor["path"], "value": int(gpus)},
            ]
        command = (
            f"kubectl patch clusterqueue {name} --type=json -p '{json.dumps(ops, separators=(',', ':'))}'"
        )
        proposal_id = "kueue-qp-" + hashlib.sha256(action.idempotency_key.encode()).hexdigest()[:12]
        proposed = {str(m): float(v) for m, v in quota.items()}
        return _Plan(
            Outcome.PROPOSED,
            f"{action_reason(action)}; an admin applies it with: {command}",
            object_kind="clusterqueue",
            before={"cluster_queue": name, "nominal_quota": {f: c["before"] for f, c in changes.items()}},
            after={"cluster_queue": name, "nominal_quota": changes, "json_patch": ops},
            effects={"quota": proposed, "cluster_queue": name, "admin_command": command},
            proposal_id=proposal_id,
        )

    # --- Kubernetes -------------------------------------------------------------------------

    @property
    def _version(self) -> str:
        return self.config.kueue_version

    def find_workload(self, namespace: str, name: str) -> Workload | None:
        """The Workload as the API server has it now, or None when there is none."""
        try:
            obj = self.custom.get_namespaced_custom_object(
                GROUP,
                self._version,
                namespace,
                "workloads",
                name,
                _request_timeout=self.config.request_timeout_s,
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return read_workload(obj, self.config)

    def snapshot(self, workload: Workload) -> dict:
        return {
            "active": workload.active,
            "quota_reserved": workload.quota_reserved is not None,
            "admitted": workload.admitted is not None,
            "evicted": workload.evicted is not None,
            "cluster_queue": workload.cluster_queue,
            "queue": workload.queue,
            "attempt": workload.attempt,
            "gpus": gpu_request(workload, self.config)["gpus_requested"],
            "maximum_execution_s": workload.max_execution_s,
            "resource_version": workload.resource_version,
        }

    def protection(self, workload: Workload) -> str | None:
        """Why the Workload is protected (a short description), or None."""
        config = self.config
        if str(workload.labels.get(config.protected_label, "")).lower() == "true":
            return f"label {config.protected_label}=true"
        if workload.priority_class and workload.priority_class in config.protected_priority_classes:
            return f"priority class {workload.priority_class}"
        if workload.namespace in config.protected_namespaces:
            return f"namespace {workload.namespace}"
        if workload.label(config.template_label) == "inference":
            return "template inference"
        return None

    def _versioned(self, workload: Workload, patch: dict) -> dict:
        """The patch, made conditional on the resourceVersion that was judged (409 if it changed)."""
        if not workload.resource_version:
            return patch
        meta = {**patch.get("metadata", {}), "resourceVersion": workload.resource_version}
        return {**patch, "metadata": meta}

    def _patch(self, namespace: str, name: str, body: dict, strict: bool = False) -> None:
        kwargs: dict = {"_request_timeout": self.config.request_timeout_s}
        if strict:
            kwargs["field_validation"] = "Strict"
        self.custom.patch_namespaced_custom_object(
            GROUP, self._version, namespace, "workloads", name, body, **kwargs
        )

    def _execute(self, target: str, plan: _Plan) -> str | None:
        """Make the plan's changes; None on success, else why it failed. Raises _Conflict on a 409."""
        namespace, _, name = target.partition("/")
        try:
            self._patch(namespace, name, plan.patch or {}, plan.strict)
        except ApiException as error:
            if error.status == 409:
                raise _Conflict from error
            detail = api_error(error)
            if plan.strict and error.status == 400 and "unknown field" in detail:
                return (
                    f"this Kueue has no spec.maximumExecutionTimeSeconds (Kueue 0.10 or later is needed): "
                    f"{detail}"
                )
            return f"patching Workload {target} failed: {detail}"
        except CONNECTION_ERRORS as error:
            return f"patching Workload {target} failed: {api_error(error)} (its state is unknown: check it)"
        if plan.requeue:
            return self._requeue(namespace, name)
        return None

    def _requeue(self, namespace: str, name: str) -> str | None:
        """After the deactivation: wait until Kueue has evicted the Workload, then reactivate it."""
        target = f"{namespace}/{name}"
        deadline = self.clock() + self.config.preempt_timeout_s
        evicted = False
        while True:
            try:
                workload = self.find_workload(namespace, name)
            except (*CONNECTION_ERRORS, RecordError):
                workload = None  # asked again until the deadline
            else:
                if workload is None:
                    return f"Workload {target} disappeared after its deactivation"
                evicted = bool(
                    (workload.evicted and workload.evicted.reason in DEACTIVATION_REASONS)
                    or not workload.quota_reserved
                )
            if evicted or self.clock() >= deadline:
                break
            self.sleep(self.config.preempt_poll_s)
        try:
            self._patch(namespace, name, {"spec": {"active": True}})
        except CONNECTION_ERRORS as error:
            return (
                f"Workload {target} was deactivated{' and evicted' if evicted else ''}, but reactivating it "
                f"failed: {api_error(error)}; it stays inactive until spec.active is set to true"
            )
        if not evicted:
            return (
                f"Kueue did not evict Workload {target} within {self.config.preempt_timeout_s:g} s of "
                f"its deactivation (is the Kueue controller running?); it was reactivated, so it may not "
                f"have been preempted: check its Evicted condition"
            )
        return None

    def _running_pods(self, workload: Workload) -> tuple[list[Pod], str | None]:
        """The Workload's running pods (as the governance tick finds them: its namespace's pods Kueue
        started, created since its admission), and why they could not be listed (else None)."""
        try:
            listing = KueueClient(self.config.model_copy(update={"namespaces": [workload.namespace]}),
                                  self.custom, self.nodes.core).pods()
            pods, problems = read_pods([listing], self.config)
        except (*CONNECTION_ERRORS, KubernetesAnswerError, ConfigException) as error:
            return [], f"cannot list the pods of namespace {workload.namespace}: {api_error(error)}"
        admitted = workload.admitted.at if workload.admitted else None
        mine = [p for p in workload_pods(workload, pods, since=admitted) if p.phase == "Running" and p.node]
        return mine, ("; ".join(problems[:3]) if problems and not mine else None)

    def _post_events(self, events: list[dict], reason: str, effects: dict) -> tuple[str, dict]:
        """Create the reminder's Events (after the Workload's annotation went in): the answer names
        those created and those that failed. An Event already there (same name: this key and pod,
        from an apply whose answer was lost) counts as created."""
        created, failed = [], {}
        for event in events:
            meta = event["metadata"]
            try:
                self.nodes.core.create_namespaced_event(meta["namespace"], event, _preload_content=False,
                                                        _request_timeout=self.config.request_timeout_s)
            except ApiException as error:
                if error.status != 409:
                    failed[event["involvedObject"]["name"]] = api_error(error)
                    continue
            except CONNECTION_ERRORS as error:
                failed[event["involvedObject"]["name"]] = api_error(error)
                continue
            created.append(meta["name"])
        effects = {**effects, "events": created}
        if failed:
            effects["events_failed"] = failed
            reason += "; " + "; ".join(f"Event on pod {pod} not created: {why}" for pod, why in failed.items())
        return reason, effects

    def _get_cluster(self, plural: str, name: str) -> dict:
        try:
            obj = self.custom.get_cluster_custom_object(
                GROUP, self._version, plural, name, _request_timeout=self.config.request_timeout_s
            )
        except ApiException as error:
            if error.status == 404:
                raise LookupError(f"no {plural[:-1]} {name} in the cluster") from None
            raise
        if not isinstance(obj, dict):
            raise RecordError(f"{plural[:-1]} {name}: the answer is not an object")
        return obj

    def _cluster_queue_of(self, target: str) -> str:
        """A ClusterQueue name, or the ClusterQueue of a LocalQueue `<namespace>/<name>`."""
        if "/" not in target:
            return target
        namespace, _, name = target.partition("/")
        try:
            local = self.custom.get_namespaced_custom_object(
                GROUP,
                self._version,
                namespace,
                "localqueues",
                name,
                _request_timeout=self.config.request_timeout_s,
            )
        except ApiException as error:
            if error.status == 404:
                raise LookupError(f"no LocalQueue {target} in the cluster") from None
            raise
        cluster_queue = ((local or {}).get("spec") or {}).get("clusterQueue")
        if not isinstance(cluster_queue, str) or not cluster_queue:
            raise RecordError(f"LocalQueue {target} has no spec.clusterQueue")
        return cluster_queue

    def _gpu_flavors(self, queue: dict) -> list[dict]:
        """The flavors of a ClusterQueue that set a quota for the GPU resource, with the JSON path of it."""
        out = []
        groups = (queue.get("spec") or {}).get("resourceGroups") or []
        for gi, group in enumerate(groups):
            for fi, flavor in enumerate((group or {}).get("flavors") or []):
                for ri, resource in enumerate((flavor or {}).get("resources") or []):
                    if (resource or {}).get("name") != self.config.gpu_resource:
                        continue
                    name = str(flavor.get("name"))
                    out.append(
                        {
                            "flavor": name,
                            "gpu_model": self._flavor_model(name),
                            "nominal_quota": resource.get("nominalQuota"),
                            "path": f"/spec/resourceGroups/{gi}/flavors/{fi}/resources/{ri}/nominalQuota",
                        }
                    )
        return out

    def _flavor_model(self, flavor: str) -> str | None:
        model = flavor_model(flavor, self.config)
        if model:
            return model.upper()
        try:  # the ResourceFlavor's nodes say which GPU (GPU feature discovery's product label)
            labels = (self._get_cluster("resourceflavors", flavor).get("spec") or {}).get("nodeLabels") or {}
        except (LookupError, RecordError, *CONNECTION_ERRORS):
            return None
        return gpu_model_from(str(labels.get(GPU_PRODUCT_LABEL) or ""))


def _object_kind(kind: ActionKind) -> str:
    return "clusterqueue" if kind == ActionKind.QUOTA_CHANGE else "job"
