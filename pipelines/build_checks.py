"""What every model build does after dbt, without Dagster: load the policy exemptions, and the two
checks of the built warehouse, each recorded in ops.check_results under the build's asset name.

The Dagster asset checks (pipelines/assets/marts.py) and `gpupool build` (pipelines/runner.py) both
call these, so the CLI needs neither dagster-dbt nor the dbt assets to build.
"""
from __future__ import annotations

import datetime as dt

from pipelines.catalog import catalog_mismatches
from pipelines.config import ConfigError
from pipelines.contracts import EXEMPTIONS_CHECK, EXEMPTIONS_TABLE
from pipelines.policies.catalog import CatalogError
from pipelines.policies.catalog import load_catalog as load_policy_catalog
from pipelines.warehouse import Warehouse

BUILD_ASSET = "dbt_models"  # the asset name the build's own checks are recorded under in ops.check_results
INGEST_ACCOUNTING = "ingest_accounting_balanced"
CATALOG_MATCHES = "catalog_matches_models"


def load_exemptions(wh: Warehouse) -> str | None:
    """Replace governance.policy_exemptions with the policy catalog's exemptions (the file gpupool.yml's
    governance.exemptions names, else models/policies/exemptions.yml), validated as the governance
    tick reads them, and record the outcome as the check policy_exemptions_valid. An invalid file
    keeps the rows last loaded; returns why it is invalid (None: loaded)."""
    try:
        entries = load_policy_catalog().exemptions
    except (CatalogError, ConfigError) as exc:
        wh.record_check(EXEMPTIONS_CHECK, BUILD_ASSET, None, False, "WARN", 1, {"error": str(exc)})
        return str(exc)
    loaded_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    rows = [[e.tenant, e.policy, e.queue, e.job_id, e.reason, e.granted_by, e.expires_at, loaded_at] for e in entries]
    with wh.writer() as con:
        con.execute("begin transaction")
        con.execute(f"delete from {EXEMPTIONS_TABLE}")
        if rows:
            con.executemany(f"insert into {EXEMPTIONS_TABLE} values (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        con.execute("commit")
    wh.record_check(EXEMPTIONS_CHECK, BUILD_ASSET, None, True, "WARN", 0, {"exemptions": len(rows)})
    return None


def unbalanced_ingests(wh: Warehouse) -> list[tuple]:
    """Every ingest run accounts for each record (read = loaded + quarantined): the latest runs that do
    not, as (source, day, read, loaded, quarantined); recorded as ingest_accounting_balanced (WARN)."""
    with wh.writer() as con:
        bad = con.execute(
            """
            with latest as (
              select *, row_number() over (partition by ingest_source, partition_date order by finished_at desc) as rn
              from ops.ingest_log
            )
            select ingest_source, cast(partition_date as varchar), records_read, records_loaded, records_quarantined
            from latest
            where rn = 1 and records_read <> records_loaded + records_quarantined
            order by 1, 2
            """
        ).fetchall()
    wh.record_check(INGEST_ACCOUNTING, BUILD_ASSET, None, not bad, "WARN", len(bad), {"unbalanced": bad[:20]})
    return bad


def catalog_problems(wh: Warehouse) -> list[str]:
    """Every catalog metric exists as its view's column, and every model column is documented: what is
    not; recorded as catalog_matches_models (ERROR)."""
    with wh.writer() as con:
        problems = catalog_mismatches(con)
    wh.record_check(CATALOG_MATCHES, BUILD_ASSET, None, not problems, "ERROR", len(problems),
                    {"problems": problems[:50]})
    return problems
