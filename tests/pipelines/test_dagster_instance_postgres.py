"""Dagster's instance storage on a real PostgreSQL server (dagster-postgres; scripts/postgres-up.sh):
runs, event logs and schedules go to PostgreSQL, configured by a dagster.yaml in DAGSTER_HOME."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

import dagster as dg
import psycopg
import pytest
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

from tests.postgres import DAGSTER_YAML

pytest_plugins = ["tests.postgres"]

# The password comes from the environment, as a deployment keeps it out of dagster.yaml. The scheme
# names psycopg2 because SQLAlchemy 2.1 maps a bare `postgresql://` to psycopg 3 (installed for the
# release registry), and dagster-postgres 0.29 then fails on `NOTIFY run_events, $1`.
@dg.asset
def answer() -> dg.MaterializeResult:
    """A trivial asset: one materialization with metadata."""
    return dg.MaterializeResult(metadata={"rows": 42})


def test_a_run_and_its_materialization_are_stored_in_postgres(postgres_url: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "dagster-home"
    home.mkdir()
    url = urlsplit(postgres_url)
    (home / "dagster.yaml").write_text(DAGSTER_YAML.format(username=url.username, hostname=url.hostname,
                                                           port=url.port, db_name=url.path.lstrip("/")))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("GPUPOOL_DAGSTER_PG_PASSWORD", unquote(url.password or ""))

    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
        result = dg.materialize([answer], instance=instance)
        assert result.success
        run_id = result.run_id

    # a new instance (a new process would do the same) reads it back from the server
    with dg.DagsterInstance.get() as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        event = instance.get_latest_materialization_event(dg.AssetKey("answer"))
        assert event is not None and event.run_id == run_id
        assert event.asset_materialization.metadata["rows"].value == 42

    # and the rows are in PostgreSQL itself, not in files under DAGSTER_HOME
    with psycopg.connect(postgres_url) as con:
        status = con.execute("select status from runs where run_id = %s", (run_id,)).fetchone()
        materializations = con.execute(
            "select count(*) from event_logs where run_id = %s and dagster_event_type = 'ASSET_MATERIALIZATION' "
            "and asset_key = %s", (run_id, dg.AssetKey("answer").to_string())).fetchone()
    assert status == ("SUCCESS",)
    assert materializations == (1,)
    assert not list(home.rglob("*.db"))  # no SQLite run/event/schedule storage on the side
