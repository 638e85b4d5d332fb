"""The live service never loads the simulation: importing it in a fresh interpreter leaves
`allocator.sim` out of `sys.modules`."""
from __future__ import annotations

import subprocess
import sys

LIVE = ("allocator.service", "allocator.cli", "allocator.store", "allocator.engine", "allocator.telemetry")


def test_the_live_service_does_not_load_the_simulation() -> None:
    code = (
        f"import sys; import {', '.join(LIVE)}; "
        "print(sorted(m for m in sys.modules if m == 'allocator.sim' or m.startswith('allocator.sim.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
