"""The one rule for tests that need a real component (Prometheus, Chromium, poppler, ...): skipped
locally with the reason and how to get it; a failure where GPUPOOL_REQUIRE_COMPONENTS=1 (CI)."""
from __future__ import annotations

import os

import pytest

REQUIRE_COMPONENTS_ENV = "GPUPOOL_REQUIRE_COMPONENTS"


def require_component(name: str, present: bool, how_to_get_it: str) -> None:
    """Skip (locally) or fail (with GPUPOOL_REQUIRE_COMPONENTS=1, in CI) when `name` is missing."""
    if not present:
        component_missing(f"{name} is not installed ({how_to_get_it})")


def component_missing(message: str) -> None:
    """The rule itself, for a component that is there but unusable (a server that does not start)."""
    if os.environ.get(REQUIRE_COMPONENTS_ENV) == "1":
        pytest.fail(f"{message}, and {REQUIRE_COMPONENTS_ENV}=1 requires it", pytrace=False)
    pytest.skip(f"{message}; set {REQUIRE_COMPONENTS_ENV}=1 to make this a failure")
