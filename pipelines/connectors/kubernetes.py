"""Kubernetes: the audit-log webhook backend, and Kueue Workload state into the landing zone.

Audit webhook. The API server's webhook backend (`--audit-webhook-config-file`) POSTs batches of
audit events as an `audit.k8s.io/v1` `EventList`. `serve_audit_webhook` answers them: each event
becomes one JSON line in `landing/k8s_audit/<day>/webhook-<instance>.jsonl`, the day taken from
the event's stageTimestamp (else timestamp, else requestReceivedTimestamp, as the k8s_audit parser
reads it; else the day the batch arrived), where the `k8s_audit` ingest source reads it. A batch is
written whole or not at all (appended under a file lock, fsynced, truncated back on failure) before
the 200, so the API server's retry of a failed batch does not leave half of it twice. 400 for a
body that is not an EventList, 401 without the bearer token when one is set (API server
kubeconfig: `users[].user.token`), 411/413 for a missing or oversized body. An event is written as
it came: a malformed one is quarantined at ingest, with the reason.

Kueue. `KueueClient` lists Workloads through the official client
(`CustomObjectsApi.list_cluster_custom_object("kueue.x-k8s.io", <version>, "workloads")`, or per
configured namespace, paged) and the Pods Kueue started (label `kueue.x-k8s.io/podset`, for their
nodes); `RecordedKueue` reads the same two documents recorded in a folder. `land_snapshot` merges a
snapshot into the day's `landing/kueue/<day>/workloads.json` (one copy of each Workload per
attempt-state seen that day, the latest; see `pipelines.sources.kueue.attempt_state`) and
`pods.json` (each pod once, its latest copy), so a Workload that ends and is deleted between two
snapshots keeps what an earlier one saw. `KueueState` is the Dagster resource (live or offline).

Connection (section `kubernetes:` of gpupool.yml): a kubeconfig file and context, in-cluster
service account, or `api_server` with `token: ${K8S_TOKEN}`; secrets only from the environment.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hmac
import http.server
import json
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import dagster as dg
import kubernetes.client as k8s
from kubernetes import config as k8s_config
from pydantic import BaseModel, Field

from pipelines.config import section
from pipelines.sources.jsonl import RecordError, parse_rfc3339
from pipelines.sources.k8s_audit import QUARANTINE_SOURCE as AUDIT_SOURCE
from pipelines.sources.k8s_audit import TIME_FIELDS
from pipelines.sources.kueue import GROUP, PODSET_LABEL, KueueMapping, attempt_state
from pipelines.warehouse import Warehouse

SECTION = "kubernetes"
KUEUE_SOURCE = "kueue"
log = logging.getLogger(__name__)


class KubernetesAnswerError(RuntimeError):
    """The API server (or a recording of it) answered something that is not the expected document."""


class AuditBodyError(ValueError):
    """A webhook POST body that is not an audit EventList; str(error) is the 400 answer."""


class AuditWebhookConfig(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(9444, ge=0, lt=65536)
    token: str | None = Field(
        None, description="bearer token the API server sends: write ${GPUPOOL_AUDIT_TOKEN}"
    )
    certfile: str | None = Field(None, description="TLS certificate (PEM); plain HTTP without one")
    keyfile: str | None = None
    max_body_mib: float = Field(64.0, gt=0)


class KubernetesConfig(KueueMapping):
    """The `kubernetes:` section of the connector configuration (gpupool.yml)."""

    kubeconfig: str | None = Field(None, description="kubeconfig file; default $KUBECONFIG or ~/.kube/config")
    context: str | None = Field(None, description="kubeconfig context; default its current-context")
    in_cluster: bool | None = Field(
        None,
        description="service account of the pod; default: when in a pod "
        "and no kubeconfig or api_server is set",
    )
    api_server: str | None = Field(
        None, description="https://host:6443, with token (instead of a kubeconfig)"
    )
    token: str | None = Field(
        None, description="bearer token for api_server: write ${K8S_TOKEN}, never the token"
    )
    ca_file: str | None = None
    verify_ssl: bool = True
    namespaces: list[str] = Field(
        default_factory=list, description="namespaces to list; empty: the whole cluster"
    )
    kueue_version: str = Field(
        "v1beta1", description="Kueue API version served: v1beta1, or v1beta2 (Kueue 0.15+)"
    )
    pod_label_selector: str = Field(
        PODSET_LABEL, description="pods listed for their nodes (Kueue labels the pods it starts)"
    )
    page_size: int = Field(500, ge=1)
    request_timeout_s: float = Field(30.0, gt=0)
    # enforcement
    protected_label: str = Field(
        "gpupool.io/protected", description="a Workload labelled <label>=true is exempt"
    )
    protected_priority_classes: list[str] = Field(default_factory=list)
    protected_namespaces: list[str] = Field(default_factory=list)
    preempt_timeout_s: float = Field(60.0, gt=0, description="how long preempt waits for Kueue to evict")
    preempt_poll_s: float = Field(1.0, gt=0)
    audit_webhook: AuditWebhookConfig = Field(default_factory=AuditWebhookConfig)


def load_kubernetes_config(path: Path | None = None) -> KubernetesConfig:
    """The `kubernetes` section of the configuration file, or the defaults when it has none."""
    return section(SECTION, KubernetesConfig, path) or KubernetesConfig()


def api_client(config: KubernetesConfig) -> k8s.ApiClient:
    """An ApiClient for the configured cluster: api_server + token, in-cluster, or a kubeconfig."""
    configuration = k8s.Configuration()
    if config.api_server:
        configuration.host = config.api_server
        if config.token:
            configuration.api_key = {"authorization": config.token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        configuration.ssl_ca_cert = config.ca_file
        configuration.verify_ssl = config.verify_ssl
    elif config.in_cluster or (
        config.in_cluster is None and not config.kubeconfig and "KUBERNETES_SERVICE_HOST" in os.environ
    ):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        kubeconfig = os.path.expanduser(config.kubeconfig) if config.kubeconfig else None
        k8s_config.load_kube_config(
            config_file=kubeconfig,
            context=config.context,
            client_configuration=configuration,
            persist_config=False,
        )
    return k8s.ApiClient(configuration)


# --- Kueue state ---------------------------------------------------------------------------------


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
        return Snapshot(self.workloads(), self.pods())

    def workloads(self) -> dict:
        """The WorkloadList of the cluster (or of the configured namespaces), every page."""
        cfg = self.config

        def page(namespace: str | None, token: str | None) -> dict:
            kwargs = {"limit": cfg.page_size, "_request_timeout": cfg.request_timeout_s}
            if token:
                kwargs["_continue"] = token
            if namespace is None:
                return self.custom.list_cluster_custom_object(GROUP, cfg.kueue_version, "workloads", **kwargs)
            return self.custom.list_namespaced_custom_object(
                GROUP, cfg.kueue_version, namespace, "workloads", **kwargs
            )

        return _all_pages(page, cfg.namespaces, "WorkloadList", f"{GROUP}/{cfg.kueue_version}")

    def pods(self) -> dict:
        """The PodList of the pods Kueue started (by label), as JSON."""
        cfg = self.config

        def page(namespace: str | None, token: str | None) -> dict:
            kwargs = {
                "label_selector": cfg.pod_label_selector,
                "limit": cfg.page_size,
                "_request_timeout": cfg.request_timeout_s,
                "_preload_content": False,
            }
            if token:
                kwargs["_continue"] = token
            if namespace is None:
                response = self.core.list_pod_for_all_namespaces(**kwargs)
            else:
                response = self.core.list_namespaced_pod(namespace, **kwargs)
            return json.loads(response.data)  # the API's own JSON, not the client's Python models

        return _all_pages(page, cfg.namespaces, "PodList", "v1")


def _all_pages(
    page: Callable[[str | None, str | None], dict], namespaces: list[str], kind: str, api_version: str
) -> dict:
    items: list = []
    metadata: dict = {}
    for namespace in namespaces or [None]:
        token = None
        while True:
            doc = page(namespace, token)
            if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
                where = namespace or "all namespaces"
                raise KubernetesAnswerError(f"listing {kind} in {where}: the answer has no 'items' list")
            items += doc["items"]
            metadata = metadata or {k: v for k, v in (doc.get("metadata") or {}).items() if k != "continue"}
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                break
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
    temp = path.with_name(f".{path.name}.partial")
    temp.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    os.replace(temp, path)


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


class KueueState(dg.ConfigurableResource):
    """Kueue Workloads (and their pods) into the landing zone, for the `kueue` ingest source.

    Live (default): the cluster of the `kubernetes:` section of the configuration file
    (`config_file`, else $GPUPOOL_CONFIG, else ./gpupool.yml). Offline: `offline_dir` holds recorded
    API answers, `<offline_dir>/<day>/workloads.json` and `pods.json`.
    """

    offline_dir: str = ""
    config_file: str = ""

    def settings(self) -> KubernetesConfig:
        return load_kubernetes_config(Path(self.config_file) if self.config_file else None)

    def client(self) -> KueueSource:
        if self.offline_dir:
            return RecordedKueue(Path(self.offline_dir))
        return KueueClient.from_config(self.settings())

    def land(self, warehouse: Warehouse, day: dt.date) -> list[Path]:
        """Take a snapshot (live: now; offline: the day's recording) and merge it into the day's files."""
        return land_snapshot(warehouse.landing, day, self.client().snapshot(day))


# --- audit webhook -------------------------------------------------------------------------------


def event_day(event: object, default: dt.date) -> dt.date:
    """The UTC day an audit event belongs to, read as the k8s_audit parser reads its time."""
    if isinstance(event, dict):
        for name in TIME_FIELDS:
            text = event.get(name)
            if isinstance(text, str):
                try:
                    return parse_rfc3339(text, name).date()
                except RecordError:
                    continue
    return default


class AuditWriter:
    """Appends batches of audit events to landing/k8s_audit/<day>/webhook-<instance>.jsonl, whole or
    not at all."""

    def __init__(self, landing: Path, instance: str | None = None):
        self.landing = Path(landing)
        self.instance = instance or socket.gethostname()
        self._lock = threading.Lock()

    def path(self, day: dt.date) -> Path:
        return self.landing / AUDIT_SOURCE / day.isoformat() / f"webhook-{self.instance}.jsonl"

    def write(self, events: list, received: dt.datetime) -> dict[str, int]:
        """Write the batch; {file: events written}. On any failure every file is truncated back to
        where it was, and it raises."""
        groups: dict[dt.date, list[bytes]] = {}
        for event in events:
            line = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
            groups.setdefault(event_day(event, received.date()), []).append(line)
        opened: list[tuple[int, int]] = []
        with self._lock:
            try:
                for day, lines in sorted(groups.items()):
                    path = self.path(day)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
                    fcntl.flock(fd, fcntl.LOCK_EX)  # other processes writing the same file
                    size = os.fstat(fd).st_size
                    opened.append((fd, size))
                    data = b"".join(lines)
                    if size and os.pread(fd, 1, size - 1) != b"\n":  # a writer died mid-line: end that line
                        data = b"\n" + data
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                for fd, _ in opened:
                    os.fsync(fd)
            except BaseException:
                for fd, size in opened:
                    os.ftruncate(fd, size)
                raise
            finally:
                for fd, _ in opened:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
        return {str(self.path(day)): len(lines) for day, lines in sorted(groups.items())}


def check_event_list(body: bytes) -> list:
    """The items of an audit.k8s.io EventList body; AuditBodyError says what the body is instead."""
    try:
        doc = json.loads(body)
    except ValueError as error:
        raise AuditBodyError(f"body is not JSON: {error}") from None
    if not isinstance(doc, dict):
        raise AuditBodyError(
            f"body is a JSON {type(doc).__name__}, expected an audit.k8s.io/v1 EventList object"
        )
    if doc.get("kind") != "EventList":
        raise AuditBodyError(f"body kind is {doc.get('kind')!r}, expected 'EventList' (audit.k8s.io/v1)")
    api_version = doc.get("apiVersion")
    if api_version is not None and not (
        isinstance(api_version, str) and api_version.startswith("audit.k8s.io/")
    ):
        raise AuditBodyError(f"body apiVersion is {api_version!r}, expected audit.k8s.io/v1")
    items = doc.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise AuditBodyError("body 'items' is not a list")
    return items


class _AuditHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connection
    server: AuditWebhookServer

    def _answer(self, status: int, payload: Mapping, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/healthz", "/readyz"):
            self._answer(200, {"status": "ok"})
        else:
            self._answer(404, {"error": f"no such path {self.path}: POST audit EventLists, GET /healthz"})

    def do_POST(self) -> None:
        server = self.server
        length_text = self.headers.get("Content-Length")
        if server.token is not None:
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {server.token}".encode()):
                self._drain(length_text)
                self._answer(401, {"error": "missing or wrong bearer token"}, {"WWW-Authenticate": "Bearer"})
                return
        if length_text is None or not length_text.isdigit():
            self.close_connection = True
            self._answer(411, {"error": "Content-Length is required"})
            return
        length = int(length_text)
        if length > server.max_body_bytes:
            self.close_connection = True
            self._answer(
                413, {"error": f"body of {length} bytes is over the limit of {server.max_body_bytes}"}
            )
            return
        body = self.rfile.read(length)
        try:
            events = check_event_list(body)
        except AuditBodyError as error:
            self._answer(400, {"error": str(error)})
            return
        try:
            written = server.writer.write(events, dt.datetime.now(dt.UTC).replace(tzinfo=None))
        except OSError as error:
            log.error("audit webhook: could not write a batch of %d events: %s", len(events), error)
            self._answer(500, {"error": f"could not write the batch: {error}"})
            return
        self._answer(200, {"events": len(events), "files": written})

    def _drain(self, length_text: str | None) -> None:
        if length_text and length_text.isdigit() and int(length_text) <= self.server.max_body_bytes:
            self.rfile.read(int(length_text))
        else:
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        log.debug("audit webhook %s: " + format, self.address_string(), *args)


class AuditWebhookServer(http.server.ThreadingHTTPServer):
    """The audit webhook backend; `server_address` has the bound port (port 0 picks a free one)."""

    daemon_threads = True

    def __init__(
        self,
        landing: Path,
        host: str,
        port: int,
        token: str | None = None,
        *,
        instance: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        max_body_bytes: int = 64 * 2**20,
    ):
        super().__init__((host, port), _AuditHandler)
        self.writer = AuditWriter(landing, instance)
        self.token = token or None
        self.max_body_bytes = max_body_bytes
        if certfile:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certfile, keyfile)
            self.socket = context.wrap_socket(self.socket, server_side=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        scheme = "https" if isinstance(self.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://{host}:{port}/"


def serve_audit_webhook(
    landing: Path, host: str, port: int, token: str | None = None, **options: object
) -> None:
    """Serve the audit webhook until interrupted (options: instance, certfile, keyfile, max_body_bytes)."""
    server = AuditWebhookServer(Path(landing), host, port, token, **options)
    log.info("audit webhook listening on %s, writing to %s", server.url, Path(landing) / AUDIT_SOURCE)
    try:
        server.serve_forever()
    finally:
        server.server_close()
