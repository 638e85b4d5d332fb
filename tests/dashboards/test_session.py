"""The session cookie (dashboards/auth.py): signed with HMAC-SHA256, expiring, tied to the user's password
hash; its key from the environment or the home's 0600 file. The reload in a real browser is in
test_browser.py (test_a_reload_and_a_new_tab_keep_the_session)."""
from __future__ import annotations

import stat

import pytest

from dashboards import auth
from dashboards.auth import SESSION_HOURS, User, sign_session, verify_session

SECRET = b"k" * 32
NOW = 1_800_000_000.0
OPS = User("ops", "operator", password_hash="pbkdf2_sha256$200000$00$aa")
USERS = {"ops": OPS}


def test_a_signed_cookie_signs_its_user_in_until_it_expires():
    token = sign_session(OPS, SECRET, NOW)
    assert verify_session(token, SECRET, NOW, USERS) == OPS
    assert verify_session(token, SECRET, NOW + SESSION_HOURS * 3600 - 1, USERS) == OPS
    assert verify_session(token, SECRET, NOW + SESSION_HOURS * 3600, USERS) is None  # expired
    short = sign_session(OPS, SECRET, NOW, hours=0.5)
    assert verify_session(short, SECRET, NOW + 1799, USERS) == OPS
    assert verify_session(short, SECRET, NOW + 1800, USERS) is None


def test_a_tampered_cookie_is_refused():
    token = sign_session(OPS, SECRET, NOW)
    payload, signature = token.split(".")
    forged = auth._b64(b'{"u":"ops","exp":9999999999,"pw":"x"}')
    assert verify_session(f"{forged}.{signature}", SECRET, NOW, USERS) is None  # another payload, old signature
    assert verify_session(f"{payload}.{signature[:-2]}AA", SECRET, NOW, USERS) is None
    assert verify_session(token, b"another key", NOW, USERS) is None
    for junk in (None, "", "abc", "a.b.c", ".", f"{payload}.", "!!!.???"):
        assert verify_session(junk, SECRET, NOW, USERS) is None


def test_a_cookie_of_a_removed_user_or_an_old_password_is_refused():
    token = sign_session(OPS, SECRET, NOW)
    assert verify_session(token, SECRET, NOW, {}) is None
    changed = {"ops": User("ops", "operator", password_hash="pbkdf2_sha256$200000$00$bb")}
    assert verify_session(token, SECRET, NOW, changed) is None


def test_the_key_from_the_environment_else_a_private_file_in_the_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPOOL_DASHBOARD_SECRET", "from-the-environment")
    assert auth.session_secret(tmp_path) == b"from-the-environment"
    assert not (tmp_path / auth.SECRET_FILE).exists()
    monkeypatch.delenv("GPUPOOL_DASHBOARD_SECRET")
    key = auth.session_secret(tmp_path)
    path = tmp_path / auth.SECRET_FILE
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert auth.session_secret(tmp_path) == key  # the same key after a restart


def test_session_hours_from_the_environment(monkeypatch):
    monkeypatch.delenv("GPUPOOL_DASHBOARD_SESSION_HOURS", raising=False)
    assert auth.session_hours() == SESSION_HOURS == 12
    monkeypatch.setenv("GPUPOOL_DASHBOARD_SESSION_HOURS", "0.25")
    assert auth.session_hours() == 0.25
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv("GPUPOOL_DASHBOARD_SESSION_HOURS", bad)
        with pytest.raises(auth.UsersError, match="GPUPOOL_DASHBOARD_SESSION_HOURS"):
            auth.session_hours()
