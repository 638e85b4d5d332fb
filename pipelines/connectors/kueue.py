"""Kueue Workload state into the landing zone.

`KueueClient` lists Workloads through the official client
(`CustomObjectsApi.list_cluster_custom_object("kueue.x-k8s.io", <version>, "workloads")`, or per
configured namespace, paged) and the Pods Kueue started (label `kueue.x-k8s.io/podset`, for their
nodes); `RecordedKueue` reads the same two documents recorded in a folder. `land_snapshot` merges a
snapshot into the day's `landing/kueue/<day>/workloads.json` (one copy of each Workload per
attempt-state seen that day, the latest; see `pipelines.sources.kueue_objects.attempt_state`) and
`pods.json` (each pod once, its latest copy), so a Workload that ends and is deleted between two
snapshots keeps what an earlier one saw. The Dagster resource is `pipelines.resources.kueue.KueueState`.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import kubernetes.client as k8s

from allocator.filemodes import READER_MODE, write_atomic
from pipelines.connectors.bounded import Budget, SourceAnswerError
from pipelines.connectors.kubernetes import KubernetesAnswerError, KubernetesConfig, api_client
from pipelines.sources.kueue_objects import GROUP, attempt_state

KUEUE_SOURCE = "kueue"


@dataclass(frozen=True)
class Snapshot:
    """A WorkloadList and a PodList, as the API returned them."""

    workloads: dict
    pods: dict | None


class KueueSource(Protocol):
    def snapshot(self, day: dt.date) -> Snapshot: ...


class KueueClient:
    """Live: Workloads and Kueue's pods through the official client (CustomObjectsApi, CoreV1Api)."""

    def __init__(self, config: KubernetesConfig, custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api):
        self.config = config
        self.custom = custom
        self.core = core

    @classmethod
    def from_config(cls, config: KubernetesConfig) -> KueueClient:
        client = api_client(config)
        return cls(config, k8s.CustomObjectsApi(client), k8s.CoreV1Api(client))

    def snapshot(self, day: dt.date) -> Snapshot:
        budget = self._budget()  # one deadline for both listings
        return Snapshot(self.workloads(budget), self.pods(budget))

    def _budget(self) -> Budget:
        return Budget(deadline_s=self.config.deadline_s, max_pages=self.config.max_pages)

    def workloads(self, budget: Budget | None = None) -> dict:
        """The WorkloadList of the cluster (or of the configured namespaces), every page."""
        cfg = self.config
        budget = budget or self._budget()

        def page(namespace: str | None, token: str | None) -> object:
            kwargs = {"limit": cfg.page_size, "_request_timeout": budget.timeout("workloads", cfg.request_timeout_s),
                      "_preload_content": False}  # parsed here, within the depth limit
            if token:
                kwargs["_continue"] = token
            if namespace is None:
                return self.custom.list_cluster_custom_object(GROUP, cfg.kueue_version, "workloads", **kwargs)
            return self.custom.list_namespaced_custom_object(
                GROUP, cfg.kueue_version, namespace, "workloads", **kwargs
            )

        return _all_pages(page, cfg.namespaces, "WorkloadList", f"{GROUP}/{cfg.kueue_version}", budget)

    def pods(self, budget: Budget | None = None) -> dict:
        """The PodList of the pods Kueue started (by label), as JSON."""
        cfg = self.config
        budget = budget or self._budget()

        def page(namespace: str | None, token: str | None) -> object:
            kwargs = {
                "label_selector": cfg.pod_label_selector,
                "limit": cfg.page_size,
                "_request_timeout": budget.timeout("pods", cfg.request_timeout_s),
                "_preload_content": False,
            }
            if token:
                kwargs["_continue"] = token
            if namespace is None:
                response = self.core.list_pod_for_all_namespaces(**kwargs)
            else:
                response = self.core.list_namespaced_pod(namespace, **kwargs)
            return response  # the API's own JSON (parsed in _all_pages), not the client's Python models

        return _all_pages(page, cfg.namespaces, "PodList", "v1", budget)


