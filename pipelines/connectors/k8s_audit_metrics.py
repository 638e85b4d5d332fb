"""The audit webhook's Prometheus metrics, served on its `GET /metrics` without the bearer token (the
token guards the POSTs that land events; these are counts only).

One registry per server, so that several webhooks in one process (the tests) keep their own series.
The route label is one of the webhook's few paths, never the path a client sent: a batch is taken on
any path (the API server's kubeconfig names it), so every POST is `*`, and an unknown GET `unmatched`.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

GET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
NO_ANSWER = "none"  # the status label of a request whose client went away before it was answered
# a batch is appended and fsynced before its answer: milliseconds, seconds on a slow disk
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def route_of(method: str, path: str) -> str:
    """The route label of a request (bounded: a client cannot make up new ones)."""
    if method == "POST":
        return "*"
    path = path.split("?", 1)[0].rstrip("/")
    return path if path in GET_ROUTES else "unmatched"


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gpupool_audit_webhook_requests", "HTTP requests answered by the audit webhook, by route and status.",
            ["method", "route", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "gpupool_audit_webhook_request_duration_seconds", "Time to answer a request, by route.",
            ["method", "route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.events = Counter(
            "gpupool_audit_webhook_events", "Audit events written to the landing zone (refused ones included).",
            registry=self.registry,
        )
        self.refused = Counter(
            "gpupool_audit_webhook_refused_events",
            "Items written as RefusedEvent stand-ins (quarantined at ingest with the reason).", registry=self.registry,
        )

    def observe(self, method: str, path: str, status: int | None, seconds: float) -> None:
        route = route_of(method, path)
        self.requests.labels(method, route, NO_ANSWER if status is None else str(status)).inc()
        self.latency.labels(method, route).observe(seconds)
