"""The policy tuner: measure a week of history against the lab's targets and search a bounded set of policy
changes on the what-if replay of that week for one that meets more of them.

Pure (no Django, no clock): the portal hands it the policy document in force (``engine.policy.policy_to_dict``'s
form), the lab's tuner configuration and an ``evaluate(document) -> summary`` function, which is one what-if
replay of the week (``simulator.whatif.replay``, with the decision function wrapped in ``IdleMeter``); tests
hand it a constructed one. It returns a ``Tuning``: the current policy's replayed figures, and either a
proposal (the changed fields old -> new, the predicted figure of every target, the targets it improves) or the
reason there is none.

The targets (each a limit the lab sets; a target is *missed* when its figure is past its limit):

- ``realtime``: the share of realtime jobs that started within 5 minutes, at least ``realtime_within_5min``;
- ``urgent``: the average wait of high and critical work outside the realtime tier over the average wait of
  routine (normal-urgency) work, at most ``urgent_wait_ratio`` (routine waits under a minute count as a minute,
  so a queue that barely waits does not make the ratio explode);
- ``dept:<slug>``: each department that used no more than its share (its use over its entitlement at most 1
  on the current policy's replay): its p95 wait over the whole lab's p95 wait, at most ``dept_p95_ratio`` (at
  1, a department within its share waits no longer than the lab as a whole); a department over its share
  waits for its own excess and is not a target;
- ``idle``: the share of the GPU-time that GPUs stood idle while a job waited (for any reason: quota, a
  reservation, a gang that did not fit), at most ``idle_while_waiting``.

The search is a coordinate search over ``KNOBS``, the knobs that bear on the missed targets first, each tried
at most a full step of ``max_change`` (relative: x(1+m) or /(1+m); an integer knob moves by
max(1, round(value x m))) from the value in force, and a half step in the direction that helped, never more than
``max_replays`` replays in all (the current policy's included); the last one is kept for a joint step: the
knobs that each brought the weightiest missed target closer alone, moved together. A candidate is kept when its
score falls:
the misses (each relative to its limit) weighted by ``PRIORITY`` (the realtime guarantee first, then urgent work,
then the departments and idle GPUs) and added up. A change may trade: it may leave a target further past its
limit (or a met one missed) when it gains more on a target that weighs more. Such a target is never hidden: the
proposal names the targets it improves and the targets it costs, and every target whose miss grows is among
the latter. Automatic application never takes a proposal with a cost. When every target is met, or nothing
tried lowers the score, there is no proposal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.policy import MIN_RUNTIME_FLOOR_S, PolicyError, policy_from_dict, policy_to_dict
from engine.types import URGENCIES, USER_TIERS

from .metrics import mean, percentile

# The knobs, in no particular order (``RELEVANT`` orders them per missed target). ``weights.<urgency>``
# scales that urgency's row of the urgency x user-tier matrix (every user tier by one factor).
WEIGHT_KNOBS = tuple(f"weights.{u}" for u in URGENCIES)
FLOAT_KNOBS = ("fair_share_weight", "bid_weight", "aging_per_minute", "priority_band_weight", "size_weight",
               "min_runtime_s")
INT_KNOBS = ("realtime_headroom_gpus", "preemption_rate_limit")
KNOBS = WEIGHT_KNOBS + FLOAT_KNOBS + INT_KNOBS
INT_MINIMUM = {"realtime_headroom_gpus": 0, "preemption_rate_limit": 1}

# Which knobs bear on which target, most direct first: the search tries these before the rest.
RELEVANT = {
    "realtime": ("realtime_headroom_gpus", "preemption_rate_limit", "min_runtime_s"),
    "urgent": ("weights.critical", "weights.high", "priority_band_weight", "aging_per_minute", "weights.normal"),
    "dept": ("fair_share_weight", "size_weight", "aging_per_minute", "bid_weight"),
    "idle": ("size_weight", "realtime_headroom_gpus", "priority_band_weight", "min_runtime_s"),
}

TARGET_KINDS = ("realtime", "urgent", "dept", "idle")
# How much a unit of miss (relative to its limit) of each kind weighs in the search's score.
PRIORITY = {"realtime": 4.0, "urgent": 2.0, "dept": 1.0, "idle": 1.0}
ROUTINE_WAIT_FLOOR_S = 60.0
EPS = 1e-9


class TunerConfigError(ValueError):
    """Invalid tuner configuration; ``errors`` maps a field path (``targets.urgent_wait_ratio``) to messages."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in sorted(errors.items())))


