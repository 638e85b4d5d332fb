"""Drain and undrain of Kubernetes nodes: cordon and uncordon through the API, behind the `Enforcer` interface.

    drain     PATCH /api/v1/nodes/<node> {"spec": {"unschedulable": true}} (what `kubectl cordon` sends,
              as a strategic merge patch), with the annotations gpupool.io/drained-by (the idempotency
              key) and gpupool.io/drain-reason
    undrain   the same with unschedulable false and the two annotations removed

Only new pods are kept off: running pods stay (a cordon, not `kubectl drain`, which evicts). A GPU
target `node-07/3` cordons its whole node (the scheduler places pods on nodes), and the answer's
reason says so. The node is read first; one the API server does not have is refused; a drain of
a node already unschedulable is refused (our own key again is `already_done`, from the ledger,
before the API is asked); an undrain of a node that is schedulable, or that someone else cordoned
(no gpupool.io/drained-by annotation), is refused: their cordon is theirs to lift. Patches carry
the resourceVersion that was read: a node that changed in between (HTTP 409) is read and judged
again, once. Idempotency and audit come from `ActionLedger` with engine `kueue`: a Kubernetes
cluster is the `kueue` engine of the governance loop and of the audit contract (whose engines are
allocator, slurm and kueue), and `KueueEnforcer` hands its node actions here with its own ledger
and key locks; applies of one key are serialised by a file lock.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import urllib3
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from allocator.model import (
    NODE_ACTIONS,
    Action,
    ActionKind,
    ActionResult,
    Outcome,
    drain_object_kind,
    drain_target,
)
from pipelines.connectors.kubernetes import KubernetesConfig, api_client
from pipelines.enforcement.base import ActionLedger, action_reason, claim_key

DRAINED_BY = "gpupool.io/drained-by"
DRAIN_REASON = "gpupool.io/drain-reason"
ANNOTATION_LIMIT = 1024
CONNECTION_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


def api_error(error: BaseException) -> str:
    """What the API server said: `HTTP 404 Not Found: <Status.message>`, or the connection error."""
    if not isinstance(error, ApiException):
        return f"{type(error).__name__}: {error}"
    message = None
    try:
        body = json.loads(error.body) if error.body else None
        message = body.get("message") if isinstance(body, dict) else None
    except (TypeError, ValueError):
        message = str(error.body)[:300]
    return f"HTTP {error.status} {error.reason}" + (f": {message}" if message else "")


@dataclasses.dataclass(frozen=True)
class Node:
    """What drain and undrain need to know of a Node object."""

    name: str
    unschedulable: bool
    drained_by: str | None  # the idempotency key of gpupool's cordon, if it is one
    resource_version: str | None

    def snapshot(self) -> dict:
        out: dict = {"unschedulable": self.unschedulable, "resource_version": self.resource_version}
        if self.drained_by:
            out["drained_by"] = self.drained_by
        return out


def read_node(obj: object) -> Node:
    """A Node object (`GET /api/v1/nodes/<name>`) as `Node`; ValueError if it is not one."""
    if not isinstance(obj, dict) or obj.get("kind") != "Node" or not isinstance(obj.get("metadata"), dict):
        raise ValueError("the answer is not a Node object")
    meta, spec = obj["metadata"], obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return Node(str(meta.get("name")), spec.get("unschedulable") is True, annotations.get(DRAINED_BY),
                meta.get("resourceVersion"))


@dataclasses.dataclass
class _Plan:
    outcome: Outcome
    reason: str
    patch: dict | None = None
    before: dict | None = None
    after: dict | None = None
    effects: dict = dataclasses.field(default_factory=dict)


class _Conflict(Exception):
    """The Node changed between the read and the patch (HTTP 409)."""


class KubernetesNodeEnforcer:
    """`Enforcer` of drain and undrain for a Kubernetes cluster. `core` is a kubernetes CoreV1Api
    (tests pass one whose HTTP answers are recorded); made from `config` when first needed."""

    engine = "kueue"

    def __init__(self, ledger: ActionLedger, config: KubernetesConfig | None = None, core: CoreV1Api | None = None,
                 *, lock_dir: Path | None = None):
        if ledger.engine != self.engine:
            raise ValueError(f"the ledger is for engine {ledger.engine!r}, expected {self.engine!r}")
        self.ledger = ledger
        self.config = config or KubernetesConfig()
        self._core = core
        self.lock_dir = Path(lock_dir) if lock_dir else ledger.audit_root.parent / ".locks" / self.engine

    @property
    def core(self) -> CoreV1Api:
        if self._core is None:
            self._core = CoreV1Api(api_client(self.config))
        return self._core

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        kind = ActionKind(action.kind)
        object_kind = drain_object_kind(action.target)
        if kind not in NODE_ACTIONS:
            return self.ledger.answer(action, now, Outcome.REFUSED, f"{kind.value} is not a node action: the "
                                      f"Kubernetes node enforcer only drains and undrains", {}, object_kind=object_kind)
        with claim_key(self.lock_dir, action.idempotency_key):
            previous = self.ledger.answered_before(action, now, object_kind)
            if previous is not None:
                return previous
            for tries_left in (1, 0):
                plan = self._plan(action, kind)
                outcome, reason, effects = plan.outcome, plan.reason, dict(plan.effects)
                if outcome == Outcome.APPLIED and action.dry_run:
                    flag = str(effects["unschedulable"]).lower()
                    outcome = Outcome.DRY_RUN
                    reason = f"dry run: would patch Node {effects['node']} spec.unschedulable={flag}: {reason}"
                elif outcome == Outcome.APPLIED:
                    try:
                        failure = self._patch(effects["node"], plan.patch)
                    except _Conflict:
                        if tries_left:
                            continue
                        failure = f"Node {effects['node']} kept changing while it was read and patched (HTTP 409)"
                    if failure:
                        outcome, reason, effects = Outcome.REFUSED, failure, {}
                elif action.dry_run:
                    reason = f"dry run: {reason}"
                break
            return self.ledger.answer(action, now, outcome, reason, effects, object_kind=object_kind,
                                      before=plan.before, after=plan.after)

    def _plan(self, action: Action, kind: ActionKind) -> _Plan:
        try:
            name, gpu = drain_target(action.target)
        except ValueError as error:
            return _Plan(Outcome.REFUSED, str(error))
        try:
            node = self.find_node(name)
        except CONNECTION_ERRORS as error:
            return _Plan(Outcome.REFUSED, f"cannot read Node {name}: {api_error(error)}")
        except ValueError as error:
            return _Plan(Outcome.REFUSED, f"cannot read Node {name}: {error}")
        if node is None:
            return _Plan(Outcome.REFUSED, f"no Node {name} in the cluster")
        before = node.snapshot()
        if action.evidence:
            before["evidence"] = action.evidence
        reason = action_reason(action)
        if gpu is not None:
            verb = "cordons" if kind == ActionKind.DRAIN else "uncordons"
            reason += f"; Kubernetes {verb} whole nodes: GPU {gpu}'s node {name}, all its GPUs"
        meta = {"resourceVersion": node.resource_version} if node.resource_version else {}
        if kind == ActionKind.DRAIN:
            if node.unschedulable:
                by = f"by key {node.drained_by}" if node.drained_by else "not by gpupool"
                return _Plan(Outcome.REFUSED, f"Node {name} is already cordoned ({by}): not drained by this key",
                             before=before)
            annotations = {DRAINED_BY: action.idempotency_key[:ANNOTATION_LIMIT],
                           DRAIN_REASON: action_reason(action)[:ANNOTATION_LIMIT]}
            patch = {"metadata": {**meta, "annotations": annotations}, "spec": {"unschedulable": True}}
            return _Plan(Outcome.APPLIED, reason, patch, before=before, after={"unschedulable": True, **annotations},
                         effects={"drained": True, "node": name, "unschedulable": True})
        if not node.unschedulable:
            return _Plan(Outcome.REFUSED, f"Node {name} is not cordoned", before=before)
        if not node.drained_by:
            return _Plan(Outcome.REFUSED, f"Node {name} was cordoned by someone else (no {DRAINED_BY} annotation): "
                                          f"gpupool uncordons only the nodes it cordoned", before=before)
        patch = {"metadata": {**meta, "annotations": {DRAINED_BY: None, DRAIN_REASON: None}},
                 "spec": {"unschedulable": False}}
        return _Plan(Outcome.APPLIED, reason, patch, before=before, after={"unschedulable": False},
                     effects={"drained": False, "node": name, "unschedulable": False})

    def find_node(self, name: str) -> Node | None:
        """The Node as the API server has it now, or None when there is none."""
        try:
            response = self.core.read_node(name, _preload_content=False,
                                           _request_timeout=self.config.request_timeout_s)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        try:
            return read_node(json.loads(response.data))
        except (TypeError, ValueError) as error:
            raise ValueError(f"the API server answered something that is not a Node: {error}") from None

    def _patch(self, name: str, patch: dict) -> str | None:
        """Patch the Node; None on success, else why it failed. Raises _Conflict on a 409."""
        try:
            self.core.patch_node(name, patch, _preload_content=False, _request_timeout=self.config.request_timeout_s)
        except ApiException as error:
            if error.status == 409:
                raise _Conflict from error
            return f"patching Node {name} failed: {api_error(error)}"
        except CONNECTION_ERRORS as error:
            return f"patching Node {name} failed: {api_error(error)} (its state is unknown: check it)"
        return None
