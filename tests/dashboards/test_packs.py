"""The review packs page: operators see every pack built (ops.review_packs), the pool's and each
tenant's; a tenant member sees only their own tenant's packs, never the pool's nor another tenant's;
a warehouse with no pack yet gets a message that says how to make one."""
from __future__ import annotations

import base64
import datetime as dt
import os
import re
from pathlib import Path

import pytest
import streamlit as st
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from dashboards import data, downloads
from dashboards.i18n import STRINGS
from pipelines.contracts import REVIEW_PACKS_TABLE
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home
from tests.dashboards.conftest import add_tenant_pack, errors, signed_in

pytestmark = pytest.mark.slow  # review packs of a copied demo home

MONTH = dt.date(2026, 11, 1)


def test_no_pack_yet_says_how_to_make_one(dashboard_env):
    at = signed_in("ops", "packs")
    assert errors(at) == []
    assert any("gpupool pack" in i.value for i in at.info)


def _pdf(tenant: str) -> bytes:
    return f"%PDF-1.7\n% {tenant} pack\n".encode() * 1000


@pytest.fixture
def packs_home(monkeypatch, dashboard_env, packed_demo_home, tmp_path, fresh_cache) -> Path:
    """A copy of the demo with the pool's pack (built once per test run: packed_demo_home) and two
    tenants' packs. The tenants' packs are recorded with files of their own: this page lists what
    ops.review_packs holds, and the tenant packs' contents are tests/pack/test_tenant_pack.py's."""
    home = copy_home(packed_demo_home, tmp_path / "gpupool")
    monkeypatch.setenv("GPUPOOL_HOME", str(home))
    for tenant in ("vision", "nlp"):
        add_tenant_pack(home, MONTH, tenant, _pdf(tenant), f"<p>{tenant} pack</p>".encode())
    return home


def pack_files(home: Path) -> dict[tuple[str | None, str], bytes]:
    """Every pack file's bytes, by (tenant, "pdf" | "html")."""
    return {(row["tenant"], kind): (home / row[f"{kind}_path"]).read_bytes()
            for row in data.review_packs(None).iter_rows(named=True) for kind in ("pdf", "html")}


def file_buttons(at: AppTest) -> list[str]:
    return [b.key for b in at.button if b.key and b.key.split("-")[0] in ("pdf", "html")]


SAVED = re.compile(r'<script id="file" type="text/plain">([A-Za-z0-9+/=]*)</script>')


def saved(at: AppTest) -> list[bytes]:
    """The files this run hands to the browser to save (dashboards/downloads.py's frames)."""
    return [base64.b64decode(m) for frame in at.get("iframe") for m in SAVED.findall(frame.proto.srcdoc)]


@pytest.fixture
def media_store(monkeypatch) -> list[bytes]:
    """Every payload given to Streamlit's media store, which serves it at /media/<id> to any client
    with the URL, no session needed (deferred downloads included: their callable's result)."""
    given: list[bytes] = []
    add, add_deferred = MediaFileManager.add, MediaFileManager.add_deferred

    def as_bytes(value) -> bytes:
        value = value.read() if hasattr(value, "read") else value
        return value.encode() if isinstance(value, str) else bytes(value)

    def recording_add(self, path_or_data, *args, **kwargs):
        given.append(path_or_data if isinstance(path_or_data, bytes) else Path(path_or_data).read_bytes())
        return add(self, path_or_data, *args, **kwargs)

    def recording_add_deferred(self, data_callable, *args, **kwargs):
        given.append(as_bytes(data_callable()))
        return add_deferred(self, data_callable, *args, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add", recording_add)
    monkeypatch.setattr(MediaFileManager, "add_deferred", recording_add_deferred)
    return given


def test_operators_see_every_pack_and_members_their_tenants_only(packs_home):
    at = signed_in("ops", "packs")
    assert errors(at) == []
    headers = [m.value for m in at.markdown if "2026-11" in m.value]
    assert len(headers) == 3 and {"vision", "nlp", STRINGS["pack_pool"]["en"]} == {
        h.split(" · ")[1] for h in headers}
    assert len(file_buttons(at)) == 6

    member = signed_in("vic", "packs")  # a member of vision
    assert errors(member) == []
    shown = [m.value for m in member.markdown if "2026-11" in m.value]
    assert len(shown) == 1 and " · vision · " in shown[0]
    assert len(file_buttons(member)) == 2 and not member.code  # no server paths for members


def test_pack_bytes_never_enter_the_public_media_store(packs_home, media_store):
    """No pack file is put where /media/ serves it without a session: each is read when its button
    is pressed and handed to that session's browser, exactly."""
    files = pack_files(packs_home)
    at = signed_in("ops", "packs")
    assert errors(at) == [] and saved(at) == []
    assert not [b for b in media_store if b in files.values()], "a pack went into the media store"
    handed: list[bytes] = []
    for key in file_buttons(at):
        at.button(key=key).click().run()
        assert errors(at) == []
        handed += saved(at)
    assert sorted(handed) == sorted(files.values())  # each file once, in the run its button was pressed
    assert not [b for b in media_store if b in files.values()], "a pack went into the media store"


def test_a_member_saves_their_own_pack_exactly_and_no_other(packs_home, media_store):
    files = pack_files(packs_home)
    member = signed_in("vic", "packs")
    assert sorted(file_buttons(member)) == ["html-0", "pdf-0"]
    member.button(key="pdf-0").click().run()
    assert saved(member) == [files[("vision", "pdf")]]
    member.button(key="html-0").click().run()
    assert saved(member) == [files[("vision", "html")]]
    others = [b for (tenant, _), b in files.items() if tenant != "vision"]
    assert not any(b in others for b in media_store + saved(member))


def test_a_pack_row_naming_a_file_outside_the_home_offers_nothing(packs_home, media_store, tmp_path):
    secret = tmp_path / "elsewhere" / "secret.pdf"
    secret.parent.mkdir()
    secret.write_bytes(b"%PDF-1.7 not a pack")
    with Warehouse(packs_home).writer() as con:
        con.execute(f"update {REVIEW_PACKS_TABLE} set pdf_path = ? where tenant = 'vision'",
                    [os.path.relpath(secret, packs_home)])
    st.cache_data.clear()
    member = signed_in("vic", "packs")
    assert errors(member) == []
    assert secret.read_bytes() not in media_store
    assert file_buttons(member) == ["html-0"]


def test_a_pack_too_large_to_send_says_so(packs_home, monkeypatch):
    monkeypatch.setattr(downloads, "MAX_DOWNLOAD_BYTES", 1000)
    member = signed_in("vic", "packs")
    member.button(key="pdf-0").click().run()
    assert saved(member) == []
    assert [e.value for e in member.error] and "over the" in member.error[0].value


def test_the_query_filters_by_tenant(packs_home):
    assert sorted(data.review_packs("vision")["tenant"].to_list()) == ["vision"]
    assert data.review_packs("nobody").is_empty()
    every = data.review_packs(None)["tenant"].to_list()
    assert sorted(every, key=str) == sorted([None, "nlp", "vision"], key=str)


def test_a_member_without_packs_is_told_why(dashboard_env, fresh_cache):
    member = signed_in("vic", "packs")
    assert errors(member) == []
    assert [i.value for i in member.info] == [STRINGS["no_tenant_packs"]["en"].format(tenant="vision")]