@dataclass(frozen=True)
class Targets:
    realtime_within_5min: float = 0.95  # share of realtime jobs started within 5 minutes, at least
    urgent_wait_ratio: float = 0.5  # high+critical (not realtime) average wait / routine average wait, at most
    dept_p95_ratio: float = 1.0  # p95 wait of a department within its share over the lab's p95 wait, at most
    idle_while_waiting: float = 0.05  # share of GPU-time idle while a job waited, at most


@dataclass(frozen=True)
class TunerConfig:
    """What the lab sets: its targets; the search's bounds (the history window, the largest relative change
    per knob, the replays at most, the knobs it may touch); and automatic application (off by default: a
    proposal then waits for an admin's click), which applies a proposal by itself only when every change is
    within ``auto_max_change`` of the value in force and every target it improves is of a kind in
    ``auto_targets``."""

    targets: Targets = field(default_factory=Targets)
    days: float = 7.0
    max_change: float = 1.0
    max_replays: int = 24
    knobs: tuple[str, ...] = KNOBS
    auto_apply: bool = False
    auto_max_change: float = 0.25
    auto_targets: tuple[str, ...] = ("realtime",)


DEFAULT_CONFIG = TunerConfig()


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def config_from_dict(data: Mapping[str, Any] | None) -> TunerConfig:
    """Validate a configuration document (``config_to_dict``'s form; missing keys take the defaults) and build
    the TunerConfig; raise TunerConfigError with every problem, per field."""
    errors: dict[str, list[str]] = {}

    def err(key: str, message: str) -> None:
        errors.setdefault(key, []).append(message)

    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise TunerConfigError({"__all__": ["Expected an object."]})
    for key in sorted(set(data) - {"targets", "search", "automatic"}, key=str):
        err(str(key), "Unknown field; expected targets, search or automatic.")
    sections = {}
    for name in ("targets", "search", "automatic"):
        raw = data.get(name, {})
        if not isinstance(raw, Mapping):
            err(name, "Must be an object.")
            raw = {}
        sections[name] = raw

    def num(section: str, key: str, default: float, *, low: float, high: float | None = None,
            integer: bool = False) -> float:
        value = sections[section].get(key, default)
        path = f"{section}.{key}"
        if integer and (not isinstance(value, int) or isinstance(value, bool)):
            err(path, "Must be a whole number.")
            return default
        if not _number(value):
            err(path, "Must be a finite number.")
            return default
        if value < low or (high is not None and value > high):
            err(path, f"Must be from {low:g} to {high:g}." if high is not None else f"Must be at least {low:g}.")
            return default
        return value

    t, d = sections["targets"], Targets()
    for key in sorted(set(t) - set(Targets.__dataclass_fields__), key=str):
        err(f"targets.{key}", "Unknown target.")
    targets = Targets(
        realtime_within_5min=float(num("targets", "realtime_within_5min", d.realtime_within_5min, low=0, high=1)),
        urgent_wait_ratio=float(num("targets", "urgent_wait_ratio", d.urgent_wait_ratio, low=0.01, high=100)),
        dept_p95_ratio=float(num("targets", "dept_p95_ratio", d.dept_p95_ratio, low=0.1, high=100)),
        idle_while_waiting=float(num("targets", "idle_while_waiting", d.idle_while_waiting, low=0, high=1)),
    )
    s, a, base = sections["search"], sections["automatic"], DEFAULT_CONFIG
    for key in sorted(set(s) - {"days", "max_change", "max_replays", "knobs"}, key=str):
        err(f"search.{key}", "Unknown field.")
    for key in sorted(set(a) - {"enabled", "max_change", "targets"}, key=str):
        err(f"automatic.{key}", "Unknown field.")
    knobs = s.get("knobs", list(base.knobs))
    if not isinstance(knobs, list | tuple) or not knobs or not all(isinstance(k, str) for k in knobs):
        err("search.knobs", "Must be a non-empty list of knob names.")
        knobs = list(base.knobs)
    elif unknown := [k for k in knobs if k not in KNOBS]:
        err("search.knobs", f"Unknown knob(s) {', '.join(unknown)}; expected some of {', '.join(KNOBS)}.")
    enabled = a.get("enabled", base.auto_apply)
    if not isinstance(enabled, bool):
        err("automatic.enabled", "Must be true or false.")
        enabled = False
    auto_targets = a.get("targets", list(base.auto_targets))
    if not isinstance(auto_targets, list | tuple) or not all(t in TARGET_KINDS for t in auto_targets):
        err("automatic.targets", f"Must be a list of target kinds from {', '.join(TARGET_KINDS)}.")
        auto_targets = list(base.auto_targets)
    max_change = float(num("search", "max_change", base.max_change, low=0.01, high=10))
    auto_max = float(num("automatic", "max_change", base.auto_max_change, low=0.01, high=10))
    if "max_change" not in errors.get("search.max_change", []) and auto_max > max_change + EPS:
        err("automatic.max_change", "Must not exceed search.max_change: nothing beyond it is ever proposed.")
    config = TunerConfig(
        targets=targets,
        days=float(num("search", "days", base.days, low=0.5, high=31)),
        max_change=max_change,
        max_replays=int(num("search", "max_replays", base.max_replays, low=2, high=200, integer=True)),
        knobs=tuple(dict.fromkeys(knobs)),
        auto_apply=enabled,
        auto_max_change=auto_max,
        auto_targets=tuple(dict.fromkeys(auto_targets)),
    )
    if errors:
        raise TunerConfigError(errors)
    return config


