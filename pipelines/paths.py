"""Where the project's files live: the repository's models/ and the default home for outputs."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO_ROOT / "models"
CONTRACTS_DIR = MODELS_DIR / "contracts"


def default_home() -> Path:
    """The gpupool home (warehouse, lake, landing zone): $GPUPOOL_HOME or ./.gpupool."""
    return Path(os.environ.get("GPUPOOL_HOME", ".gpupool")).resolve()
