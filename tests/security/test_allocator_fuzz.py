"""Property-based tests of every endpoint of the allocator's HTTP API (issue 11, section 6).

Whatever the body, the strings, the numbers, the query and path parameters or the headers: no 5xx,
every JSON answer parses, and a refused request commits nothing (the command log and the jobs are as
they were; an engine rule's refusal is the one thing logged, with its status, by design), and the
store still replays to the same records afterwards.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_from_bytes

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from allocator.auth import parse_tokens
from allocator.inputs import json_problem
from allocator.model import ActionKind
from allocator.service import create_app
from allocator.store import Store
from tests.allocator.helpers import (
    ADMIN,
    BOT,
    INFERENCE,
    NLP,
    TOKENS,
    TRAINING,
    VISION,
    Clock,
    auth,
    small_pool,
)

FUZZ = settings(
    max_examples=int(os.environ.get("GPUPOOL_FUZZ_EXAMPLES", "60")),  # more for a deeper run
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    database=None,
)
TOKEN_CHOICES = [ADMIN, BOT, VISION, NLP, None, "not-a-configured-token-0123"]

# -- strategies ------------------------------------------------------------------------------------------

# any code point, lone surrogates included
any_char = st.characters(exclude_categories=())
texts = st.text(any_char, max_size=30) | st.sampled_from(["", "\ud800", "x\udfffy", "H100", "vision-train", "a" * 300])
numbers = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 1, -1, 2, 3, 1e30, 10**30, 2**63, 0.5])
)
scalars = st.none() | st.booleans() | numbers | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


def valid_bodies(job_id: str) -> dict[str, list[dict]]:
    return {
        "submit": [TRAINING, INFERENCE, {**TRAINING, "job_name": "n", "gpus": 2}],
        "cancel": [{"reason": "done"}, {}],
        "finish": [{"state": "COMPLETED", "exit_code": 0}, {"state": "FAILED", "exit_code": 1, "reason": "r"}],
        "action": [
            {"kind": "remind", "idempotency_key": "k", "target": job_id, "evidence": {"idle": 0.9}},
            {"kind": "cap_runtime", "idempotency_key": "k2", "target": job_id, "runtime_s": 3600},
            {"kind": "quota_change", "idempotency_key": "k3", "target": "vision-train", "quota": {"H100": 2}},
        ],
        "patch": [{"priority": 60}, {"quota": {"H100": 2}}, {"preemptible": True}, {"shared_with": ["nlp"]}],
    }


@st.composite
def bodies(draw, bases: list[dict]) -> bytes:
    """A request body: a valid one with fields replaced, added or dropped, random JSON, or random bytes."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "json", "bytes", "empty"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "empty":
        return b""
    if kind == "json":
        value = draw(json_values)
    else:
        value = dict(draw(st.sampled_from(bases)))
        for _ in range(draw(st.integers(1, 3))):
            keys = sorted(value) + ["extra", "gpus", "evidence", "quota", "priority", "reason", "job_name"]
            key = draw(st.sampled_from(keys))
            if draw(st.booleans()) or not value:
                value[key] = draw(json_values)
            else:
                value.pop(key, None)
    # json.dumps writes what the API must refuse: NaN, Infinity, lone surrogates as escapes such as \ud800
    text = json.dumps(value, allow_nan=True)
    if draw(st.booleans()):  # or the surrogate as (invalid) UTF-8 bytes, not escaped
        return json.dumps(value, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return text.encode()


path_params = st.text(any_char, min_size=0, max_size=20).map(
    lambda s: quote(s.encode("utf-8", "surrogatepass"), safe="")
) | st.binary(max_size=12).map(lambda b: quote_from_bytes(b, safe="")) | st.sampled_from(["a" * 300, "j-000001"])
query_values = st.binary(max_size=24).map(lambda b: quote_from_bytes(b, safe="")) | st.sampled_from(
    ["0", "-1", str(2**63), str(2**63 - 1), "1e3", "nan", "inf", "10001", "abc", "vision", "RUNNING", "%ED%A0%80"]
)
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=250)


# -- the service under test ------------------------------------------------------------------------------


