"""The simulator's trace format: one row per job, read from / written to CSV.

Required columns: ``job_id, submit_time_s, duration_s, gpus, department``.
Optional columns (blank or absent = the default in brackets): ``user`` [assigned from the department's members,
seeded], ``tier`` [assigned by the scenario's rules/fractions, else ``elastic``], ``urgency`` [same, else
``normal``], ``flavor`` [the cluster's first flavor], ``deadline_s`` [none; absolute seconds on the trace clock],
``bid`` [0], ``max_runtime_s`` [scenario ``max_runtime`` rule], ``pods`` [smallest pod count that divides the
GPUs and fits the flavor's node size], ``checkpoint_interval_s`` [the scenario's ``simulation.checkpoint_interval_s``;
0 = this job never checkpoints], ``notice_s`` [the scenario's ``simulation.notice_s``; the notice the job
declares before an eviction], ``cluster_selector``/``cluster_preference`` [the scenario's; ``key=value;...``],
and sweeps: ``array`` [none; rows with the same name are the tasks of one array], ``array_throttle`` [none; at
most that many of the array's tasks at once, given on any of its rows], ``after`` [none; what the job waits for:
``afterok:KEY[:KEY...]``, several joined by ``;``, where KEY is another row's ``job_id`` or ``@NAME`` an array,
and the condition one of ``afterok``, ``afterany``, ``afternotok``], and shapes: ``roles`` [none: one role of
``pods`` x GPUs; else ``NAME:PODS:GPUS:CORES:MEMORY_GIB[:FLAVOR]`` per role, joined by ``;``, GPUS per pod (0: the
role runs on a CPU pool, FLAVOR or the scenario's only one), CORES and MEMORY_GIB per pod; the ``gpus`` column is
then the roles' GPUs added up, 0 for a CPU-only job], ``price_surcharge_pct`` [0; the surcharge on the base price
in percent that a job running non-preemptible pays], ``gpu_fraction`` [none: whole GPUs; else the fraction of
one GPU each pod asks for, 0 < f < 1 (docs/fractions.md), with ``gpus`` its pods' count].

Times are seconds on the trace's own clock (any origin). Nothing here reads a clock or imports Django.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from csvsafe import safe_cell

REQUIRED = ("job_id", "submit_time_s", "duration_s", "gpus", "department")
OPTIONAL = ("user", "tier", "urgency", "flavor", "deadline_s", "bid", "max_runtime_s", "pods", "checkpoint_interval_s",
            "cluster_selector", "cluster_preference", "array", "array_throttle", "after", "preemptible",
            "notice_s", "roles", "price_surcharge_pct", "gpu_fraction")
COLUMNS = REQUIRED + OPTIONAL
# The file's ``gpus`` column (the job's GPUs, all its pods) is the row's ``total_gpus``; the others are named alike.
_ATTRIBUTE = {"gpus": "total_gpus"}


def column_value(row: TraceRow, column: str):
    """``row``'s value of the trace file's ``column``."""
    value = getattr(row, _ATTRIBUTE.get(column, column))
    if column == "roles":
        return _fmt_roles(value)
    return ("true" if value else "false") if isinstance(value, bool) else value


class TraceError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TraceRow:
    job_id: str
    submit_time_s: float
    duration_s: float
    total_gpus: int  # the trace's ``gpus`` column: all the job's GPUs
    department: str
    user: str = ""
    tier: str | None = None
    urgency: str | None = None
    flavor: str | None = None
    deadline_s: float | None = None
    bid: int = 0
    max_runtime_s: float | None = None
    pods: int | None = None
    checkpoint_interval_s: float | None = None  # None: the scenario's default; 0: never checkpoints
    # cluster labels this job required / preferred (the portal's history records them per job); None: the
    # scenario's per-department assignment
    cluster_selector: tuple[tuple[str, str], ...] | None = None
    cluster_preference: tuple[tuple[str, str], ...] | None = None
    array: str | None = None  # rows with the same array name are the tasks of one array
    array_throttle: int | None = None
    after: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (condition, keys): a key is a job_id or "@" + an array
    preemptible: bool | None = None  # the job's own choice apart from its tier (None: its tier's)
    notice_s: float | None = None  # the notice it declares before an eviction (None: the scenario's)
    # A job of roles: (name, pods, GPUs per pod, cores per pod, GiB per pod, CPU pool or None) each; () for one
    # role of ``pods`` x GPUs, every job before roles.
    roles: tuple[tuple[str, int, int, float, float, str | None], ...] = ()
    # the surcharge on its base price, in percent, that it pays for running non-preemptible (the lab's
    # ``PreemptionLimit``; the portal records it per job), so a replay charges what the portal charged
    price_surcharge_pct: int = 0
    gpu_fraction: float | None = None  # a fraction of one GPU per pod (None: whole GPUs)


ROLE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


def parse_roles(v: str | None) -> tuple:
    """``trainer:2:4:16:64;data:4:0:4:8:cpu`` as (name, pods, gpus, cores, memory_gib, flavor) tuples."""
    out = []
    for part in filter(None, (p.strip() for p in (v or "").split(";"))):
        fields = [f.strip() for f in part.split(":")]
        if len(fields) not in (5, 6) or not ROLE_NAME.match(fields[0]):
            raise ValueError(f"roles must be NAME:PODS:GPUS:CORES:MEMORY_GIB[:FLAVOR] joined by ';', got {part!r}")
        pods, gpus, cores, mem = int(fields[1]), int(fields[2]), float(fields[3]), float(fields[4])
        if pods < 1 or gpus < 0 or cores < 0 or mem < 0 or (gpus == 0 and not (cores > 0 and mem > 0)):
            raise ValueError(f"role {fields[0]}: at least 1 pod, and a role without GPUs asks for cores and memory")
        out.append((fields[0], pods, gpus, cores, mem, (fields[5] or None) if len(fields) == 6 else None))
    if len({r[0] for r in out}) != len(out):
        raise ValueError("two roles of one name")
    if len({r[2] for r in out if r[2]}) > 1:
        raise ValueError("the roles with GPUs share one number of GPUs per pod")
    return tuple(out)


def _fmt_roles(roles) -> str:
    return ";".join(":".join(_fmt(x) for x in r[:5]) + (f":{r[5]}" if r[5] else "") for r in roles)


def _opt_bool(v: str | None) -> bool | None:
    v = (v or "").strip().lower()
    if not v:
        return None
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    raise ValueError(f"preemptible must be true, false or empty, not {v!r}")


def _opt_float(v: str | None) -> float | None:
    v = (v or "").strip()
    return float(v) if v else None


def _opt_int(v: str | None) -> int | None:
    v = (v or "").strip()
    return int(float(v)) if v else None


def _opt_str(v: str | None) -> str | None:
    v = (v or "").strip()
    return v or None


def _opt_labels(v: str | None) -> tuple[tuple[str, str], ...] | None:
    """``key=value;key=value`` as sorted pairs; empty = None (the scenario decides)."""
    v = (v or "").strip()
    if not v:
        return None
    pairs = []
    for part in filter(None, (p.strip() for p in v.split(";"))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"cluster labels must be key=value;key=value, got {v!r}")
        pairs.append((key.strip(), value.strip()))
    return tuple(sorted(pairs))


AFTER_CONDITIONS = ("afterok", "afterany", "afternotok")


def _opt_after(v: str | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``afterok:j1:j2;afterany:@sweep`` as (condition, keys) pairs."""
    out = []
    for part in filter(None, (p.strip() for p in (v or "").split(";"))):
        condition, *keys = [k.strip() for k in part.split(":")]
        if condition not in AFTER_CONDITIONS or not keys or not all(keys):
            raise ValueError(f"after must be afterok|afterany|afternotok:KEY[:KEY...] joined by ';', got {part!r}")
        out.append((condition, tuple(keys)))
    return tuple(out)