def _all_pages(
    page: Callable[[str | None, str | None], object], namespaces: list[str], kind: str, api_version: str,
    budget: Budget,
) -> dict:
    """Every page of a listing per namespace, within the pull's bounds (a repeated `continue` token,
    the page cap, the deadline, the JSON depth: KubernetesAnswerError naming the listing)."""
    items: list = []
    metadata: dict = {}
    for namespace in namespaces or [None]:
        where = f"listing {kind} in {namespace or 'all namespaces'}"
        cursor = budget.cursor(where)
        token = None
        try:
            while True:
                doc = budget.document(page(namespace, token), where)
                if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
                    raise KubernetesAnswerError(f"{where}: the answer has no 'items' list")
                items += doc["items"]
                meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
                metadata = metadata or {k: v for k, v in meta.items() if k != "continue"}
                token = meta.get("continue")
                if not cursor.advance(token):
                    break
        except SourceAnswerError as err:
            raise KubernetesAnswerError(str(err)) from None
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "items": items}


class RecordedKueue:
    """Offline: `<folder>/<day>/workloads.json` (a WorkloadList) and, optionally, `pods.json` (a PodList)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def snapshot(self, day: dt.date) -> Snapshot:
        day_dir = self.folder / day.isoformat()
        workloads = day_dir / "workloads.json"
        if not workloads.is_file():
            raise FileNotFoundError(f"{workloads}: no recorded Kueue Workloads for {day}")
        pods = day_dir / "pods.json"
        return Snapshot(_read_json(workloads), _read_json(pods) if pods.is_file() else None)


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_bytes())
    except ValueError as error:
        raise KubernetesAnswerError(f"{path}: not JSON: {error}") from None
    if not isinstance(doc, dict):
        raise KubernetesAnswerError(f"{path}: expected a JSON object (a List)")
    return doc


def merge_workloads(existing: dict | None, new: dict) -> dict:
    """The day's WorkloadList after a snapshot: one copy per (uid, evictions, evicted now), the latest;
    copies in the order their states were first seen; unreadable items kept (ingest quarantines them)."""
    merged: dict[object, dict] = {}
    for doc in (existing, new):
        for item in (doc or {}).get("items") or []:
            uid, evictions, evicted = attempt_state(item)
            key = (uid, evictions, evicted) if uid else ("unreadable", json.dumps(item, sort_keys=True))
            merged[key] = item  # replacing keeps the first-seen position
    base = new if new.get("kind") == "WorkloadList" else (existing or new)
    return {
        "apiVersion": base.get("apiVersion"),
        "kind": "WorkloadList",
        "metadata": new.get("metadata") or {},
        "items": list(merged.values()),
    }


def merge_pods(existing: dict | None, new: dict | None) -> dict | None:
    """The day's PodList: each pod (by uid) once, its latest copy."""
    if new is None:
        return existing
    merged: dict[str, dict] = {}
    for doc in (existing, new):
        for item in (doc or {}).get("items") or []:
            uid = ((item or {}).get("metadata") or {}).get("uid") if isinstance(item, dict) else None
            merged[str(uid) if uid else json.dumps(item, sort_keys=True)] = item
    return {
        "apiVersion": "v1",
        "kind": "PodList",
        "metadata": new.get("metadata") or {},
        "items": list(merged.values()),
    }


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write_atomic(path: Path, doc: dict) -> None:
    write_atomic(path, json.dumps(doc, separators=(",", ":")) + "\n", READER_MODE)


def land_snapshot(landing: Path, day: dt.date, snapshot: Snapshot) -> list[Path]:
    """Merge a snapshot into landing/kueue/<day>/workloads.json and pods.json (atomic replace, locked)."""
    folder = Path(landing) / KUEUE_SOURCE / day.isoformat()
    with _folder_lock(folder):
        workloads_path, pods_path = folder / "workloads.json", folder / "pods.json"
        old = _read_json(workloads_path) if workloads_path.is_file() else None
        _write_atomic(workloads_path, merge_workloads(old, snapshot.workloads))
        paths = [workloads_path]
        pods = merge_pods(_read_json(pods_path) if pods_path.is_file() else None, snapshot.pods)
        if pods is not None:
            _write_atomic(pods_path, pods)
            paths.append(pods_path)
    return paths

