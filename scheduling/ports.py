"""What scheduling asks of right-sizing above it, as one small port that observability implements.

Observability stands above scheduling and scheduling never imports it (pyproject.toml's contracts check it).
Two answers come through here, as values:

* ``recommendation(user=..., name=..., image=...)``: the owner's right-sizing recommendation for a job like
  this one (a dict as ``GET /api/v1/recommendations`` answers it, None without history), shown in the quote;
  with a shareable ``flavor`` its ``fraction`` is the part of a GPU the job fits in, priced at ``tier``;
* ``predicted_runtimes(jobs)``: for (job id, owner id, name, image) of the jobs a cycle reads, the run time
  their owners' similar jobs took (the EWMA, alpha 0.3, with 20% headroom), for the start estimates.

Observability registers its implementation in ``ObservabilityConfig.ready()``. Until then (scheduling alone)
the default knows nothing: no recommendation, every job expected to run to its max runtime.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Sizing(Protocol):
    def recommendation(self, *, user, name: str, image: str, flavor=None, tier: str = "") -> dict | None: ...

    def predicted_runtimes(self, jobs: Iterable[tuple[int, int, str, str]]) -> dict[int, float]: ...


class NoSizing:
    def recommendation(self, *, user, name: str, image: str, flavor=None, tier: str = "") -> dict | None:
        return None

    def predicted_runtimes(self, jobs: Iterable[tuple[int, int, str, str]]) -> dict[int, float]:
        return {}


_sizing: Sizing = NoSizing()


def register(sizing: Sizing) -> None:
    """Install observability's implementation (once, from its AppConfig.ready; a test may swap it)."""
    global _sizing
    _sizing = sizing


def sizing() -> Sizing:
    return _sizing
