"""Load from several threads: the benchmarks' clients."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable


def drain(items: Iterable, work: Callable, *, threads: int) -> None:
    """Call ``work(item)`` for every item from ``threads`` threads that share one iterator (each takes the
    next item when it is free, so a slow call holds back only its own thread); return when all are done."""
    it = iter(items)
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                item = next(it, None)
            if item is None:
                return
            work(item)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
