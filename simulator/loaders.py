"""Loaders that turn public GPU-cluster traces into the simulator's trace format (``TraceRow``).

Each returns ``(rows, shares)`` where ``shares`` maps department -> quota weight when the trace knows one
(Philly's VC sizes) and is None otherwise. The traces are read in place (``../shared/traces`` by default or a
given path); nothing is extracted or copied into the repository.

- ``philly``: ``philly_gavel_per_vc.csv`` (department = VC); ``philly_vc_size.csv`` next to it gives quota
  shares. 1,548 jobs have no duration estimate: by default they get one sampled (seeded) from the jobs with the
  same GPU count (``missing_duration: sample``), or are dropped (``drop``).
- ``elasticflow``: one cluster CSV from ``elasticflow-traces.tar.gz`` (read with ``tarfile``), with deadlines.
  No tenant column: departments are assigned by the scenario's ``assign.department`` fractions.
- ``alibaba``: ``openb_pod_list_default.csv``; pods without GPUs are skipped, fractional GPUs count as one
  whole GPU (GPU sharing is out of scope), duration = deletion - scheduled (creation for never-scheduled pods);
  QoS LS -> realtime, BE -> backfill, Burstable/Guaranteed -> elastic. No tenant column (as elasticflow).
- ``csv``: a file already in the trace format.
"""

from __future__ import annotations

import csv
import io
import os
import random
import tarfile
from collections import defaultdict
from pathlib import Path

from .trace import TraceError, TraceRow, read_csv

DEFAULT_TRACE_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"


def trace_dir() -> Path:
    env = os.environ.get("SIM_TRACE_DIR")
    return Path(env) if env else DEFAULT_TRACE_DIR.resolve()


def resolve_path(path: str | Path, *, base_dir: Path | None = None, trace_dir: str | Path | None = None) -> Path:
    """Find a trace file: absolute path, ``{traces}/name`` (``trace_dir`` argument, env ``SIM_TRACE_DIR``, or
    ../shared/traces next to the repository), or relative to the scenario file."""
    p = Path(str(path).replace("{traces}", str(trace_dir or globals()["trace_dir"]())))
    if p.is_absolute():
        return p
    for base in [Path(trace_dir) if trace_dir else None, base_dir, Path.cwd(), globals()["trace_dir"]()]:
        if base is not None and (base / p).exists():
            return base / p
    return p


def load(kind: str, path: Path, **opts):
    fn = LOADERS.get(kind)
    if fn is None:
        raise TraceError(f"unknown trace loader {kind!r} (known: {', '.join(sorted(LOADERS))})")
    return fn(path, **opts)


def load_csv(path: Path, **_):
    return read_csv(path), None


# ------------------------------------------------------------------ Philly (gavel per-VC derivation)


def parse_philly(lines, *, missing_duration: str = "sample", seed: int = 0) -> list[TraceRow]:
    recs = list(csv.DictReader(lines))
    known = defaultdict(list)
    for r in recs:
        if (r.get("est_duration_v100_s") or "").strip():
            known[int(r["num_gpus"])].append(float(r["est_duration_v100_s"]))
    all_known = sorted(d for v in known.values() for d in v)
    rng = random.Random(f"{seed}:philly-missing")
    rows = []
    for r in recs:
        g = int(r["num_gpus"])
        d = (r.get("est_duration_v100_s") or "").strip()
        if d:
            dur = float(d)
        elif missing_duration == "drop":
            continue
        elif missing_duration == "sample":
            pool = known.get(g) or all_known
            if not pool:
                continue
            dur = pool[rng.randrange(len(pool))]
        else:
            raise TraceError(f"missing_duration must be sample or drop, not {missing_duration!r}")
        rows.append(TraceRow(r["job_id"], float(r["submit_time_s"]), dur, g, r["vc"]))
    return rows


def parse_vc_sizes(lines) -> dict[str, float]:
    out = {}
    for r in csv.DictReader(lines):
        out[r["vc"].strip()] = float(r["node num"])
    return out


