"""A site's GPU models table: the packaged seed (models/seeds/gpu_models.csv), or the site's own file, with
the site's prices over it, as gpupool.yml's `gpu_models` section says:

    gpu_models:
      file: /etc/gpupool/gpu_models.csv   # the whole table, with the packaged file's columns
      prices: {H100: 2.10, A100: 1.20}    # USD per GPU-hour, over the table's price_per_gpu_hour

A build seeds the warehouse from the table this gives (pipelines/build.py builds a copy of the project
whose seeds/gpu_models.csv is it); the installed tree is never written. Relative paths are read from the
configuration file's folder.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from pipelines.config import ConfigError, config_path, config_relative, section
from pipelines.paths import MODELS_DIR

SEED_NAME = "gpu_models"
PACKAGED_GPU_MODELS = MODELS_DIR / "seeds" / f"{SEED_NAME}.csv"
_NUMBERS = ("compute_slices", "memory_mib", "price_per_gpu_hour")


class GpuModelsConfig(BaseModel):
    """The `gpu_models` section of gpupool.yml."""

    model_config = ConfigDict(extra="forbid")
    file: Path | None = Field(None, description="the site's table; default models/seeds/gpu_models.csv")
    prices: dict[str, float] = Field(default_factory=dict, description="USD per GPU-hour by gpu_model")


def site_gpu_models(config_file: Path | None = None) -> str | None:
    """The GPU models table (CSV text) a build seeds, or None when gpupool.yml changes nothing of the
    packaged one. Raises ConfigError naming the file and the problem."""
    path = config_file or config_path()
    cfg = section(SEED_NAME, GpuModelsConfig, path)
    if cfg is None or (cfg.file is None and not cfg.prices):
        return None
    table = config_relative(cfg.file, path) if cfg.file is not None else PACKAGED_GPU_MODELS
    rows = read_gpu_models(table)
    return render_gpu_models(with_prices(rows, cfg.prices, f"{path}: section {SEED_NAME}: prices"))


def read_gpu_models(path: Path) -> list[dict[str, str]]:
    """The rows of a GPU models table, checked against the packaged file's columns: a gpu_model on every
    row, once, and numbers where the models read numbers."""
    expected = _columns(PACKAGED_GPU_MODELS)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the GPU models table: {err.strerror}") from None
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames != expected:
        raise ConfigError(f"{path}: columns {reader.fieldnames}; expected {expected} (those of "
                          f"models/seeds/{SEED_NAME}.csv)")
    rows, seen = list(reader), set()
    for line, row in enumerate(rows, start=2):
        model = (row["gpu_model"] or "").strip()
        if not model or model in seen:
            raise ConfigError(f"{path}: line {line}: gpu_model {model!r} is {'repeated' if model else 'empty'}")
        seen.add(model)
        for column in _NUMBERS:
            if not _is_number(row[column]):
                raise ConfigError(f"{path}: line {line}: {column} {row[column]!r} is not a number")
    return rows


def with_prices(rows: list[dict[str, str]], prices: dict[str, float], where: str) -> list[dict[str, str]]:
    """`rows` with price_per_gpu_hour replaced for every model in `prices`; a model the table does not
    have, or a price that is not a positive number, is a ConfigError at `where`."""
    known = [row["gpu_model"] for row in rows]
    for model, price in prices.items():
        if model not in known:
            raise ConfigError(f"{where}: {model} is not a GPU model of the table; known: {known}")
        if not (math.isfinite(price) and price > 0):
            raise ConfigError(f"{where}: {model}: {price} is not a positive price")
    return [{**row, "price_per_gpu_hour": repr(float(prices[row["gpu_model"]]))} if row["gpu_model"] in prices
            else row for row in rows]


def render_gpu_models(rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=_columns(PACKAGED_GPU_MODELS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _columns(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as f:
        return next(csv.reader(f))


def _is_number(text: str | None) -> bool:
    try:
        return math.isfinite(float(text or ""))
    except ValueError:
        return False