def config_to_dict(config: TunerConfig) -> dict[str, Any]:
    """JSON-able form; ``config_from_dict(config_to_dict(c)) == c``."""
    t = config.targets
    return {
        "targets": {"realtime_within_5min": t.realtime_within_5min, "urgent_wait_ratio": t.urgent_wait_ratio,
                    "dept_p95_ratio": t.dept_p95_ratio, "idle_while_waiting": t.idle_while_waiting},
        "search": {"days": config.days, "max_change": config.max_change, "max_replays": config.max_replays,
                   "knobs": list(config.knobs)},
        "automatic": {"enabled": config.auto_apply, "max_change": config.auto_max_change,
                      "targets": list(config.auto_targets)},
    }


# ------------------------------------------------------------------------------------------ the figures


def _finite(value: Any) -> float | None:
    return float(value) if _number(value) else None


def figures(summary: Mapping[str, Any], departments: Sequence[str]) -> dict[str, float | None]:
    """Each target's figure in a replay's summary (``simulator.whatif.summarise`` with ``idle_while_waiting``
    from ``IdleMeter``); None where the week has nothing to measure it on (no realtime job, no urgent one)."""
    out: dict[str, float | None] = {"realtime": None, "urgent": None, "idle": _finite(summary.get("idle_while_waiting"))}
    if summary.get("realtime_jobs"):
        out["realtime"] = _finite(summary.get("realtime_within_5min"))
    urgent = _finite((summary.get("wait_urgent_nonrt") or {}).get("avg"))
    routine = _finite(((summary.get("wait_urgency") or {}).get("normal") or {}).get("avg"))
    if urgent is not None and routine is not None:
        out["urgent"] = urgent / max(routine, ROUTINE_WAIT_FLOOR_S)
    waits = summary.get("wait_dept") or {}
    lab = _finite(summary.get("wait_p95"))
    for d in departments:
        p95 = _finite((waits.get(d) or {}).get("p95"))
        out[f"dept:{d}"] = None if p95 is None or lab is None else p95 / max(lab, ROUTINE_WAIT_FLOOR_S)
    return out


