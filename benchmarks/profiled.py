"""Run a Python program under cProfile, every thread of it, and write the merged profile when it exits.

    python -m benchmarks.profiled OUT.prof -m celery -A portal worker ...
    python -m benchmarks.profiled OUT.prof manage.py watch_pods

``python -m cProfile`` follows only the main thread; the pod workers and the notifier do their work on Celery's
thread pool and the watcher on a thread per cluster, so each thread started here gets a profiler of its own,
and all are merged into OUT.prof (read it with ``python -m pstats`` or ``pstats.Stats``). The benchmark wraps
each process of the stack in it when ``E2E_PROFILE_DIR`` is set. Profiling slows the program: figures from a
profiled run are for finding where the time goes, not for the CPU per job.
"""

from __future__ import annotations

import atexit
import cProfile
import pstats
import runpy
import sys
import threading

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()


def _start_thread_profile(*_args) -> None:
    prof = cProfile.Profile()
    with _lock:
        _profiles.append(prof)
    prof.enable()  # replaces this hook as the thread's profile function


def _dump(out: str) -> None:
    with _lock:
        profiles = list(_profiles)
    stats = None
    for prof in profiles:
        try:
            prof.disable()
        except Exception:  # noqa: BLE001, S110 - another thread's profiler: its data is read all the same
            pass
        try:
            stats = pstats.Stats(prof) if stats is None else stats.add(prof)
        except TypeError:  # a thread that never ran a profiled call
            continue
    if stats is not None:
        stats.dump_stats(out)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, rest = sys.argv[1], sys.argv[2:]
    atexit.register(_dump, out)
    threading.setprofile(_start_thread_profile)
    _start_thread_profile()
    if rest[0] == "-m":
        sys.argv = [rest[1], *rest[2:]]
        runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = rest
        runpy.run_path(rest[0], run_name="__main__")


if __name__ == "__main__":
    main()