def _fmt_after(after) -> str:
    return ";".join(f"{c}:{':'.join(keys)}" for c, keys in after)


def parse_rows(lines: Iterable[str], *, source: str = "<trace>") -> list[TraceRow]:
    """Parse trace CSV text (an iterable of lines, header first) into rows, validating the columns."""
    reader = csv.DictReader(lines)
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceError(f"{source}: missing required column(s) {', '.join(missing)}")
    out: list[TraceRow] = []
    for n, rec in enumerate(reader, start=2):
        try:
            row = TraceRow(
                job_id=rec["job_id"].strip(),
                submit_time_s=float(rec["submit_time_s"]),
                duration_s=float(rec["duration_s"]),
                total_gpus=int(float(rec["gpus"])),
                department=rec["department"].strip(),
                user=(rec.get("user") or "").strip(),
                tier=_opt_str(rec.get("tier")),
                urgency=_opt_str(rec.get("urgency")),
                flavor=_opt_str(rec.get("flavor")),
                deadline_s=_opt_float(rec.get("deadline_s")),
                bid=_opt_int(rec.get("bid")) or 0,
                max_runtime_s=_opt_float(rec.get("max_runtime_s")),
                pods=_opt_int(rec.get("pods")),
                checkpoint_interval_s=_opt_float(rec.get("checkpoint_interval_s")),
                cluster_selector=_opt_labels(rec.get("cluster_selector")),
                cluster_preference=_opt_labels(rec.get("cluster_preference")),
                array=_opt_str(rec.get("array")),
                array_throttle=_opt_int(rec.get("array_throttle")),
                after=_opt_after(rec.get("after")),
                preemptible=_opt_bool(rec.get("preemptible")),
                notice_s=_opt_float(rec.get("notice_s")),
                roles=parse_roles(rec.get("roles")),
                price_surcharge_pct=_opt_int(rec.get("price_surcharge_pct")) or 0,
                gpu_fraction=_opt_float(rec.get("gpu_fraction")),
            )
        except (TypeError, ValueError) as exc:
            raise TraceError(f"{source}:{n}: {exc}") from None
        if row.total_gpus < 0 or row.duration_s < 0 or (row.checkpoint_interval_s or 0) < 0 or (row.notice_s or 0) < 0 \
                or row.price_surcharge_pct < 0:
            raise TraceError(f"{source}:{n}: negative gpus, duration, checkpoint interval, notice or surcharge")
        if row.roles and row.total_gpus != sum(r[1] * r[2] for r in row.roles):
            raise TraceError(f"{source}:{n}: gpus must be the roles' GPUs added up "
                             f"({sum(r[1] * r[2] for r in row.roles)})")
        if row.gpu_fraction is not None and not (0 < row.gpu_fraction < 1 and not row.roles):
            raise TraceError(f"{source}:{n}: gpu_fraction must be between 0 and 1 (exclusive), on a row without roles")
        if row.array_throttle is not None and (row.array_throttle < 1 or row.array is None):
            raise TraceError(f"{source}:{n}: array_throttle must be at least 1, on a row with an array")
        out.append(row)
    return out


def read_csv(path: str | Path) -> list[TraceRow]:
    with open(path, newline="") as fh:
        return parse_rows(fh, source=str(path))


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, tuple) and v and isinstance(v[0][1], tuple):  # the after column
        return _fmt_after(v)
    if isinstance(v, tuple):
        return ";".join(f"{k}={val}" for k, val in v)
    if isinstance(v, float):
        return repr(int(v)) if v.is_integer() else repr(round(v, 3))
    return str(v)


def _cell(v) -> str:
    return _fmt(v) if isinstance(v, int | float) else safe_cell(_fmt(v))


def write_csv(rows: Iterable[TraceRow], out: str | Path | io.TextIOBase) -> None:
    """Write rows in the trace format (all columns, blanks for unset optional values)."""
    own = not hasattr(out, "write")
    fh = open(out, "w", newline="") if own else out  # noqa: SIM115
    try:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:  # numbers are formatted as text, so only the text columns go through safe_cell
            w.writerow([_cell(column_value(r, c)) for c in COLUMNS])
    finally:
        if own:
            fh.close()


def offered_load(rows: list[TraceRow], capacity_gpus: int) -> float:
    """rho = offered GPU-seconds / (capacity x arrival span). The span is last minus first submission."""
    if not rows or capacity_gpus <= 0:
        return 0.0
    t0 = min(r.submit_time_s for r in rows)
    t1 = max(r.submit_time_s for r in rows)
    span = max(t1 - t0, 1.0)
    work = sum(r.total_gpus * _effective_duration(r) for r in rows)
    return work / (capacity_gpus * span)


def _effective_duration(r: TraceRow) -> float:
    return min(r.duration_s, r.max_runtime_s) if r.max_runtime_s else r.duration_s


def compress_to_load(rows: list[TraceRow], capacity_gpus: int, target: float) -> tuple[list[TraceRow], float]:
    """Scale inter-arrival times (durations untouched) so the offered load equals ``target``.

    Returns the new rows (submit times start at 0; deadlines keep their slack after submission) and the factor
    applied to the arrival clock (<1 compresses, >1 stretches).
    """
    if not rows:
        return [], 1.0
    rho = offered_load(rows, capacity_gpus)
    factor = rho / target if target > 0 and rho > 0 else 1.0
    t0 = min(r.submit_time_s for r in rows)
    out = []
    for r in rows:
        sub = (r.submit_time_s - t0) * factor
        dl = None if r.deadline_s is None else sub + (r.deadline_s - r.submit_time_s)
        out.append(replace(r, submit_time_s=sub, deadline_s=dl))
    return out, factor


def sort_rows(rows: Iterable[TraceRow]) -> list[TraceRow]:
    return sorted(rows, key=lambda r: (r.submit_time_s, r.job_id))
