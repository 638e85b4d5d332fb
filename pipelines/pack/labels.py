"""Human column names for the packs' tables, in English and Chinese: a column that carries a catalog
metric takes the catalog's label; any other column (a dimension, a count the table derives) takes its
label from pipelines/labels.py COLUMN_LABELS (shared with the dashboards). A raw key is never shown:
column_label raises on a column neither knows, and a test runs it over every table of every pack."""
from __future__ import annotations

from pipelines.labels import COLUMN_LABELS


def _catalog_columns(catalog: dict[str, dict]) -> dict[str, dict]:
    """metrics.<view>.<column> -> the catalog row that defines it (its own view and column, and also_in)."""
    found = {}
    for row in catalog.values():
        found[f"{row['view_name']}.{row['column_name']}"] = row
        for other in filter(None, (row.get("also_in") or "").split(", ")):
            found.setdefault(other, row)
    return found


def column_label(view: str, column: str, lang: str, catalog: dict[str, dict]) -> str:
    """The heading of a pack table's column: the label of the catalog metric held at metrics.<view>.<column>,
    else COLUMN_LABELS' label, else the label of the catalog metric whose own column has that name. The
    dimensions come before that last guess: a plain `jobs` or `attempts` column is not the metric of
    another view that happens to share the name (artifact status, attempts by cause). `catalog`: every
    catalog row by metric name (Figures.catalog)."""
    row = _catalog_columns(catalog).get(f"metrics.{view}.{column}")
    if row is None and column in COLUMN_LABELS:
        return COLUMN_LABELS[column][lang]
    row = row or next((r for r in catalog.values() if r["column_name"] == column), None)
    if row is not None:
        return row["label_zh" if lang == "zh" else "label_en"]
    raise KeyError(f"pack column {column!r} of metrics.{view} has no label: add it to the catalog or to "
                   "pipelines/labels.py COLUMN_LABELS (en and zh)")
