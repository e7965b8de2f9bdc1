"""benchmarks.workers.drain: the benchmarks' clients take every item exactly once, from several threads."""

from __future__ import annotations

import threading

from benchmarks.workers import drain


def test_every_item_is_worked_once_and_by_several_threads():
    seen: list[int] = []
    names: set[str] = set()
    lock = threading.Lock()
    barrier = threading.Barrier(3, timeout=30)  # the first three calls wait for each other: three threads ran

    def work(item: int) -> None:
        if item < 3:
            barrier.wait()
        with lock:
            seen.append(item)
            names.add(threading.current_thread().name)

    drain(range(500), work, threads=3)
    assert sorted(seen) == list(range(500)) and len(names) == 3
