"""Kubernetes: the `kubernetes:` section of gpupool.yml and a client for the configured cluster.

Connection: a kubeconfig file and context, in-cluster service account, or `api_server` with
`token: ${K8S_TOKEN}`; secrets only from the environment. What uses it: `kueue.py` (Kueue
Workloads into the landing zone), `k8s_audit.py` (the audit webhook backend), the Kueue
enforcer (`pipelines/enforcement/kueue.py`) and the governance tick's Kueue reader
(`pipelines/governance/running_kueue.py`, scoped by `kubernetes.governance`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

import kubernetes.client as k8s
from kubernetes import config as k8s_config
from pydantic import BaseModel, ConfigDict, Field, field_validator

from allocator.model import TEMPLATES
from pipelines.config import section
from pipelines.connectors.bounded import MAX_PAGES, PULL_DEADLINE_S
from pipelines.sources.kueue_objects import PODSET_LABEL, KueueMapping

SECTION = "kubernetes"


class KubernetesAnswerError(RuntimeError):
    """The API server (or a recording of it) answered something that is not the expected document."""



class AuditWebhookConfig(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(9444, ge=0, lt=65536)
    token: str | None = Field(
        None, description="bearer token the API server sends: write ${GPUPOOL_AUDIT_TOKEN}"
    )
    certfile: str | None = Field(None, description="TLS certificate (PEM); plain HTTP without one")
    keyfile: str | None = None
    max_body_mib: float = Field(64.0, gt=0)
    max_item_mib: float = Field(4.0, gt=0, description="an item over this is refused (quarantined)")
    max_depth: int = Field(128, ge=1, le=512, description="an item nested deeper is refused (quarantined)")
    max_items: int = Field(10_000, ge=1, description="a batch of more items is answered 413")


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1123 label, as Kubernetes names namespaces


class KubernetesGovernance(BaseModel):
    """`kubernetes.governance` in gpupool.yml: which running Workloads the live governance tick reads
    (pipelines/governance/running_kueue.py) and how each becomes a job of the policies. Without this
    section the tick reads nothing from Kubernetes; with it, only the namespaces it names are listed."""

    model_config = ConfigDict(extra="forbid")
    namespaces: list[str] = Field(min_length=1, description="only Workloads and pods of these namespaces are read")
    queue_from: Literal["local_queue", "cluster_queue"] = Field(
        "local_queue", description="the policies' queue: the LocalQueue (spec.queueName) or the ClusterQueue admitting it")
    template_by_queue: dict[str, str] = Field(
        default_factory=dict, description="queue (as queue_from names it) -> template, for Workloads without the "
                                          "template label")
    default_template: str | None = Field(None, description="the template of a Workload nothing else names one for")
    pod_gpu_lookback_s: float = Field(
        300.0, gt=0, description="how far back dcgm-exporter's pod labels are read (scrape rounds or Prometheus)")

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _NAMESPACE.fullmatch(name):
                raise ValueError(f"namespace {name!r} is not a Kubernetes namespace name (a DNS-1123 label)")
        return value

    @field_validator("template_by_queue")
    @classmethod
    def _templates(cls, value: dict[str, str]) -> dict[str, str]:
        for queue, template in value.items():
            _known_template(template, f"template_by_queue[{queue}]")
        return value

    @field_validator("default_template")
    @classmethod
    def _default(cls, value: str | None) -> str | None:
        return value if value is None else _known_template(value, "default_template")


def _known_template(template: str, where: str) -> str:
    if template not in TEMPLATES:
        raise ValueError(f"{where} is {template!r}: not a template ({', '.join(TEMPLATES)})")
    return template


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
    deadline_s: float = Field(PULL_DEADLINE_S, gt=0, description="one snapshot, every page together")
    max_pages: int = Field(MAX_PAGES, ge=1, description="pages of one listing")
    # enforcement
    protected_label: str = Field(
        "gpupool.io/protected", description="a Workload labelled <label>=true is exempt"
    )
    protected_priority_classes: list[str] = Field(default_factory=list)
    protected_namespaces: list[str] = Field(default_factory=list)
    preempt_timeout_s: float = Field(60.0, gt=0, description="how long preempt waits for Kueue to evict")
    preempt_poll_s: float = Field(1.0, gt=0)
    audit_webhook: AuditWebhookConfig = Field(default_factory=AuditWebhookConfig)
    governance: KubernetesGovernance | None = Field(
        None, description="running Workloads the every-minute governance tick reads (none without this section)")


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

