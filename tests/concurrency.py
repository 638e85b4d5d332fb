"""Run one callable from several threads at the same moment, without ever hanging the suite."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def race(setup: Callable[[], Callable[[], T]], n: int, timeout_s: float = 60) -> list[T]:
    """Each of `n` threads runs `setup()` (its own connections, as a separate process would have),
    waits for the others, then calls what setup returned. The results, in finishing order.

    A thread that fails breaks the barrier, so the others stop waiting; its error is raised here."""
    barrier = threading.Barrier(n, timeout=timeout_s)
    results: list[T] = []
    errors: list[BaseException] = []
    guard = threading.Lock()

    def worker() -> None:
        try:
            call = setup()
            barrier.wait()
            result = call()
        except threading.BrokenBarrierError:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread below
            barrier.abort()
            with guard:
                errors.append(exc)
            return
        with guard:
            results.append(result)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads) or len(results) != n:
        raise AssertionError(f"only {len(results)} of {n} concurrent calls finished within {timeout_s:g} s")
    return results