@contextlib.contextmanager
def service() -> Iterator[tuple[TestClient, Store, str, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "allocator.db"
        store = Store(path, small_pool())
        try:
            app = create_app(
                store, parse_tokens(json.dumps(TOKENS), "test tokens"), clock=Clock(), tick_interval_s=None
            )
            client = TestClient(app, raise_server_exceptions=False)
            job = client.post("/v1/jobs", json=TRAINING, headers=auth(VISION))
            assert job.status_code == 201
            yield client, store, job.json()["job_id"], path
        finally:
            store.close()


def state(store: Store) -> tuple[int, int]:
    with store.lock:
        return store.command_count(), len(store.engine.jobs)


def check(store: Store, response, before: tuple[int, int], writes: bool) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.headers.get("content-type", "").startswith("application/json"):
        response.json()
    after = state(store)
    if not writes:
        assert after == before, "a read changed the store"
        return
    if response.status_code >= 400:
        assert after[1] == before[1], "a refused request added a job"
        if after[0] != before[0]:
            # only an engine rule's refusal is logged (so that replay repeats it), with its status
            assert after[0] == before[0] + 1
            status, payload = store._db.execute(
                "select status, payload from commands order by seq desc limit 1"
            ).fetchone()
            assert status == response.status_code and json_problem(json.loads(payload)) is None
            body = response.json()
            assert not isinstance(body.get("detail"), list), "a validation error was logged"
    if after[0] > before[0]:
        payload = store._db.execute("select payload from commands order by seq desc limit 1").fetchone()[0]
        assert "NaN" not in payload and "Infinity" not in payload
        assert json_problem(json.loads(payload)) is None


def send(client: TestClient, method: str, path: str, body: bytes | None, token: str | None, **headers: str):
    headers = {**headers, **(auth(token) if token else {})}
    if body is not None:
        headers.setdefault("Content-Type", "application/json")
    return client.request(method, path, content=body, headers=headers)


def assert_replays(store_path: Path, store: Store) -> None:
    """The log written under fuzzing replays to the same records."""
    with store.lock:
        expected = (store.command_count(), sorted(store.engine.jobs), store.events(0, 10000)[0])
    store.close(snapshot=False)
    reopened = Store(store_path, small_pool())
    try:
        assert reopened.replay_divergences == 0
        assert (reopened.command_count(), sorted(reopened.engine.jobs), reopened.events(0, 10000)[0]) == expected
    finally:
        reopened.close()


# -- the properties --------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["submit", "cancel", "finish", "action", "patch"])
def test_writes_never_fail_and_refusals_commit_nothing(endpoint: str):
    with service() as (client, store, job_id, path):
        bases = valid_bodies(job_id)[endpoint]

        @FUZZ
        @given(
            body=bodies(bases),
            token=st.sampled_from(TOKEN_CHOICES),
            key=st.none() | header_values,
            target=st.sampled_from([job_id, "j-999999", "vision-train", "nope"]) | path_params,
        )
        def run(body: bytes, token: str | None, key: str | None, target: str) -> None:
            method, url = {
                "submit": ("POST", "/v1/jobs"),
                "cancel": ("POST", f"/v1/jobs/{target}/cancel"),
                "finish": ("POST", f"/v1/jobs/{target}/finish"),
                "action": ("POST", "/v1/actions"),
                "patch": ("PATCH", f"/v1/queues/{target}"),
            }[endpoint]
            extra = {"Idempotency-Key": key} if key is not None else {}
            before = state(store)
            check(store, send(client, method, url, body, token, **extra), before, writes=True)

        run()
        # and the service still answers everything, from memory and after a restart
        for p in ("/v1/jobs", "/v1/events", "/v1/audit", "/v1/queues", "/v1/pool", "/v1/proposals"):
            r = client.get(p, headers=auth(ADMIN))
            assert r.status_code == 200, (p, r.text[:300])
        assert_replays(path, store)


def test_reads_never_fail_and_change_nothing():
    with service() as (client, store, _job, _):

        @FUZZ
        @given(
            path=st.sampled_from(
                ["/v1/jobs", "/v1/events", "/v1/audit", "/v1/queues", "/v1/pool", "/v1/proposals", "/healthz"]
            ),
            params=st.lists(
                st.tuples(
                    st.sampled_from(["state", "queue", "tenant", "limit", "cursor", "other"]),
                    st.integers(-(2**70), 2**70).map(str) | query_values,
                ),
                max_size=4,
            ),
            token=st.sampled_from(TOKEN_CHOICES),
        )
        @example(path="/v1/events", params=[("cursor", str(2**63))], token=BOT)
        @example(path="/v1/audit", params=[("cursor", str(10**30)), ("limit", "0")], token=VISION)
        @example(path="/v1/jobs", params=[("queue", "%ED%A0%80"), ("state", "RUNNING")], token=ADMIN)
        def run(path: str, params: list[tuple[str, str]], token: str | None) -> None:
            query = "&".join(f"{k}={v}" for k, v in params)
            before = state(store)
            r = send(client, "GET", f"{path}?{query}" if query else path, None, token)
            check(store, r, before, writes=False)

        run()


def test_path_parameters_never_fail():
    with service() as (client, store, job_id, _):

        @FUZZ
        @given(
            template=st.sampled_from(
                ["/v1/jobs/{}", "/nodes/{}/metrics", "/v1/proposals/{}/approve", "/v1/jobs/{}/cancel"]
            ),
            value=path_params | st.just(job_id) | st.just("h100-01"),
            token=st.sampled_from(TOKEN_CHOICES),
        )
        def run(template: str, value: str, token: str | None) -> None:
            method = "POST" if template.endswith(("approve", "cancel")) else "GET"
            before = state(store)
            r = send(client, method, template.format(value), None, token)
            check(store, r, before, writes=method == "POST")

        run()


@FUZZ
@given(value=json_values)
def test_any_json_value_either_validates_or_is_refused_as_a_whole(value):
    """The models' own rule: what validates is clean, bounded JSON (the store could log and answer it)."""
    from pydantic import ValidationError

    from allocator.api.bodies import ActionRequest, JobCancel, JobFinish, JobSubmit, QueuePatch

    for model, base in [
        (JobSubmit, TRAINING),
        (JobCancel, {}),
        (JobFinish, {}),
        (ActionRequest, {"kind": ActionKind.REMIND.value, "idempotency_key": "k", "target": "j"}),
        (QueuePatch, {"priority": 1}),
    ]:
        for candidate in (value, {**base, "evidence": value}, {**base, "reason": value}, {**base, "gpus": value}):
            try:
                parsed = model.model_validate(candidate)
            except ValidationError:
                continue
            dumped = parsed.model_dump(mode="json")
            assert json_problem(dumped) is None
            for number in _numbers(dumped):  # finite; integers within SQLite's and DuckDB's BIGINT
                assert math.isfinite(number) and (isinstance(number, float) or abs(number) < 2**63)


def _numbers(value) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [value]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []

