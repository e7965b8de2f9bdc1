"""What a job asks for besides its image: data source mounts, a checkpoint directory, a ``/dev/shm`` size.

Two checks, both at submission: ``mount_shape_problems`` (the shape alone, called by the submit serializer for
its field errors) and ``validate_job_workload`` (against the department's sources, called by the submit
service, which knows the department). Both answer in the API's one error shape (portal/errors.py).
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict
from typing import Any

from django.conf import settings

from portal.errors import ValidationFailed
from workloads.models import DataSource
from workloads.values import SHM_PATH

MAX_MOUNTS = 16
PATH_MAX = 255
DEFAULT_CHECKPOINT_PATH = "/checkpoint"
# Mount paths a job may not take: the kernel's and the runtime's own file systems, and the root itself.
FORBIDDEN_PREFIXES = ("/proc", "/dev", "/sys", "/etc", "/var/run/secrets")
SOURCE_NAME = re.compile(r"^[-a-zA-Z0-9_]{1,40}$")
_PATH_PART = re.compile(r"^[A-Za-z0-9_.@+-]+$")
MOUNT_KEYS = {"source", "path", "read_only"}
CHECKPOINT_KEYS = {"source", "path", "cluster"}
SHM_MIN_MB = 64


def _err(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def path_problem(path: Any) -> tuple[str, str] | None:
    """Why ``path`` cannot be a mount path in the container, as (code, message); None when it can."""
    if not isinstance(path, str) or not path:
        return "invalid_path", "Give the mount path as an absolute path, e.g. \"/data\"."
    if len(path) > PATH_MAX:
        return "invalid_path", f"A mount path is at most {PATH_MAX} characters."
    if not path.startswith("/") or path == "/":
        return "invalid_path", f"{path!r}: a mount path is absolute and not \"/\" itself."
    parts = path[1:].split("/")
    if any(p in ("", ".", "..") or not _PATH_PART.match(p) for p in parts):
        return "invalid_path", (f"{path!r}: use a normalised path of letters, digits and '_.@+-' (no '..', no "
                                "empty parts or trailing '/').")
    for prefix in FORBIDDEN_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return "forbidden_path", f"{path!r} is under {prefix}, which belongs to the system: mount elsewhere."
    return None


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def mount_shape_problems(mounts: Any) -> list[str]:
    """Messages for a ``mounts`` value that is not a list of {"source", "path", "read_only"?} objects with
    valid, non-overlapping paths; [] when the shape is fine (the sources are checked by the service)."""
    if not isinstance(mounts, list):
        return ['Give mounts as a list of {"source": "name", "path": "/data"} objects.']
    if len(mounts) > MAX_MOUNTS:
        return [f"At most {MAX_MOUNTS} mounts."]
    problems: list[str] = []
    seen: list[str] = []
    for i, m in enumerate(mounts):
        if not isinstance(m, dict):
            problems.append(f"Mount {i}: an object with \"source\" and \"path\" is required.")
            continue
        unknown = sorted(set(m) - MOUNT_KEYS)
        if unknown:
            problems.append(f"Mount {i}: unknown field(s) {', '.join(map(repr, unknown))}; a mount has source, "
                            "path and read_only.")
        source = m.get("source")
        if not isinstance(source, str) or not SOURCE_NAME.match(source):
            problems.append(f"Mount {i}: \"source\" is the name of a data source (GET /api/v1/data-sources).")
        if "read_only" in m and not isinstance(m["read_only"], bool):
            problems.append(f"Mount {i}: \"read_only\" is true or false.")
        bad = path_problem(m.get("path"))
        if bad:
            problems.append(f"Mount {i}: {bad[1]}")
            continue
        clash = next((p for p in seen if _overlaps(p, m["path"])), None)
        if clash is not None:
            problems.append(f"Mount {i}: {m['path']!r} conflicts with the mount at {clash!r} (same or nested "
                            "path).")
        seen.append(m["path"])
    return problems


def default_shm_mb(memory_mib: int) -> int:
    """A job that gives no size gets SHM_DEFAULT_MB, at most half its memory (and at least the minimum)."""
    return max(SHM_MIN_MB, min(settings.SHM_DEFAULT_MB, memory_mib // 2))


def validate_job_workload(*, department_id: int, mounts: list[dict], checkpoint: Any, shm_mb: int | None,
                          memory_mib: int) -> dict[str, Any]:
    """Check a job's mounts, checkpoint and shm against what its department may use; returns the values to
    store on the job: ``{"mounts": [...], "checkpoint": {...} or {}, "shm_mb": n}``. Raises ValidationFailed
    with field errors (an unknown source is reported as unknown whether it does not exist or belongs to
    another department: the tenancy rule)."""
    errors: dict[str, list[dict[str, str]]] = defaultdict(list)
    names = {m["source"] for m in mounts}
    ckpt_name = checkpoint.get("source") if isinstance(checkpoint, dict) else None
    if isinstance(ckpt_name, str):
        names.add(ckpt_name)
    usable = list(DataSource.objects.usable_by(department_id).filter(name__in=names).select_related("cluster")
                  ) if names else []
    by_name: dict[str, list[DataSource]] = defaultdict(list)
    for source in usable:
        by_name[source.name].append(source)

    cleaned: list[dict] = []
    for i, m in enumerate(mounts):
        read_only = m.get("read_only", True)
        rows = by_name.get(m["source"])
        if not rows:
            errors["mounts"].append(_err("unknown_source", f"Mount {i}: no data source {m['source']!r} is "
                                                            "available to your department."))
            continue
        if not read_only and not any(r.writable for r in rows):
            errors["mounts"].append(_err("read_only_source", f"Mount {i}: {m['source']!r} is read-only; drop "
                                                              "\"read_only\": false to mount it read-only."))
            continue
        cleaned.append({"source": m["source"], "path": m["path"], "read_only": bool(read_only)})

    ckpt = _checkpoint(department_id, checkpoint, by_name, mounts, errors)
    shm = _shm(shm_mb, memory_mib, errors)
    if errors:
        raise ValidationFailed(fields=dict(errors))
    return {"mounts": cleaned, "checkpoint": ckpt, "shm_mb": shm}


def _checkpoint(department_id: int, checkpoint: Any, by_name: dict[str, list[DataSource]], mounts: list[dict],
                errors: dict) -> dict:
    if checkpoint in (None, False, {}):
        return {}
    if checkpoint is True:
        own = sorted({s.name for s in DataSource.objects.filter(department_id=department_id, writable=True)})
        if len(own) != 1:
            errors["checkpoint"].append(_err(
                "no_default_source",
                "Your department has no writable data source for checkpoints." if not own else
                f"Your department has several writable sources ({', '.join(own)}): name one, "
                "e.g. {\"source\": \"" + own[0] + "\"}."))
            return {}
        checkpoint = {"source": own[0]}
        by_name = {own[0]: list(DataSource.objects.filter(department_id=department_id, name=own[0])
                                .select_related("cluster"))}
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("source"), str):
        errors["checkpoint"].append(_err("invalid", 'Give true (your department\'s writable source) or '
                                                    '{"source": "name", "path": "/checkpoint"}.'))
        return {}
    unknown = sorted(set(checkpoint) - CHECKPOINT_KEYS)
    if unknown:
        errors["checkpoint"].append(_err("invalid", f"Unknown field(s) {', '.join(map(repr, unknown))}; a "
                                                    "checkpoint has source, path and cluster."))
        return {}
    name = checkpoint["source"]
    path = checkpoint.get("path", DEFAULT_CHECKPOINT_PATH)
    bad = path_problem(path)
    if bad:
        errors["checkpoint"].append(_err(*bad))
        return {}
    clash = next((m["path"] for m in mounts if _overlaps(m["path"], path)), None)
    if clash is not None:
        errors["checkpoint"].append(_err("path_conflict", f"{path!r} conflicts with the mount at {clash!r}."))
        return {}
    rows = [s for s in by_name.get(name, ()) if s.department_id == department_id]
    if not rows:
        known = by_name.get(name)
        errors["checkpoint"].append(_err(
            "not_department_source" if known else "unknown_source",
            f"{name!r} is not your department's own source: checkpoints go on one of its writable sources."
            if known else f"No data source {name!r} is available to your department."))
        return {}
    rows = [s for s in rows if s.writable]
    if not rows:
        errors["checkpoint"].append(_err("read_only_source", f"{name!r} is read-only: checkpoints need a writable "
                                                              "source."))
        return {}
    cluster = checkpoint.get("cluster")
    if cluster is not None:
        rows = [s for s in rows if s.cluster.name == cluster]
        if not rows:
            errors["checkpoint"].append(_err("unknown_cluster", f"{name!r} is not declared on cluster {cluster!r}."))
            return {}
    if len(rows) > 1:
        errors["checkpoint"].append(_err(
            "ambiguous_source", f"{name!r} exists on several clusters ({', '.join(sorted(s.cluster.name for s in rows))}"
            "): add \"cluster\" to say where the checkpoints live (every attempt runs there)."))
        return {}
    source = rows[0]
    return {"source": source.name, "source_id": source.pk, "cluster": source.cluster.name, "path": path}


def _shm(shm_mb: int | None, memory_mib: int, errors: dict) -> int:
    if shm_mb is None:
        return default_shm_mb(memory_mib)
    bound = min(settings.SHM_MAX_MB, memory_mib)
    if shm_mb < SHM_MIN_MB or shm_mb > bound:
        errors["shm_mb"].append(_err(
            "out_of_range", f"{SHM_PATH} must be between {SHM_MIN_MB} and {bound} MiB (at most the job's memory, "
            f"{memory_mib} MiB, and SHM_MAX_MB, {settings.SHM_MAX_MB})."))
    return shm_mb


def checkpoint_sub_path(source: DataSource, job_id: int) -> str:
    """The job's directory on the source: the same for every attempt."""
    return posixpath.join(source.sub_path or "", "checkpoints", f"job-{job_id}")
