"""Who is looking, and what they may see.

Users come from the environment (`GPUPOOL_DASHBOARD_USERS`, a JSON list) or Streamlit secrets
(`[[users]]` tables), each `{"name", "role": "operator" | "tenant_member", "tenant",
"password_hash"}` with a hash from `python -m dashboards.auth hash` (PBKDF2-SHA256). Where Streamlit's
OpenID Connect login is configured (`[auth]` in secrets), a signed-in identity is matched to a user
by its `email` instead of a password. An operator sees the whole pool; a tenant member sees the
pool-level figures and only their own tenant's jobs, actions and costs; an anonymous visitor sees
nothing but the sign-in form.

A password sign-in survives a reload and a new tab: it sets a session cookie (`gpupool_session`), the
user's name and an expiry signed with HMAC-SHA256, checked on every new session (`st.context.cookies`).
The key comes from `GPUPOOL_DASHBOARD_SECRET`, else from `<home>/dashboard-session.key` (created 0600
with a random key on first use); the expiry is `GPUPOOL_DASHBOARD_SESSION_HOURS` (default 12). A cookie
whose signature does not match, that has expired, or whose user is no longer configured (or has another
password hash since) is refused, and the sign-in form shows. Signing out deletes it.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

ROLES = ("operator", "tenant_member")
_ITERATIONS = 200_000
SESSION_COOKIE = "gpupool_session"
SESSION_HOURS = 12.0
SECRET_FILE = "dashboard-session.key"


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
    return _oidc_user(users) or _cookie_user(users)


def sign_in(name: str, password: str) -> User | None:
    user = configured_users().get(name)
    if user is None or not user.password_hash or not check_password(password, user.password_hash):
        return None
    st.session_state["gpupool_user"] = user.name
    st.session_state.pop("gpupool_signed_out", None)
    st.session_state["gpupool_cookie"] = sign_session(user, session_secret(), time.time(), session_hours())
    return user


def sign_out() -> None:
    st.session_state.pop("gpupool_user", None)
    # this session's first request carried the cookie: it must not sign it in again; the browser drops it
    st.session_state["gpupool_signed_out"] = True
    st.session_state["gpupool_cookie"] = ""


# -- the session cookie ---------------------------------------------------------------------------------
def session_hours() -> float:
    """How long a sign-in lasts: GPUPOOL_DASHBOARD_SESSION_HOURS (default 12)."""
    text = os.environ.get("GPUPOOL_DASHBOARD_SESSION_HOURS", "").strip()
    try:
        hours = float(text) if text else SESSION_HOURS
    except ValueError:
        raise UsersError(f"GPUPOOL_DASHBOARD_SESSION_HOURS={text!r}: expected a number of hours") from None
    if hours <= 0:
        raise UsersError(f"GPUPOOL_DASHBOARD_SESSION_HOURS={text!r}: expected more than 0 hours")
    return hours


_PROCESS_SECRET = secrets.token_bytes(32)  # where neither the environment nor the home can hold one


def session_secret(home: Path | None = None) -> bytes:
    """The key that signs session cookies: GPUPOOL_DASHBOARD_SECRET, else the home's dashboard-session.key
    (32 random bytes, created 0600 on first use, so that sessions outlive a restart), else, where the home
    cannot be written, a key of this process (a restart signs everyone out)."""
    text = os.environ.get("GPUPOOL_DASHBOARD_SECRET", "")
    if text:
        return text.encode()
    path = (home or Path(os.environ.get("GPUPOOL_HOME", ".gpupool")).resolve()) / SECRET_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        pass
    except OSError:
        return _PROCESS_SECRET
    key = secrets.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another session made it meanwhile
        return bytes.fromhex(path.read_text().strip())
    except OSError:
        return _PROCESS_SECRET
    with os.fdopen(fd, "w") as out:
        out.write(key.hex())
    os.chmod(path, 0o600)
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _fingerprint(user: User) -> str:
    """Ties a cookie to the user's password hash: a new password signs the old sessions out."""
    return hashlib.sha256((user.password_hash or "").encode()).hexdigest()[:16]


def sign_session(user: User, secret: bytes, now: float, hours: float = SESSION_HOURS) -> str:
    """A cookie value: base64url(JSON {user, expiry, password fingerprint}) "." base64url(HMAC-SHA256)."""
    payload = _b64(json.dumps({"u": user.name, "exp": int(now + hours * 3600), "pw": _fingerprint(user)},
                              separators=(",", ":")).encode())
    return f"{payload}.{_b64(hmac.new(secret, payload.encode(), hashlib.sha256).digest())}"


def verify_session(token: str | None, secret: bytes, now: float, users: dict[str, User]) -> User | None:
    """The user a cookie signs in; None when it is missing, tampered with, expired, or names a user who is
    no longer configured or whose password changed since."""
    if not token or token.count(".") != 1:
        return None
    payload, signature = token.split(".")
    try:
        expected = hmac.new(secret, payload.encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, _unb64(signature)):
            return None
        claims = json.loads(_unb64(payload))
    except (ValueError, TypeError):
        return None
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
        return None
    user = users.get(claims.get("u"))
    if user is None or not user.password_hash or not hmac.compare_digest(str(claims.get("pw")), _fingerprint(user)):
        return None
    return user


def _cookie_user(users: dict[str, User]) -> User | None:
    """The user this session's first request's cookie signs in (once: then it is in the session state)."""
    if st.session_state.get("gpupool_signed_out"):
        return None
    try:
        token = st.context.cookies.get(SESSION_COOKIE)
    except (AttributeError, RuntimeError):
        return None
    user = verify_session(token, session_secret(), time.time(), users)
    if user is not None:
        st.session_state["gpupool_user"] = user.name
    return user


def write_cookie() -> None:
    """Set (after a sign-in) or delete (after a sign-out) the session cookie in the browser: a small script
    in the page (st.html runs it in the app's own document). Not HttpOnly: Streamlit has no response to
    set it on; it is SameSite=Strict, Secure over HTTPS, and worthless without the server's key."""
    if "gpupool_cookie" not in st.session_state:
        return
    token = st.session_state.pop("gpupool_cookie")
    age = int(session_hours() * 3600) if token else 0
    st.html(f"""<script>
document.cookie = "{SESSION_COOKIE}={token}; Max-Age={age}; Path=/; SameSite=Strict"
  + (location.protocol === "https:" ? "; Secure" : "");
</script>""", unsafe_allow_javascript=True, width="content")


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
