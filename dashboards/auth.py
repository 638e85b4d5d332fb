"""Who is looking, and what they may see.

Users come from the environment (`GPUPOOL_DASHBOARD_USERS`, a JSON list) or Streamlit secrets
(`[[users]]` tables), each `{"name", "role": "operator" | "tenant_member", "tenant",
"password_hash"}` with a hash from `python -m dashboards.auth hash` (PBKDF2-SHA256). Where Streamlit's
OpenID Connect login is configured (`[auth]` in secrets), a signed-in identity is matched to a user
by its `email` instead of a password. An operator sees the whole pool; a tenant member sees the
pool-level figures and only their own tenant's jobs, actions and costs; an anonymous visitor sees
nothing but the sign-in form.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
from dataclasses import dataclass

import streamlit as st

ROLES = ("operator", "tenant_member")
_ITERATIONS = 200_000


@dataclass(frozen=True)
class User:
    name: str
    role: str
    tenant: str | None = None
    email: str | None = None
    password_hash: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.role == "operator"


class UsersError(ValueError):
    """The users configuration cannot be read."""


def hash_password(password: str, salt: str | None = None) -> str:
    salt = salt or secrets.token_hex(8)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), _ITERATIONS).hex()
    return f"pbkdf2_sha256${_ITERATIONS}${salt}${digest}"


def check_password(password: str, stored: str) -> bool:
    try:
        scheme, iterations, salt, digest = stored.split("$")
    except ValueError:
        return False
    if scheme != "pbkdf2_sha256":
        return False
    mine = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), int(iterations)).hex()
    return hmac.compare_digest(mine, digest)


def parse_users(raw: list) -> dict[str, User]:
    users: dict[str, User] = {}
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise UsersError(f"user #{i + 1}: expected a table with a name")
        role = entry.get("role")
        if role not in ROLES:
            raise UsersError(f"user {entry['name']}: role {role!r}, expected one of {', '.join(ROLES)}")
        if role == "tenant_member" and not entry.get("tenant"):
            raise UsersError(f"user {entry['name']}: a tenant_member needs its tenant")
        users[entry["name"]] = User(entry["name"], role, entry.get("tenant"), entry.get("email"),
                                    entry.get("password_hash"))
    return users


def configured_users() -> dict[str, User]:
    """From GPUPOOL_DASHBOARD_USERS (JSON), else Streamlit secrets' [[users]]; empty when neither."""
    text = os.environ.get("GPUPOOL_DASHBOARD_USERS")
    if text:
        try:
            return parse_users(json.loads(text))
        except json.JSONDecodeError as exc:
            raise UsersError(f"GPUPOOL_DASHBOARD_USERS is not JSON: {exc}") from None
    try:
        raw = st.secrets.get("users", [])
    except (FileNotFoundError, KeyError, st.errors.StreamlitSecretNotFoundError):
        raw = []
    return parse_users([dict(u) for u in raw])


def _oidc_user(users: dict[str, User]) -> User | None:
    try:
        logged_in = bool(st.user.is_logged_in)
    except (AttributeError, KeyError, st.errors.StreamlitAPIException):
        return None
    email = st.user.get("email") if logged_in else None
    return next((u for u in users.values() if email and u.email == email), None)


def sso_configured() -> bool:
    """Streamlit's OpenID Connect login is set up ([auth] in secrets.toml)."""
    try:
        return "auth" in st.secrets
    except (FileNotFoundError, st.errors.StreamlitSecretNotFoundError):
        return False


def current_user() -> User | None:
    name = st.session_state.get("gpupool_user")
    users = configured_users()
    if name in users:
        return users[name]
    return _oidc_user(users)


def sign_in(name: str, password: str) -> User | None:
    user = configured_users().get(name)
    if user is None or not user.password_hash or not check_password(password, user.password_hash):
        return None
    st.session_state["gpupool_user"] = user.name
    return user


def sign_out() -> None:
    st.session_state.pop("gpupool_user", None)


def tenant_scope(user: User) -> str | None:
    """The tenant a user's tenant-level data is limited to; None for operators (everything)."""
    return None if user.is_operator else user.tenant


if __name__ == "__main__":  # python -m dashboards.auth hash [PASSWORD]
    if len(sys.argv) >= 2 and sys.argv[1] == "hash":
        import getpass

        print(hash_password(sys.argv[2] if len(sys.argv) > 2 else getpass.getpass("password: ")))
    else:
        print("usage: python -m dashboards.auth hash [PASSWORD]", file=sys.stderr)
        sys.exit(2)