def summary_from_waits(jobs: Sequence[tuple[str, str, str, float | None]]) -> dict[str, Any]:
    """A summary ``figures`` reads, from the week as it happened: (tier, urgency, department, first wait in
    seconds or None when the job never started) per job. Idle GPUs are not in the job history: None."""
    started = [j for j in jobs if j[3] is not None]
    rt = [j for j in jobs if j[0] == "realtime"]
    urgent = [w for t, u, _, w in started if t != "realtime" and u in ("high", "critical")]
    routine = [w for _, u, _, w in started if u == "normal"]
    by_dept: dict[str, list[float]] = {}
    for _, _, d, w in started:
        by_dept.setdefault(d, []).append(w)
    return {
        "realtime_jobs": len(rt),
        "realtime_within_5min": (sum(1 for j in rt if j[3] is not None and j[3] <= 300.0) / len(rt)) if rt else None,
        "wait_urgent_nonrt": {"avg": mean(urgent)},
        "wait_urgency": {"normal": {"avg": mean(routine)}},
        "wait_p95": percentile([j[3] for j in started], 95),
        "wait_dept": {d: {"p95": percentile(ws, 95)} for d, ws in sorted(by_dept.items())},
        "idle_while_waiting": None,
    }


def departments_within_share(summary: Mapping[str, Any]) -> list[str]:
    """The departments that used at most their share on this replay (the department targets)."""
    ratios = summary.get("dept_share_ratio") or {}
    return sorted(d for d, r in ratios.items() if _number(r) and r <= 1.0 + EPS and d in (summary.get("wait_dept") or {}))


def misses(figs: Mapping[str, float | None], targets: Targets) -> dict[str, float]:
    """How far past its limit each target is, relative to the limit (0: met; a target without a figure is
    met)."""
    out = {}
    for name, value in figs.items():
        kind = name.split(":", 1)[0]
        if value is None:
            out[name] = 0.0
        elif kind == "realtime":
            limit = targets.realtime_within_5min
            out[name] = max(0.0, limit - value) / limit if limit > 0 else 0.0
        elif kind == "urgent":
            out[name] = max(0.0, value - targets.urgent_wait_ratio) / targets.urgent_wait_ratio
        elif kind == "dept":
            out[name] = max(0.0, value - targets.dept_p95_ratio) / targets.dept_p95_ratio
        else:
            limit = max(targets.idle_while_waiting, 0.001)
            out[name] = max(0.0, value - targets.idle_while_waiting) / limit
    return out


