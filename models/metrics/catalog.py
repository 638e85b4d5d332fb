"""metrics.catalog: the metric catalog (models/catalog/*.yml, read by pipelines.catalog), one row per metric."""
import polars as pl

from pipelines.catalog import load_catalog


def model(dbt, session):
    dbt.config(materialized="table")
    catalog = load_catalog()
    metrics = catalog.metrics
    return pl.DataFrame(
        {
            "metric_name": [m.name for m in metrics],
            "metric_group": [m.group for m in metrics],
            "label_en": [m.label_en for m in metrics],
            "label_zh": [m.label_zh for m in metrics],
            "description": [m.description for m in metrics],
            "description_zh": [m.description_zh for m in metrics],
            "metric_type": [m.type for m in metrics],
            "grain": [m.grain for m in metrics],
            "unit": [m.unit for m in metrics],
            "formula": [m.formula for m in metrics],
            "source_fields": [", ".join(m.source_fields) for m in metrics],
            "view_name": [m.view for m in metrics],
            "column_name": [m.column for m in metrics],
            "also_in": [", ".join(m.also_in) for m in metrics],
            "metric_version": [m.version for m in metrics],
        }
    ).with_columns(catalog_version=pl.lit(catalog.version)).to_arrow()
