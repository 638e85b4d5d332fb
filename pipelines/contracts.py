"""The raw tables' contracts, read from models/contracts/*.yml (the single definition).

Parsers build frames with `empty_frame`/`conform`; the warehouse creates tables from `ddl`.
Tables that the code itself appends to (not a source's raw table) have their DDL here too.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import polars as pl
import yaml

from pipelines.paths import CONTRACTS_DIR

# one row per failed scrape of a target in a round: appended by the scraper, read by metrics.scrape_gaps
SCRAPE_GAPS_DDL = """
create table if not exists ops.scrape_gaps (
  target VARCHAR,
  round_at TIMESTAMP,
  round_id VARCHAR,
  error_kind VARCHAR,
  error VARCHAR,
  duration_s DOUBLE,
  attempts INTEGER
)"""

_POLARS_TYPES: dict[str, pl.DataType] = {
    "VARCHAR": pl.String(),
    "INTEGER": pl.Int32(),
    "BIGINT": pl.Int64(),
    "DOUBLE": pl.Float64(),
    "BOOLEAN": pl.Boolean(),
    "TIMESTAMP": pl.Datetime("us"),
    "DATE": pl.Date(),
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    description: str


@dataclass(frozen=True)
class Contract:
    table: str  # schema-qualified, e.g. raw.job_events
    grain: str
    description: str
    columns: tuple[Column, ...]

    @property
    def name(self) -> str:
        return self.table.split(".", 1)[1]

    @property
    def schema(self) -> pl.Schema:
        return pl.Schema({c.name: _POLARS_TYPES[c.type] for c in self.columns})

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if not c.nullable]

    def empty_frame(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.schema)

    def conform(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Select the contract's columns in order, cast to its types, adding missing nullable ones as null."""
        missing_required = [c for c in self.required if c not in frame.columns]
        if missing_required:
            raise ValueError(f"{self.table}: frame lacks required columns {missing_required}")
        exprs = [
            (pl.col(c.name) if c.name in frame.columns else pl.lit(None)).cast(_POLARS_TYPES[c.type]).alias(c.name)
            for c in self.columns
        ]
        return frame.select(exprs)

    def ddl(self, extra_columns: str = "") -> str:
        cols = ",\n  ".join(f"{c.name} {c.type}" for c in self.columns)
        return f"create table if not exists {self.table} (\n  {cols}{extra_columns}\n)"


@cache
def contracts() -> dict[str, Contract]:
    """Every contract by short table name (dcgm_samples, job_events, ...)."""
    out: dict[str, Contract] = {}
    for path in sorted(CONTRACTS_DIR.glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        contract = Contract(
            table=doc["table"],
            grain=doc["grain"],
            description=doc["description"].strip(),
            columns=tuple(Column(**c) for c in doc["columns"]),
        )
        out[contract.name] = contract
    return out


def contract(name: str) -> Contract:
    return contracts()[name]
