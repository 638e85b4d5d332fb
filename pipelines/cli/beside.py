"""A step of a command run side by side with the command's own work, in a process of its own.

`gpupool demo` runs its baseline month (the policies off) this way while it simulates the month with
the policies acting: that simulation keeps one core busy and leaves the others idle. The step's
printout is kept and printed when the command asks for its result, so the two never interleave; a
failed step is reported there as it would have been in the command's own process (StepFailed: exit 1
with the cause), and a command that stops (an error, Ctrl-C, SIGTERM) stops the step too.
"""
from __future__ import annotations

import io
import multiprocessing
import signal
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from multiprocessing.connection import Connection
from typing import Any, Self

from pipelines.duckdb_limits import machine_cpus, machine_memory_bytes
from pipelines.runner import StepFailed

# Side by side only where the machine has a core and the memory for a second month: below these the
# steps run one after the other, as before. (The default demo month peaks near 2.5 GB a process.)
MIN_CPUS = 2
MIN_MEMORY_BYTES = 8 * 2**30


def machine_allows() -> bool:
    """Whether this machine has the cores and the memory to run a step beside the command's own work."""
    return machine_cpus() >= MIN_CPUS and machine_memory_bytes() >= MIN_MEMORY_BYTES


class Beside:
    """`fn(*args)` started now in a process of its own (spawned: the parent's threads, Polars' and
    DuckDB's pools among them, are not forked into it). `result()` waits for it and gives
    (its printout, its return value), or raises StepFailed with the cause. Use it as a context
    manager: leaving the block stops the process if it is still running."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        context = multiprocessing.get_context("spawn")
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_run, args=(send, fn, args), name=f"beside {fn.__name__}")
        with _no_main_module():
            self._process.start()
        send.close()  # the child holds the only sending end: its death ends recv() with EOFError

    def result(self) -> tuple[str, Any]:
        try:
            status, printout, value, detail = self._receive.recv()
        except EOFError:
            self._process.join()
            raise StepFailed(f"the side-by-side step ended without an answer (exit code {self._process.exitcode})",
                             "") from None
        self._process.join()
        if status != "ok":
            raise StepFailed(value, f"{printout}\n{detail}")
        return printout, value

    def stop(self) -> None:
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._receive.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


@contextmanager
def _no_main_module() -> Iterator[None]:
    """A spawned child runs the parent's __main__ again (as __mp_main__) unless it has none. `fn` is
    imported by its module's name and needs nothing of it, and a __main__ that is not the command (a
    script another library ran as __main__ in this process, Streamlit's in the tests) would fail there."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _run(send: Connection, fn: Callable[..., Any], args: tuple) -> None:
    """In the child: fn(*args) with its printout kept, then ("ok", printout, value, "") or
    ("failed", printout, cause, detail) sent to the parent."""
    # Ctrl-C reaches the whole process group: the parent stops this process when it stops (Beside.stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    printout = io.StringIO()
    try:
        with redirect_stdout(printout), redirect_stderr(printout):
            value = fn(*args)
        answer = ("ok", printout.getvalue(), value, "")
    except StepFailed as err:
        answer = ("failed", printout.getvalue(), str(err), err.detail)
    except Exception as err:  # noqa: BLE001 - any failure is the parent's to report, with its stack
        answer = ("failed", printout.getvalue(), f"{type(err).__name__}: {err}", traceback.format_exc())
    send.send(answer)
    send.close()
