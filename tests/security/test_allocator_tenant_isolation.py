"""Another tenant's job is invisible on every route, and refused requests are logged (issue 26, finding 1).

The allocator runs for real (uvicorn on a loopback port) and is called over HTTP, as tenants call it.
A tenant member must not tell another tenant's job from one that does not exist: same status, same
body (the id aside), no tenant named. Every refused request is logged (`allocator.access`) with the
token holder's name and role; never the token, nor its digest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import uvicorn

from allocator.access import ACCESS_LOGGER
from allocator.auth import parse_tokens
from allocator.inputs import MAX_BODY_BYTES
from allocator.service import api_routes, create_app
from allocator.store import Store
from tests.allocator.helpers import ADMIN, BOT, NLP, T0, TOKENS, TRAINING, VISION, small_pool

WRONG = "wrong-token-0123456789-not-configured"
CHECKPOINT = {"kind": "checkpoint", "location": "s3://ckpt/vision/run-7/step-1000", "training_step": 1000}
# a valid body for each route that takes a job id: a body error would hide what the route answers
BODIES = {"cancel": {"reason": "probe"}, "finish": {"state": "COMPLETED"}, "artifacts": CHECKPOINT}


@dataclass
class Api:
    url: str
    store: Store
    routes: list[tuple[str, str]]  # (method, path template) of every route of the app

    def call(
        self, method: str, path: str, token: str | None = None, headers: dict | None = None, **kwargs
    ) -> requests.Response:
        headers = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
        return requests.request(method, self.url + path, headers=headers, timeout=30, **kwargs)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    store = Store(tmp_path / "allocator.db", small_pool())
    app = create_app(
        store, parse_tokens(json.dumps(TOKENS), "test tokens"), clock=lambda: T0, tick_interval_s=None
    )
    routes = api_routes(app)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the allocator API did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Api(f"http://127.0.0.1:{port}", store, routes)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        store.close()


def vision_job(api: Api) -> str:
    r = api.call("POST", "/v1/jobs", VISION, json=TRAINING)
    assert r.status_code == 201 and r.json()["state"] == "RUNNING", r.text
    return r.json()["job_id"]


def job_routes(api: Api) -> list[tuple[str, str]]:
    found = [(m, p) for m, p in api.routes if "{job_id}" in p]
    assert len(found) >= 4, found  # get, cancel, finish, artifacts at least
    return found


def answer(api: Api, method: str, template: str, job_id: str, token: str) -> tuple[int, str]:
    """(status, body with the id replaced by ID) of one route for one job id."""
    suffix = template.rsplit("/", 1)[-1]
    body = BODIES.get(suffix) if method != "GET" else None
    assert method == "GET" or suffix in BODIES, (
        f"{method} {template}: give this new route a valid body in BODIES"
    )
    r = api.call(method, template.replace("{job_id}", job_id), token, json=body)
    return r.status_code, r.text.replace(job_id, "ID")


def test_another_tenants_job_is_404_on_every_route(api: Api):
    theirs = vision_job(api)
    unknown = "j-999999"  # the same shape as a real id
    for method, template in job_routes(api):
        for token in (NLP,):
            foreign = answer(api, method, template, theirs, token)
            missing = answer(api, method, template, unknown, token)
            assert foreign == missing, (
                f"{method} {template}: another tenant's job answers {foreign}, unknown {missing}"
            )
            assert "vision" not in foreign[1], f"{method} {template} names the owning tenant: {foreign}"
            if template.endswith("/finish"):
                assert foreign[0] == 403  # the role may not finish any job: that says nothing about the job
            else:
                assert foreign[0] == 404, f"{method} {template}: {foreign}"
    # nothing happened to the job, and nothing was recorded for it
    job = api.call("GET", f"/v1/jobs/{theirs}", ADMIN).json()
    assert job["state"] == "RUNNING"
    assert api.call("GET", "/v1/artifacts", ADMIN).json()["records"] == []


def test_listing_routes_show_nothing_of_another_tenants_job(api: Api):
    theirs = vision_job(api)
    assert api.call("POST", f"/v1/jobs/{theirs}/artifacts", VISION, json=CHECKPOINT).status_code == 201
    for path, params in [
        ("/v1/jobs", {}),
        ("/v1/jobs", {"tenant": "vision"}),
        ("/v1/jobs", {"queue": "vision-train"}),
        ("/v1/events", {"cursor": 0}),
        ("/v1/audit", {"cursor": 0}),
        ("/v1/artifacts", {"cursor": 0}),
    ]:
        r = api.call("GET", path, NLP, params=params)
        assert r.status_code == 200, (path, r.text)
        assert theirs not in r.text, f"{path} {params} shows another tenant's job to a member: {r.text[:300]}"


def _logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ACCESS_LOGGER]


def test_refused_requests_are_logged_with_the_holders_name_never_the_token(
    api: Api, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    theirs = vision_job(api)
    assert api.call("GET", f"/v1/jobs/{theirs}", NLP).status_code == 404  # another tenant's job
    assert api.call("POST", f"/v1/jobs/{theirs}/artifacts", NLP, json=CHECKPOINT).status_code == 404
    assert api.call("GET", "/v1/jobs/j-999999", NLP).status_code == 404  # an unknown one
    assert api.call("POST", f"/v1/jobs/{theirs}/cancel", BOT).status_code == 403  # the role may not
    assert api.call("GET", "/v1/jobs", WRONG).status_code == 401
    assert api.call("GET", "/v1/jobs").status_code == 401
    assert api.call("POST", "/v1/jobs", VISION, json={**TRAINING, "gpus": 0}).status_code == 422
    big = b'{"job_name": "' + b"x" * (MAX_BODY_BYTES + 1) + b'"}'
    r = api.call("POST", "/v1/jobs", VISION, data=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert api.call("GET", "/v1/jobs", VISION).status_code == 200  # an answered request is not logged

    records = _logged(caplog)
    lines = [r.getMessage() for r in records]
    by_status: dict[int, list[dict]] = {}
    for record in records:
        by_status.setdefault(record.access["status"], []).append(record.access)
    assert sorted(by_status) == [401, 403, 404, 413, 422], lines

    foreign, foreign_report, unknown = by_status[404]
    assert (foreign["holder"], foreign["role"], foreign["tenant"]) == ("nina", "tenant_member", "nlp")
    assert (foreign["method"], foreign["path"]) == ("GET", f"/v1/jobs/{theirs}")
    assert foreign["reason"] == f"job {theirs} not found"
    assert "another tenant" in foreign["note"]  # the operator sees what the tenant may not
    assert (
        foreign_report["path"] == f"/v1/jobs/{theirs}/artifacts"
        and "another tenant" in foreign_report["note"]
    )
    assert unknown["reason"] == "job j-999999 not found" and not unknown.get("note")
    assert by_status[403][0]["holder"] == "gov-bot" and "may not" in by_status[403][0]["reason"]
    wrong, missing = by_status[401]
    assert wrong["holder"] == "unknown token" and missing["holder"] == "no token"
    assert by_status[422][0]["holder"] == "vic" and "gpus" in by_status[422][0]["reason"]
    assert by_status[413][0]["holder"] == "vic"
    assert any("nina" in line and "404" in line and f"/v1/jobs/{theirs}" in line for line in lines), lines
    assert any("unknown token" in line and "401" in line for line in lines), lines

    # no token material anywhere: neither the token, nor a part of it, nor its digest
    text = caplog.text + "\n".join(repr(r.__dict__) for r in records)
    for token in (ADMIN, BOT, VISION, NLP, WRONG):
        assert token not in text and token[:12] not in text
        assert hashlib.sha256(token.encode()).hexdigest() not in text


def test_a_log_line_cannot_be_forged_through_the_path(api: Api, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    assert api.call("GET", "/v1/jobs/j-1%0Arefused%20status=200", NLP).status_code == 404
    (line,) = [r.getMessage() for r in _logged(caplog)]
    assert "\n" not in line and "\r" not in line