def limits(targets: Targets, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each target's limit and direction, for a page to print beside its figures."""
    out = {}
    for name in names:
        kind = name.split(":", 1)[0]
        if kind == "realtime":
            out[name] = {"limit": targets.realtime_within_5min, "at_least": True}
        elif kind == "urgent":
            out[name] = {"limit": targets.urgent_wait_ratio, "at_least": False}
        elif kind == "dept":
            out[name] = {"limit": targets.dept_p95_ratio, "at_least": False}
        else:
            out[name] = {"limit": targets.idle_while_waiting, "at_least": False}
    return out


# ------------------------------------------------------------------------------------------ the knobs


def knob_value(doc: Mapping[str, Any], knob: str, base: Mapping[str, Any]) -> float:
    """A knob's setting in ``doc``: the field's value, or for ``weights.<u>`` the row's factor over ``base``'s
    (1.0 at the value in force)."""
    if knob.startswith("weights."):
        u = knob.split(".", 1)[1]
        for t, w in (base.get("weights", {}).get(u) or {}).items():
            if w > 0:
                return doc["weights"][u][t] / w
        return 1.0
    return float(doc[knob])


def with_knob(doc: Mapping[str, Any], knob: str, value: float, base: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with ``knob`` at ``value`` (a row factor over ``base``'s row for a weight knob)."""
    out = {k: v for k, v in doc.items()}
    if knob.startswith("weights."):
        u = knob.split(".", 1)[1]
        weights = {row: dict(ws) for row, ws in doc["weights"].items()}
        weights[u] = {t: w * value for t, w in (base["weights"].get(u) or {}).items()}
        out["weights"] = weights
    elif knob in INT_KNOBS:
        out[knob] = int(value)
    else:
        out[knob] = float(value)
    return out


def steps(knob: str, base_value: float, max_change: float, doc: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """The values to try for ``knob`` (full steps up and down), and the half steps (tried in the direction
    that helped); all within ``max_change`` of ``base_value``."""
    if knob in INT_KNOBS:
        d = max(1, round(base_value * max_change))
        low = INT_MINIMUM[knob]
        full = [v for v in (base_value + d, base_value - d) if v >= low]
        half = [v for v in (base_value + max(1, d // 2), base_value - max(1, d // 2)) if v >= low and d > 1]
        return full, half
    if base_value <= 0:
        return [], []  # a knob turned off stays off: a relative bound of zero is zero
    up, mid = 1.0 + max_change, math.sqrt(1.0 + max_change)
    full = [_tidy(base_value * up, base_value, max_change), _tidy(base_value / up, base_value, max_change)]
    half = [_tidy(base_value * mid, base_value, max_change), _tidy(base_value / mid, base_value, max_change)]
    if knob == "min_runtime_s" and not doc.get("allow_short_min_runtime"):
        # the cooldown's floor: a step below it stops there
        full = [v for v in dict.fromkeys(max(v, MIN_RUNTIME_FLOOR_S) for v in full) if abs(v - base_value) > EPS]
        half = [v for v in dict.fromkeys(max(v, MIN_RUNTIME_FLOOR_S) for v in half)
                if abs(v - base_value) > EPS and v not in full]
    return full, half


def _tidy(value: float, base: float, max_change: float) -> float:
    """``value`` to 4 significant digits (an admin reads it in a diff), kept within the bound of ``base``."""
    if value == 0:
        return value
    rounded = float(f"{value:.4g}")
    return min(max(rounded, base / (1.0 + max_change)), base * (1.0 + max_change))


def within(base_doc: Mapping[str, Any], doc: Mapping[str, Any], max_change: float) -> bool:
    """Whether every field of ``doc`` is within ``max_change`` of ``base_doc``'s (relative; an integer knob by
    max(1, round(value x m)); a field the tuner does not touch must be unchanged)."""
    for row, ws in doc["weights"].items():
        for t, w in ws.items():
            old = base_doc["weights"].get(row, {}).get(t)
            if old is None or not _ratio_ok(old, w, max_change):
                return False
    for name, new in doc.items():
        if name in ("weights", "version"):
            continue
        old = base_doc.get(name)
        if name in INT_KNOBS:
            if abs(new - old) > max(1, round(old * max_change)):
                return False
        elif name in FLOAT_KNOBS:
            if not _ratio_ok(old, new, max_change):
                return False
        elif new != old:
            return False
    return True


def _ratio_ok(old: float, new: float, m: float) -> bool:
    if old == 0 or new == 0:
        return old == new
    r = new / old
    return 1.0 / (1.0 + m) - 1e-6 <= r <= 1.0 + m + 1e-6


def policy_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fields that differ, ``[{"field": "weights.high.pi" | name, "old": x, "new": y}]`` in a fixed order."""
    out = []
    for u in URGENCIES:
        for t in USER_TIERS:
            a = (old.get("weights", {}).get(u) or {}).get(t)
            b = (new.get("weights", {}).get(u) or {}).get(t)
            if a != b and not (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12)):
                out.append({"field": f"weights.{u}.{t}", "old": a, "new": b})
    for name in sorted(set(old) | set(new)):
        if name in ("weights", "version") or old.get(name) == new.get(name):
            continue
        out.append({"field": name, "old": old.get(name), "new": new.get(name)})
    return out


# ------------------------------------------------------------------------------------------ the search


@dataclass
class Tuning:
    """One run of the tuner. ``current`` holds the current policy's replayed figures; ``proposal`` the
    proposed document, or None with ``reason``."""

    current: dict[str, float | None]
    limits: dict[str, dict[str, Any]]
    replays: int
    proposal: dict[str, Any] | None = None
    predicted: dict[str, float | None] | None = None
    diff: list[dict[str, Any]] = field(default_factory=list)
    improves: list[str] = field(default_factory=list)
    costs: list[str] = field(default_factory=list)  # the targets it leaves further past their limits
    reason: str = ""
    tried: list[dict[str, Any]] = field(default_factory=list)  # knob, value, accepted, score: the search's log

    def to_dict(self) -> dict[str, Any]:
        return {"current": self.current, "limits": self.limits, "replays": self.replays,
                "proposal": self.proposal, "predicted": self.predicted, "diff": self.diff,
                "improves": self.improves, "costs": self.costs, "reason": self.reason, "tried": self.tried}


def worse(candidate: Mapping[str, float], baseline: Mapping[str, float]) -> list[str]:
    """The targets ``candidate`` leaves further past their limits than ``baseline`` (missed figures), by name."""
    return [n for n in sorted(baseline) if candidate.get(n, 0.0) > baseline[n] + EPS]


def tune(evaluate: Callable[[dict[str, Any]], Mapping[str, Any]], current: Mapping[str, Any],
         config: TunerConfig = DEFAULT_CONFIG) -> Tuning:
    """Search for a better policy than ``current`` (a policy document) on the replay ``evaluate`` runs."""
    base = policy_to_dict(policy_from_dict(current))
    base.pop("version", None)
    base_summary = evaluate(base)
    depts = departments_within_share(base_summary)
    base_figs = figures(base_summary, depts)
    base_miss = misses(base_figs, config.targets)
    result = Tuning(current=base_figs, limits=limits(config.targets, list(base_figs)), replays=1)
    missed = [n for n, v in base_miss.items() if v > EPS]
    if not missed:
        result.reason = "The current policy meets every target on the replay of the week: nothing to propose."
        return result

    order = _knob_order(missed, config.knobs)
    best_doc, best_miss, best_figs = base, base_miss, base_figs

    def score(m: Mapping[str, float]) -> float:
        return sum(PRIORITY[n.split(":", 1)[0]] * v for n, v in sorted(m.items()))

    # for each knob, the value tried that brought each target closest to its limit (alone, kept or not)
    helps: dict[str, dict[str, tuple[float, float]]] = {}

    def attempt(knob: str, value: float, doc: dict[str, Any] | None = None) -> bool:
        """Replay ``best_doc`` with ``knob`` at ``value`` (or ``doc``); keep it when it lowers the score."""
        nonlocal best_doc, best_miss, best_figs
        doc = with_knob(best_doc, knob, value, base) if doc is None else doc
        try:
            policy_from_dict(doc)
        except PolicyError:
            return False
        summary = evaluate(doc)
        result.replays += 1
        figs = figures(summary, depts)
        m = misses(figs, config.targets)
        ok = score(m) < score(best_miss) - EPS
        result.tried.append({"knob": knob, "value": value, "score": score(m), "accepted": ok, "figures": figs})
        for name in missed:
            if m[name] < base_miss[name] - EPS and m[name] < helps.setdefault(knob, {}).get(name, (0, math.inf))[1]:
                helps[knob][name] = (value, m[name])
        if ok:
            best_doc, best_miss, best_figs = doc, m, figs
        return ok

    improved = True
    # one replay kept back for the joint step below
    budget = config.max_replays - 1 if config.max_replays > 2 else config.max_replays
    while improved and result.replays < budget:
        improved = False
        for knob in order:
            if knob.startswith("weights.") and not any(base["weights"].get(knob.split(".", 1)[1], {}).values()):
                continue  # a row of zeros (or none) scales to itself
            base_value = knob_value(base, knob, base)
            full, half = steps(knob, 1.0 if knob.startswith("weights.") else base_value, config.max_change, base)
            now = knob_value(best_doc, knob, base)
            for value in full:
                if result.replays >= budget:
                    break
                if math.isclose(value, now, rel_tol=1e-12) or not attempt(knob, value):
                    continue
                improved = True
                # the half step the same way, in case the full one overshoots
                for h in half:
                    if (h - now) * (value - now) > 0 and result.replays < budget:
                        attempt(knob, h)
                break
            if score(best_miss) <= EPS:  # every target met: nothing left to gain
                improved = False
                break

    # The joint step: knobs that each helped the weightiest missed target a little, alone, may help it enough
    # together (three knobs that each starve realtime are worth reverting at once).
    if score(best_miss) > EPS and result.replays < config.max_replays:
        top = max(missed, key=lambda n: (PRIORITY[n.split(":", 1)[0]] * base_miss[n], n))
        joint, moved = best_doc, 0
        for knob in order:
            if top in helps.get(knob, {}):
                value = helps[knob][top][0]
                if not math.isclose(knob_value(joint, knob, base), value, rel_tol=1e-12):
                    joint, moved = with_knob(joint, knob, value, base), moved + 1
        if moved >= 2:
            attempt("joint", float(moved), joint)

    if best_doc is base:
        result.reason = (f"No change tried ({result.replays - 1} replays within a change of {config.max_change:g}) "
                         "brought the missed targets closer to their limits than it cost the others.")
        return result
    result.proposal = policy_to_dict(policy_from_dict(best_doc))
    result.proposal.pop("version", None)
    result.predicted = best_figs
    result.diff = policy_diff(base, result.proposal)
    result.improves = [n for n in sorted(base_miss) if best_miss.get(n, 0.0) < base_miss[n] - EPS]
    result.costs = worse(best_miss, base_miss)
    return result


def _knob_order(missed: Sequence[str], allowed: Sequence[str]) -> list[str]:
    order: list[str] = []
    for name in missed:
        for knob in RELEVANT.get(name.split(":", 1)[0], ()):
            if knob in allowed and knob not in order:
                order.append(knob)
    return order + [k for k in KNOBS if k in allowed and k not in order]


def auto_applicable(tuning: Tuning, current: Mapping[str, Any], config: TunerConfig) -> tuple[bool, str]:
    """Whether the lab's automatic application takes this proposal, and why not when it does not."""
    if tuning.proposal is None:
        return False, "no proposal"
    if not config.auto_apply:
        return False, "automatic application is off"
    base = policy_to_dict(policy_from_dict(current))
    base.pop("version", None)
    if not within(base, tuning.proposal, config.auto_max_change):
        return False, f"a change exceeds the automatic bound of {config.auto_max_change:g}"
    if tuning.costs:
        return False, f"it leaves {', '.join(tuning.costs)} further from the limit: an admin decides a trade"
    kinds = {n.split(":", 1)[0] for n in tuning.improves}
    if not kinds <= set(config.auto_targets):
        return False, f"it improves {', '.join(sorted(kinds - set(config.auto_targets)))}, not automatic targets"
    return True, ""


# ------------------------------------------------------------------------------------------ idle GPUs


def free_gpus_after(snap, result) -> dict[str, list[int]]:
    """Free GPUs per node after a cycle's admissions, by flavor (schedulable, untainted GPU nodes only)."""
    free = {n.name: n.gpus - n.used_by_others for n in snap.nodes if n.schedulable and not n.taints and n.gpus}
    for job in snap.running:
        for name in job.placement:
            if name in free:
                free[name] -= job.gpus_per_pod
    pending = {j.id: j for j in snap.pending}
    for adm in result.admissions:
        g = pending[adm.job_id].gpus_per_pod
        for name in adm.placement:
            if name in free:
                free[name] -= g
    out: dict[str, list[int]] = {}
    for n in snap.nodes:
        if n.name in free:
            out.setdefault(n.flavor, []).append(max(0, free[n.name]))
    return out


class IdleMeter:
    """A decision function wrapped to measure the GPU-time that stood idle while a job of the same flavor
    waited: after each cycle, the free GPUs of each flavor with a job still pending, until the next cycle.
    ``share`` is that over all the schedulable GPU-time between the first and the last cycle."""

    def __init__(self, inner):
        self.inner = inner
        self.name = getattr(inner, "name", "portal")
        self.time_dependent = getattr(inner, "time_dependent", True)
        self.idle_gpu_s = 0.0
        self.total_gpu_s = 0.0
        self._last: tuple[float, int, int] | None = None  # (time, idle GPUs with a job waiting, all GPUs)

    def __call__(self, snap):
        result = self.inner(snap)
        if self._last is not None:
            t, idle, total = self._last
            dt = max(0.0, snap.now - t)
            self.idle_gpu_s += idle * dt
            self.total_gpu_s += total * dt
        admitted = {a.job_id for a in result.admissions}
        waiting = {j.flavor for j in snap.pending if j.id not in admitted}
        free = free_gpus_after(snap, result)
        idle = sum(sum(v) for f, v in free.items() if f in waiting)
        total = sum(n.gpus for n in snap.nodes if n.schedulable and not n.taints)
        self._last = (snap.now, idle, total)
        return result

    @property
    def share(self) -> float:
        return self.idle_gpu_s / self.total_gpu_s if self.total_gpu_s > 0 else 0.0
