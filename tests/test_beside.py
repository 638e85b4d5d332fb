"""A command's step run side by side in a process of its own (pipelines/cli/beside.py): its printout and
value come back, its failure comes back as a step failure, and the command leaving stops it."""
from __future__ import annotations

import os
import sys
import time
import types

import pytest

from pipelines.cli import beside
from pipelines.cli.beside import Beside
from pipelines.runner import StepFailed


def prints_and_returns(rows: int) -> list[tuple[str, float, int]]:
    print(f"▸ simulating {rows} days")
    print("warned", file=sys.stderr)
    return [("baseline simulate", 0.5, rows)]


def fails_as_a_step() -> None:
    print("▸ build models")
    raise StepFailed("model marts.fct_gpu_activity failed: Out of Memory", "the stack")


def fails_otherwise() -> None:
    raise KeyError("gpu_model")


def dies() -> None:
    os._exit(3)


def sleeps() -> None:
    time.sleep(600)


def test_a_step_beside_gives_back_its_printout_and_its_value():
    with Beside(prints_and_returns, 30) as step:
        printout, value = step.result()
    assert printout == "▸ simulating 30 days\nwarned\n"  # stderr kept too, in order
    assert value == [("baseline simulate", 0.5, 30)]


def test_a_step_failure_beside_is_raised_with_its_cause_and_its_printout_in_the_detail():
    with Beside(fails_as_a_step) as step, pytest.raises(StepFailed) as failed:
        step.result()
    assert str(failed.value) == "model marts.fct_gpu_activity failed: Out of Memory"
    assert "▸ build models" in failed.value.detail and "the stack" in failed.value.detail


def test_any_other_error_beside_is_a_step_failure_with_its_stack():
    with Beside(fails_otherwise) as step, pytest.raises(StepFailed) as failed:
        step.result()
    assert str(failed.value) == "KeyError: 'gpu_model'"
    assert "Traceback" in failed.value.detail and "fails_otherwise" in failed.value.detail


def test_a_step_whose_process_dies_is_a_step_failure_naming_its_exit_code():
    with Beside(dies) as step, pytest.raises(StepFailed, match="without an answer \\(exit code 3\\)"):
        step.result()


def test_leaving_the_block_stops_a_step_still_running():
    began = time.monotonic()
    with Beside(sleeps) as step:
        process = step._process
        assert process.is_alive()
    assert not process.is_alive() and time.monotonic() - began < 60


def test_a_step_beside_does_not_run_the_parents_main_module_again(monkeypatch, tmp_path):
    """As Streamlit's tests leave dashboards/app.py as __main__ of a pytest worker: a spawned child would
    run it again, and it fails outside `streamlit run`."""
    script = tmp_path / "main.py"
    script.write_text("raise SystemExit('the parent main ran again in the child')\n")
    main = types.ModuleType("__main__")
    main.__file__, main.__spec__ = str(script), None
    monkeypatch.setitem(sys.modules, "__main__", main)
    with Beside(prints_and_returns, 3) as step:
        assert step.result()[1] == [("baseline simulate", 0.5, 3)]
    assert sys.modules["__main__"] is main


@pytest.mark.parametrize(("cpus", "memory_gib", "allowed"), [
    (2, 8, True), (16, 64, True), (1, 64, False), (2, 8 - 1 / 1024, False),
])
def test_a_step_runs_beside_only_with_a_spare_core_and_the_memory_for_it(monkeypatch, cpus, memory_gib, allowed):
    monkeypatch.setattr(beside, "machine_cpus", lambda: cpus)
    monkeypatch.setattr(beside, "machine_memory_bytes", lambda: int(memory_gib * 2**30))
    assert beside.machine_allows() is allowed
