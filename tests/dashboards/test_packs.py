"""The review packs page: operators see every pack built (ops.review_packs) with its files; tenant
members and a warehouse with no pack yet get a message that says why."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dashboards.i18n import STRINGS
from tests.dashboards.conftest import errors, signed_in


def test_no_pack_yet_says_how_to_make_one(dashboard_env):
    at = signed_in("ops", "packs")
    assert errors(at) == []
    assert any("gpupool pack" in i.value for i in at.info)


def test_operators_see_the_packs_and_tenant_members_do_not(dashboard_env, fresh_cache):
    gpupool = Path(sys.executable).parent / "gpupool"
    subprocess.run([str(gpupool), "pack", "--month", "2026-11", "--home", str(dashboard_env)], check=True,
                   capture_output=True, timeout=300)
    at = signed_in("ops", "packs")
    assert errors(at) == []
    assert any("2026-11" in m.value for m in at.markdown)
    assert len(at.get("download_button")) >= 2
    member = signed_in("vic", "packs")
    assert errors(member) == [] and [i.value for i in member.info] == [STRINGS["packs_operators_only"]["en"]]
