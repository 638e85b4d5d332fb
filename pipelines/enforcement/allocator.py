"""Enforcement through the built-in allocator's API (POST /v1/actions), behind the `Enforcer` interface.

The allocator does idempotency and auditing itself: the same idempotency key again answers
`already_done` (with the first answer's effects) and changes nothing; every answer is in its audit
log (action `enforcement.<kind>`, with the key), which the `allocator_audit` source ingests. So this
enforcer only translates: an `Action` becomes the request body, the answer an `ActionResult`.

What is an answer and what is not:
- 200: the engine's answer (applied, refused with the reason, already_done, dry_run, proposed);
- 4xx other than 401/403 (a request the API refuses, e.g. 422 for a missing cap): refused, with
  the API's words; asking again would get the same;
- 401/403: `AllocatorAuthError`, the token or its role is wrong: a configuration error;
- connection refused or reset, timeouts, 5xx: `DeliveryError`. The action may or may not have been
  applied (a timeout can lose the answer of an applied action); sending it again is safe, since
  the key makes a repeat `already_done`.
"""
from __future__ import annotations

import datetime as dt

import requests

from allocator.model import Action, ActionKind, ActionResult, Outcome
from pipelines.connectors.allocator import AllocatorConfig, check_auth
from pipelines.connectors.http import describe, new_session


class DeliveryError(Exception):
    """The action did not get an answer (transport failure or 5xx); retryable with the same key."""


class AllocatorEnforcer:
    engine = "allocator"

    def __init__(self, base_url: str, token: str, session: requests.Session | None = None, timeout_s: float = 10):
        self.url = f"{base_url.rstrip('/')}/v1/actions"
        self.session = session or new_session(pool_maxsize=4)
        self.headers = {"Authorization": f"Bearer {token}"}
        self.timeout_s = timeout_s

    @classmethod
    def from_config(cls, config: AllocatorConfig) -> AllocatorEnforcer:
        return cls(config.url, config.token, timeout_s=config.timeout_s)

    def apply(self, action: Action, now: dt.datetime) -> ActionResult:
        """Send the action; `now` is the caller's, the engine decides at its own time."""
        try:
            response = self.session.post(self.url, json=request_body(action), headers=self.headers,
                                         timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise DeliveryError(f"{self.url}: {describe(exc)}") from exc
        check_auth(response, self.url)
        if response.status_code >= 500:
            raise DeliveryError(f"{self.url}: HTTP {response.status_code} {response.reason}: "
                                f"{response.text.strip()[:300]}")
        if response.status_code != 200:
            return ActionResult(action.idempotency_key, ActionKind(action.kind), action.target, Outcome.REFUSED,
                                f"the allocator API answered HTTP {response.status_code}: "
                                f"{response.text.strip()[:500]}")
        try:
            body = response.json()
            return ActionResult(
                idempotency_key=body["idempotency_key"],
                kind=ActionKind(body["kind"]),
                target=body["target"],
                outcome=Outcome(body["outcome"]),
                reason=body.get("reason") or "",
                proposal_id=body.get("proposal_id"),
                effects=body.get("effects") or {},
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise DeliveryError(f"{self.url}: an answer that is not an action result: "
                                f"{response.text.strip()[:300]}") from exc


def request_body(action: Action) -> dict:
    """The ActionRequest body of allocator/api/bodies.py (the actor is the token's principal)."""
    body = {
        "kind": ActionKind(action.kind).value,
        "idempotency_key": action.idempotency_key,
        "target": action.target,
        "reason": action.reason,
        "policy": action.policy,
        "policy_version": action.policy_version,
        "evidence": action.evidence,
        "runtime_s": action.runtime_s,
        "quota": action.quota,
        "dry_run": action.dry_run,
    }
    return {k: v for k, v in body.items() if v is not None}
