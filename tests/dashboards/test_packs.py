"""The review packs page: operators see every pack built (ops.review_packs), the pool's and each
tenant's; a tenant member sees only their own tenant's packs, never the pool's nor another tenant's;
a warehouse with no pack yet gets a message that says how to make one."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards import data
from dashboards.i18n import STRINGS
from pipelines.pack import store
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home
from tests.dashboards.conftest import errors, signed_in

MONTH = dt.date(2026, 11, 1)


def test_no_pack_yet_says_how_to_make_one(dashboard_env):
    at = signed_in("ops", "packs")
    assert errors(at) == []
    assert any("gpupool pack" in i.value for i in at.info)


@pytest.fixture
def packs_home(monkeypatch, dashboard_env, tmp_path, fresh_cache) -> Path:
    """A copy of the demo with the pool's pack (built) and two tenants' packs. The tenants' packs are
    recorded with files of their own: this page lists what ops.review_packs holds, and the tenant packs'
    contents are tests/pack/test_tenant_pack.py's."""
    home = copy_home(dashboard_env, tmp_path / "gpupool")
    monkeypatch.setenv("GPUPOOL_HOME", str(home))
    subprocess.run([str(Path(sys.executable).parent / "gpupool"), "pack", "--month", "2026-11", "--home", str(home)],
                   check=True, capture_output=True, timeout=300)
    wh = Warehouse(home)
    for tenant in ("vision", "nlp"):
        out = store.new_version_dir(home, MONTH, "en", tenant)
        for name in ("pack.html", "pack.pdf"):
            (out / name).write_text(f"{tenant} pack")
        store.record_pack(wh, store.PackRecord(
            month=MONTH, version=out.name, lang="en", catalog_version="test", built_at=dt.datetime(2026, 12, 1, 6),
            html_path=str(out.relative_to(home) / "pack.html"), pdf_path=str(out.relative_to(home) / "pack.pdf"),
            build_seconds=0.1, release_id=1, tenant=tenant))
    return home


def test_operators_see_every_pack_and_members_their_tenants_only(packs_home):
    at = signed_in("ops", "packs")
    assert errors(at) == []
    headers = [m.value for m in at.markdown if "2026-11" in m.value]
    assert len(headers) == 3 and {"vision", "nlp", STRINGS["pack_pool"]["en"]} == {
        h.split(" · ")[1] for h in headers}
    assert len(at.get("download_button")) == 6

    member = signed_in("vic", "packs")  # a member of vision
    assert errors(member) == []
    shown = [m.value for m in member.markdown if "2026-11" in m.value]
    assert len(shown) == 1 and " · vision · " in shown[0]
    assert len(member.get("download_button")) == 2 and not member.code  # no server paths for members


def test_the_query_filters_by_tenant(packs_home):
    assert sorted(data.review_packs("vision")["tenant"].to_list()) == ["vision"]
    assert data.review_packs("nobody").is_empty()
    every = data.review_packs(None)["tenant"].to_list()
    assert sorted(every, key=str) == sorted([None, "nlp", "vision"], key=str)


def test_a_member_without_packs_is_told_why(dashboard_env, fresh_cache):
    member = signed_in("vic", "packs")
    assert errors(member) == []
    assert [i.value for i in member.info] == [STRINGS["no_tenant_packs"]["en"].format(tenant="vision")]
