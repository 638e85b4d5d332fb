"""The allocator's Prometheus metrics, served on `/metrics` (`allocator.api.routes.health`).

Each app has a registry of its own (`AllocatorMetrics.registry`), so that several apps in one
process (the tests) never share a series. Two kinds of series:

- per request, counted by `RequestMetrics` around the whole app: requests by method, route and
  status, and their latency. The route is the template (`/v1/jobs/{job_id}`), never the path, so
  that an id cannot become a label; a path no route matches is `unmatched`.
- read from the store at each scrape (`StoreCollector`): jobs waiting and running per queue, and the
  admissions and preemptions in the store's event log (counters over the whole log, so they survive
  a restart).

Nothing here names a job, a user or a tenant: queue names (pool configuration) are the only labels
besides the routes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from allocator.store import Store

UNMATCHED = "unmatched"  # the route label of a request no route matched (a 404 on an unknown path)
# request latencies: the API answers from memory in milliseconds; a slow disk shows in the top buckets
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def route_template(scope: Scope) -> str:
    """The template of the route that answered (Starlette leaves it in the scope), else `unmatched`."""
    return getattr(scope.get("route"), "path", None) or UNMATCHED


class StoreCollector(Collector):
    """Queue depth and the event log's admissions and preemptions, read from the store at each scrape."""

    def __init__(self, store: Store):
        self.store = store

    def collect(self) -> Iterator[Metric]:
        with self.store.lock:
            depths = self.store.engine.queue_depths()
        events = self.store.event_counts()
        pending = GaugeMetricFamily("allocator_queue_pending_jobs", "Jobs waiting in the queue.", labels=["queue"])
        running = GaugeMetricFamily("allocator_queue_running_jobs", "Jobs of the queue running.", labels=["queue"])
        for queue, (waiting, started) in sorted(depths.items()):
            pending.add_metric([queue], waiting)
            running.add_metric([queue], started)
        yield pending
        yield running
        yield CounterMetricFamily(
            "allocator_admissions", "Jobs admitted to run (the event log's admit events).", events.get("admit", 0)
        )
        yield CounterMetricFamily(
            "allocator_preemptions", "Jobs preempted (the event log's preempt events).", events.get("preempt", 0)
        )


class AllocatorMetrics:
    """One app's registry: the request series and the store's."""

    def __init__(self, store: Store):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "allocator_http_requests", "HTTP requests answered, by route template and status.",
            ["method", "route", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "allocator_http_request_duration_seconds", "Time to answer an HTTP request, by route template.",
            ["method", "route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.registry.register(StoreCollector(store))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)


class RequestMetrics:
    """ASGI middleware counting every answer (the access log's 4xx, the 413 of the body limit and an
    unhandled error's 500 included) under the route that took the request."""

    def __init__(self, app: ASGIApp, metrics: AllocatorMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets when the app fails before answering

        async def status_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, status_send)
        finally:
            self.metrics.observe(scope["method"], route_template(scope), status, time.perf_counter() - started)