def load_philly(path: Path, *, vc_sizes: str | None = None, missing_duration: str = "sample", seed: int = 0):
    with open(path, newline="") as fh:
        rows = parse_philly(fh, missing_duration=missing_duration, seed=seed)
    size_path = Path(vc_sizes) if vc_sizes else path.parent / "philly_vc_size.csv"
    shares = None
    if size_path.exists():
        with open(size_path, newline="") as fh:
            shares = parse_vc_sizes(fh)
    return rows, shares


# ------------------------------------------------------------------ ElasticFlow / ITP


def parse_elasticflow(lines, *, prefix: str = "") -> list[TraceRow]:
    rows = []
    for r in csv.DictReader(lines):
        if not (r.get("duration") or "").strip() or not (r.get("num_gpu") or "").strip():
            continue
        sub = float(r["submission_time"])
        dl = (r.get("deadline") or "").strip()
        rows.append(
            TraceRow(
                job_id=prefix + r["job_id"],
                submit_time_s=sub,
                duration_s=float(r["duration"]),
                total_gpus=int(r["num_gpu"]),
                department="",
                deadline_s=float(dl) if dl else None,
            )
        )
    return rows


def load_elasticflow(path: Path, *, cluster: str = "cluster04", **_):
    member = cluster if cluster.endswith(".csv") else cluster + ".csv"
    if path.is_dir():
        path = path / "elasticflow-traces.tar.gz"
    if str(path).endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(path) as tf:
            fh = tf.extractfile(member)
            if fh is None:
                raise TraceError(f"{member} not found in {path}")
            rows = parse_elasticflow(io.TextIOWrapper(fh, encoding="utf-8"))
    else:
        with open(path, newline="") as fh:
            rows = parse_elasticflow(fh)
    return rows, None


# ------------------------------------------------------------------ Alibaba 2023 (openb)

QOS_TIER = {"LS": "realtime", "BE": "backfill", "Burstable": "elastic", "Guaranteed": "elastic"}


def parse_alibaba(lines, *, qos_tiers: dict[str, str] | None = None, keep_unscheduled: bool = False):
    tiers = dict(QOS_TIER, **(qos_tiers or {}))
    rows = []
    for r in csv.DictReader(lines):
        g = int(float(r["num_gpu"] or 0))
        if g <= 0:
            continue
        created = float(r["creation_time"] or 0)
        sched = (r.get("scheduled_time") or "").strip()
        deleted = (r.get("deletion_time") or "").strip()
        if not deleted:
            continue
        if not sched and not keep_unscheduled:
            continue
        start = float(sched) if sched else created
        dur = float(deleted) - start
        if dur <= 0:
            continue
        rows.append(
            TraceRow(
                job_id=r["name"],
                submit_time_s=created,
                duration_s=dur,
                total_gpus=g,
                department="",
                tier=tiers.get((r.get("qos") or "").strip()),
                flavor=(r.get("gpu_spec") or "").strip() or None,
            )
        )
    return rows


def load_alibaba(path: Path, *, qos_tiers: dict[str, str] | None = None, keep_unscheduled: bool = False,
                 ignore_gpu_spec: bool = True, **_):
    if path.is_dir():
        path = path / "openb_pod_list_default.csv"
    with open(path, newline="") as fh:
        rows = parse_alibaba(fh, qos_tiers=qos_tiers, keep_unscheduled=keep_unscheduled)
    if ignore_gpu_spec:
        from dataclasses import replace

        rows = [replace(r, flavor=None) for r in rows]
    return rows, None


def alibaba_node_groups(path: Path) -> list[dict]:
    """Node groups (count, GPUs per node, model label) from ``openb_node_list_gpu_node.csv``, for scenarios."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            counts[(r["model"], int(r["gpu"]))] += 1
    return [
        {"name": f"{m.lower()}-{g}", "count": n, "gpus_per_node": g, "labels": {"gpu-type": m}}
        for (m, g), n in sorted(counts.items())
    ]


LOADERS = {"csv": load_csv, "philly": load_philly, "elasticflow": load_elasticflow, "alibaba": load_alibaba}
