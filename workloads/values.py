"""What a pod gets from the workloads app, as plain frozen values the cluster backends render (volumes, mounts,
environment, ``/dev/shm``). No Django here: the backends import these and nothing else of the app."""

from __future__ import annotations

from dataclasses import dataclass

CHECKPOINT_ENV = "PORTAL_CHECKPOINT_DIR"
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"  # noqa: S108 - the container's shared memory, not a temporary file


@dataclass(frozen=True, slots=True)
class Mount:
    """One data source mounted into the pod: the claim ``claim_name`` of the pod's namespace, its
    ``sub_path`` (may be empty) at ``path``. ``storage``: where the simulated cluster keeps the source's
    files (``<cluster>/<source>``); ``checkpoint``: the job's checkpoint directory."""

    source: str
    volume: str  # the pod's volume name (DNS label)
    claim_name: str
    path: str
    sub_path: str = ""
    read_only: bool = True
    storage: str = ""
    checkpoint: bool = False


@dataclass(frozen=True, slots=True)
class PodWorkload:
    mounts: tuple[Mount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    shm_mb: int = 0  # a memory-backed /dev/shm of this size; 0: the runtime's own

    @property
    def claims(self) -> tuple[str, ...]:
        return tuple(sorted({m.claim_name for m in self.mounts}))
