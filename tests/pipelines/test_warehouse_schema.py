"""The writers' file's schema is made once per version of its statements: each writer connection (an
ingest opens several a day) reads the stamp and runs no DDL while the statements are unchanged."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines import contracts
from pipelines.contracts import SCHEMA_STAMP
from pipelines.warehouse import Warehouse

COUNT_INGEST_LOG = ("select count(*) from duckdb_tables() where schema_name = 'ops' and table_name = 'ingest_log'")


def test_the_schema_is_made_again_only_when_its_statements_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    wh = Warehouse(tmp_path)
    with wh.writer() as con:
        assert con.execute(COUNT_INGEST_LOG).fetchone()[0] == 1
        con.execute("drop table ops.ingest_log")
    with wh.writer() as con:  # the stamp says the statements ran: none runs again
        assert con.execute(COUNT_INGEST_LOG).fetchone()[0] == 0
    monkeypatch.setattr(contracts, "schema_digest", lambda _schemas: "the statements changed")
    with wh.writer() as con:
        assert con.execute(COUNT_INGEST_LOG).fetchone()[0] == 1
        assert con.execute(f"select digest from {SCHEMA_STAMP}").fetchall() == [("the statements changed",)]


def test_a_file_made_before_the_stamp_gets_its_tables(tmp_path: Path):
    wh = Warehouse(tmp_path)
    with wh.writer() as con:
        con.execute(f"drop table {SCHEMA_STAMP}")
        con.execute("drop table ops.ingest_log")
    with wh.writer() as con:
        assert con.execute(COUNT_INGEST_LOG).fetchone()[0] == 1
