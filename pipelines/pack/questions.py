"""Page 1 of the pool's pack: the five questions of a pooling review, answered from the pack's figures."""
from __future__ import annotations

import duckdb


def pool_answers(con: duckdb.DuckDBPyConnection, figs) -> tuple[list, list]:
    """(answers, decisions) of the pool's pack. Filled in by the page-1 work."""
    return [], []
