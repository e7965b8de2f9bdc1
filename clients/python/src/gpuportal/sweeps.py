"""Sweeps and pipelines on the client: job arrays, dependencies, hold and release (docs/sweeps.md).

Mixed into ``Client``; every call goes through its retrying ``_json``."""

from __future__ import annotations

import builtins
import uuid
from typing import Any


def _id(obj: int | str | dict) -> int:
    return int(obj["id"]) if isinstance(obj, dict) else int(str(obj).lstrip("aA"))


class SweepsMixin:
    _json: Any  # Client._json

    def submit_array(self, spec: dict | None = None, /, *, array: str, idempotency_key: str | None = None,
                     **fields) -> dict:
        """Submit a job array: ``array`` is Slurm's syntax (``"0-63%8"``: 64 tasks, at most 8 at once). Each task
        is a job with ``PORTAL_ARRAY_INDEX`` in its environment, and ``{{index}}`` / ``{{count}}`` in its command
        and env values are filled in. Returns the array with its ``counts`` of tasks by state."""
        body = {**(spec or {}), **fields, "array": array}
        key = idempotency_key or str(uuid.uuid4())
        return self._json("POST", "arrays", json=body, headers={"Idempotency-Key": key})

    def array(self, array: int | str | dict) -> dict:
        """The array (``7`` or ``"a7"``) with its tasks counted by state."""
        return self._json("GET", f"arrays/{_id(array)}")

    def array_tasks(self, array: int | str | dict) -> builtins.list[dict]:
        """The array's tasks (jobs), in index order."""
        return self._all("jobs", {"array": _id(array)})  # type: ignore[attr-defined]

    def array_cancel(self, array: int | str | dict, *, waiting_only: bool = False, comment: str = "") -> dict:
        """Cancel the array's tasks that have not ended (``waiting_only``: only those not started)."""
        return self._json("POST", f"arrays/{_id(array)}/cancel", json={"waiting_only": waiting_only, "comment": comment})

    def hold(self, job: int | str | dict) -> dict:
        """Hold a waiting job (``12``) or every waiting task of an array (``"a7"``): kept in its place, not admitted."""
        return self._hold(job, "hold")

    def release(self, job: int | str | dict) -> dict:
        """Release a held job or array: it is considered again, in its old place."""
        return self._hold(job, "release")

    def _hold(self, job, verb: str) -> dict:
        if isinstance(job, str) and job[:1] in "aA":
            return self._json("POST", f"arrays/{_id(job)}/{verb}")
        return self._json("POST", f"jobs/{_id(job)}/{verb}")

    def set_dependencies(self, job: int | str | dict, after: str | builtins.list[dict]) -> dict:
        """Replace what a waiting job waits for: ``"afterok:12,afterany:a7"`` or ``[{"condition": "afterok", "job": 12}]``."""
        return self._json("POST", f"jobs/{_id(job)}/dependencies", json={"after": after})
