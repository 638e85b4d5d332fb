"""The pool and its nodes: the pool snapshot, nodes and GPUs with their drains, and one node's
metrics as dcgm-exporter exposes them."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import PlainTextResponse

from allocator.api.deps import Anyone, Credentials, HostName, SettingsDep, StoreDep, request_principal
from allocator.api.wire import StrictJSONRoute
from allocator.records import pool_snapshot
from allocator.telemetry import render_node_metrics

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

router = APIRouter(route_class=StrictJSONRoute)


@router.get("/v1/pool")
def pool(who: Anyone, store: StoreDep, settings: SettingsDep) -> dict:
    with store.lock:
        return pool_snapshot(store.engine.current_pool(), None, store.now(settings.clock()))


@router.get("/v1/nodes")
def nodes(who: Anyone, store: StoreDep) -> dict:
    """The pool's nodes and GPUs with their drains: `drained` on a GPU is true when it or its node
    is drained (it takes no new work); `drain` says how that target itself was drained."""
    with store.lock:
        drained = store.engine.drained()
    out = []
    for node in store.pool.nodes:
        node_drain = drained.get(node.host)
        gpus = []
        for g in node.gpus:
            drain = drained.get(f"{node.host}/{g.index}")
            gpus.append(
                {
                    "gpu": g.index,
                    "uuid": g.uuid,
                    "gpu_model": g.gpu_model,
                    "drained": bool(drain or node_drain),
                    "drain": drain,
                }
            )
        out.append(
            {
                "host": node.host,
                "node_pool": node.node_pool,
                "drained": node_drain is not None,
                "drain": node_drain,
                "gpus": gpus,
            }
        )
    return {"nodes": out}


@router.get("/nodes/{host}/metrics", response_class=PlainTextResponse)
def node_metrics(
    host: HostName, credentials: Credentials, store: StoreDep, settings: SettingsDep
) -> PlainTextResponse:
    """dcgm-exporter's exposition of one node as it is now. Open like the real exporter, but job ids
    are tenants' data: without a token no series names its job (`hpc_job`); an admin's or the
    governance bot's token names every job, a tenant member's its tenant's jobs only. A token that
    is not configured is 401, so a scraper with a wrong token fails loudly instead of losing labels."""
    who = None
    if credentials is not None:
        who = request_principal(settings.tokens, credentials)
    if host not in {n.host for n in store.pool.nodes}:
        raise HTTPException(404, f"node {host} not found")

    def show_job(job) -> bool:
        return who is not None and who.sees_tenant(job.spec.tenant)

    with store.lock:
        holders = dict(store.engine.holders())
        now = store.now(settings.clock())
        text = render_node_metrics(
            store.pool, holders, host, now, profiles=settings.profiles, show_job=show_job
        )
    return PlainTextResponse(text, media_type=METRICS_CONTENT_TYPE)
