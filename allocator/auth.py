"""Bearer tokens and roles of the allocator's HTTP API.

Tokens never live in the repository: they come from `GPUPOOL_ALLOCATOR_TOKENS` (a JSON object) or
from a JSON file named on the command line, mapping each token to who holds it:

    {"s3cr3t-admin": {"role": "admin", "name": "ops-alice"},
     "s3cr3t-bot":   {"role": "governance_bot", "name": "gpupool-governance"},
     "s3cr3t-cv":    {"role": "tenant_member", "tenant": "vision", "name": "bob"}}

Only SHA-256 digests of the tokens are kept in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from allocator.filemodes import OTHERS_WRITE
from allocator.inputs import MAX_NAME, has_surrogate

TOKENS_ENV = "GPUPOOL_ALLOCATOR_TOKENS"


class Role(StrEnum):
    ADMIN = "admin"  # everything: queues, quotas, approvals, any tenant's jobs
    GOVERNANCE_BOT = "governance_bot"  # reads everything; enforcement actions; node agents' finish reports
    TENANT_MEMBER = "tenant_member"  # one tenant's jobs only


@dataclass(frozen=True)
class Principal:
    """Who made a request. `tenant` is set for tenant members only."""

    name: str
    role: Role
    tenant: str | None = None

    def sees_tenant(self, tenant: str | None) -> bool:
        return self.role != Role.TENANT_MEMBER or tenant == self.tenant


class TokenError(ValueError):
    """The token configuration is malformed; the message names the entry and what is wrong."""


class TokenTable:
    """Token digests → principals."""

    def __init__(self, principals: Mapping[str, Principal]):
        self._by_digest = {_digest(token): p for token, p in principals.items()}

    def __len__(self) -> int:
        return len(self._by_digest)

    def principals(self) -> list[Principal]:
        """Every distinct principal, sorted by name (what the permission audit compares)."""
        return sorted(set(self._by_digest.values()), key=lambda p: (p.name, p.role, p.tenant or ""))

    def authenticate(self, token: str | None) -> Principal | None:
        if not token:
            return None
        # a lookup by digest: timing can only reveal digests, which say nothing about tokens
        return self._by_digest.get(_digest(token))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_tokens(text: str, source: str) -> TokenTable:
    """Parse a JSON object token → {role, name, tenant?}; `source` names where it came from in errors."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenError(
            f"{source}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise TokenError(f"{source}: expected a JSON object mapping token to {{role, name, tenant}}")
    principals: dict[str, Principal] = {}
    names: dict[str, Principal] = {}
    for i, (token, entry) in enumerate(data.items(), start=1):
        where = f"{source}: entry {i}"
        if len(token) < 16:
            raise TokenError(f"{where}: token shorter than 16 characters")
        if not isinstance(entry, dict):
            raise TokenError(
                f"{where}: expected an object {{role, name, tenant}}, got {type(entry).__name__}"
            )
        unknown = set(entry) - {"role", "name", "tenant"}
        if unknown:
            raise TokenError(f"{where}: unknown field(s) {sorted(unknown)}")
        try:
            role = Role(entry.get("role"))
        except ValueError:
            raise TokenError(
                f"{where}: role {entry.get('role')!r} is not one of {[r.value for r in Role]}"
            ) from None
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise TokenError(f"{where}: name missing or not a string")
        tenant = entry.get("tenant")
        for field, value in (("name", name), ("tenant", tenant)):
            # names are logged with every command and answered: the API's own limits on names apply
            if isinstance(value, str) and (len(value) > MAX_NAME or has_surrogate(value)):
                raise TokenError(f"{where}: {field} longer than {MAX_NAME} characters or not valid Unicode")
        if role == Role.TENANT_MEMBER and (not isinstance(tenant, str) or not tenant):
            raise TokenError(f"{where}: a tenant_member needs a tenant")
        if role != Role.TENANT_MEMBER and tenant is not None:
            raise TokenError(f"{where}: only a tenant_member is bound to a tenant ({name} is {role})")
        principal = Principal(name, role, tenant)
        if name in names and names[name] != principal:
            raise TokenError(f"{where}: name {name!r} is used with two different roles or tenants")
        names[name] = principal
        principals[token] = principal
    return TokenTable(principals)


def load_tokens(path: Path | str | None = None, environ: Mapping[str, str] | None = None) -> TokenTable:
    """Tokens from the file `path` if given, else from $GPUPOOL_ALLOCATOR_TOKENS."""
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
            mode = stat.S_IMODE(p.stat().st_mode)
        except OSError as exc:
            raise TokenError(f"tokens file {p}: {exc.strerror}") from None
        if mode & OTHERS_WRITE:  # whoever can write it can add an admin token
            raise TokenError(f"tokens file {p}: writable by group or others (mode {mode:04o}), so anyone on "
                             f"this host could add a token; run `chmod 600 {p}` (allocator/filemodes.py)")
        return parse_tokens(text, f"tokens file {p}")
    env = os.environ if environ is None else environ
    text = env.get(TOKENS_ENV)
    if not text:
        raise TokenError(f"no tokens: set {TOKENS_ENV} to a JSON object or pass a tokens file")
    return parse_tokens(text, f"${TOKENS_ENV}")
