"""The scheduling policy as data: defaults, validation from a JSON-able dict, and the score of a job.

``policy_from_dict`` is what the portal calls on an admin's edit (and on every stored version it loads);
``policy_to_dict`` is its inverse. Both are pure. A dict may omit keys: they take ``DEFAULT_POLICY``'s value.
``weights``, when given, replaces the whole matrix (pairs it leaves out weigh ``default_weight``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType

from .types import DEFAULT_WEIGHTS as DEFAULT_WEIGHTS  # re-exported
from .types import TIER_RANK, TIERS, URGENCIES, USER_TIERS, Policy

LN2 = math.log(2.0)
MIN_RUNTIME_FLOOR_S = 600.0  # the brief's 10-minute cooldown; lower only with allow_short_min_runtime

# The default matrix lives in types.py (Policy's own default): weight x weight_points (100) score points, and
# one point = one minute of waiting (aging_per_minute=1), so a "low" job (10 points) overtakes a fresh "normal"
# one (100 points) after about 90 minutes of waiting: weights matter, nobody starves.
DEFAULT_POLICY = Policy()

_NUMBER_FIELDS = (
    "weight_points",
    "default_weight",
    "aging_per_minute",
    "deadline_boost",
    "deadline_horizon_s",
    "bid_weight",
    "fair_share_weight",
    "usage_half_life_s",
    "min_runtime_s",
    "preemption_window_s",
    "realtime_start_target_s",
    "size_weight",
    "starvation_s",
    "starvation_queue_factor",
    "priority_band_weight",
    "reclaim_delay_s",
    "drain_ratio",
    "drain_max_loss_s",
    "deadline_edf_horizon_s",
    "quota_reservation_age_s",
    "expedited_backoff_s",
)
_POSITIVE_FIELDS = ("deadline_horizon_s", "usage_half_life_s", "preemption_window_s")
_INT_FIELDS = ("version", "preemption_rate_limit", "realtime_headroom_gpus", "reservation_depth", "expedited_requeues")
_KNOWN = set(_NUMBER_FIELDS) | set(_INT_FIELDS) | {"weights", "priority_classes", "allow_short_min_runtime"}
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class PolicyError(ValueError):
    """Invalid policy data; ``errors`` maps a field path (``weights.high.pi``) to its messages."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in sorted(errors.items())))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def policy_from_dict(data: Mapping[str, object]) -> Policy:
    """Validate ``data`` and build a Policy; raise PolicyError with every problem found, per field."""
    errors: dict[str, list[str]] = {}

    def err(key: str, message: str) -> None:
        errors.setdefault(key, []).append(message)

    if not isinstance(data, Mapping):
        raise PolicyError({"__all__": ["Expected an object."]})
    for key in sorted(set(data) - _KNOWN, key=str):
        err(str(key), "Unknown field.")
    base = DEFAULT_POLICY
    values: dict[str, object] = {}
    for name in _NUMBER_FIELDS:
        value = data.get(name, getattr(base, name))
        if not _is_number(value):
            err(name, "Must be a finite number.")
        elif value < 0:
            err(name, "Must not be negative.")
        elif name in _POSITIVE_FIELDS and value == 0:
            err(name, "Must be greater than zero.")
        else:
            values[name] = float(value)
    for name in _INT_FIELDS:
        value = data.get(name, getattr(base, name))
        if not isinstance(value, int) or isinstance(value, bool):
            err(name, "Must be an integer.")
        elif value < 0:
            err(name, "Must not be negative.")
        else:
            values[name] = value
    allow_short = data.get("allow_short_min_runtime", False)
    if not isinstance(allow_short, bool):
        err("allow_short_min_runtime", "Must be true or false.")
        allow_short = False
    if "min_runtime_s" in values and values["min_runtime_s"] < MIN_RUNTIME_FLOOR_S and not allow_short:
        err(
            "min_runtime_s",
            f"Must be at least {int(MIN_RUNTIME_FLOOR_S)} s unless allow_short_min_runtime is true.",
        )

    weights = _weights_from(data.get("weights", None), base, err)
    classes = _classes_from(data.get("priority_classes", None), base, err)
    if errors:
        raise PolicyError(errors)
    return Policy(
        weights=MappingProxyType(dict(sorted(weights.items()))),
        priority_classes=MappingProxyType({t: classes[t] for t in TIERS}),
        **values,
    )


def _weights_from(raw_weights: object, base: Policy, err) -> dict[tuple[str, str], float]:
    """The urgency x user-tier matrix of a policy's ``weights`` (the default's when absent); problems go to
    ``err(field path, message)``."""
    if raw_weights is None:
        return dict(base.weights)
    weights: dict[tuple[str, str], float] = {}
    if not isinstance(raw_weights, Mapping):
        err("weights", "Must be an object {urgency: {user_tier: weight}}.")
        return weights
    for urgency, row in raw_weights.items():
        if urgency not in URGENCIES:
            err(f"weights.{urgency}", f"Unknown urgency; expected one of {', '.join(URGENCIES)}.")
            continue
        if not isinstance(row, Mapping):
            err(f"weights.{urgency}", "Must be an object {user_tier: weight}.")
            continue
        for user_tier, weight in row.items():
            path = f"weights.{urgency}.{user_tier}"
            if user_tier not in USER_TIERS:
                err(path, f"Unknown user tier; expected one of {', '.join(USER_TIERS)}.")
            elif not _is_number(weight):
                err(path, "Must be a finite number.")
            elif weight < 0:
                err(path, "Must not be negative.")
            else:
                weights[(urgency, user_tier)] = float(weight)
    return weights


def _classes_from(raw_classes: object, base: Policy, err) -> dict[str, str]:
    """The PriorityClass name per tier: the default's, with those ``priority_classes`` renames."""
    classes = dict(base.priority_classes)
    if raw_classes is None:
        return classes
    if not isinstance(raw_classes, Mapping):
        err("priority_classes", "Must be an object {tier: PriorityClass name}.")
        return classes
    for tier, name in raw_classes.items():
        path = f"priority_classes.{tier}"
        if tier not in TIER_RANK:
            err(path, f"Unknown tier; expected one of {', '.join(TIERS)}.")
        elif not isinstance(name, str) or not _DNS1123.match(name):
            err(path, "Must be a Kubernetes object name (lowercase letters, digits, '-', '.').")
        else:
            classes[tier] = name
    return classes


def policy_to_dict(policy: Policy) -> dict[str, object]:
    """JSON-able form; ``policy_from_dict(policy_to_dict(p)) == p`` for every valid policy."""
    weights: dict[str, dict[str, float]] = {}
    for (urgency, user_tier), weight in sorted(policy.weights.items()):
        weights.setdefault(urgency, {})[user_tier] = weight
    out: dict[str, object] = {"version": policy.version, "weights": weights}
    for name in _NUMBER_FIELDS:
        out[name] = getattr(policy, name)
    out["preemption_rate_limit"] = policy.preemption_rate_limit
    out["realtime_headroom_gpus"] = policy.realtime_headroom_gpus
    out["reservation_depth"] = policy.reservation_depth
    out["expedited_requeues"] = policy.expedited_requeues
    out["priority_classes"] = dict(policy.priority_classes)
    out["allow_short_min_runtime"] = policy.min_runtime_s < MIN_RUNTIME_FLOOR_S
    return out


def in_priority_band(policy: Policy, urgency: str, user_tier: str) -> bool:
    """Whether jobs of this urgency and user tier are in the priority band: ``priority_band_weight`` is set and
    their weight (a pair missing from the matrix weighs ``default_weight``) reaches it."""
    threshold = policy.priority_band_weight
    return threshold > 0 and policy.weights.get((urgency, user_tier), policy.default_weight) >= threshold


# ---------------------------------------------------------------- scoring

# A department's use relative to its entitlement is capped here: beyond four times its share, more use changes
# nothing (and one idle department cannot make everybody else's factor explode).
MAX_USE_RATIO = 4.0


def fair_shares(usage: Mapping[str, float]) -> dict[str, float]:
    """Each department's fraction (0..1) of the cohort's decayed usage; summed in name order (determinism)."""
    total = 0.0
    for name in sorted(usage):
        total += max(0.0, float(usage[name]))
    if total <= 0:
        return {}
    return {name: max(0.0, float(usage[name])) / total for name in usage}


def use_ratios(
    *,
    nominal: Mapping[str, int],
    running: Mapping[str, int],
    usage: Mapping[str, float],
) -> dict[str, float]:
    """Each department's use relative to its entitlement (1.0 = exactly its share of the cohort's nominal
    quota): the mean of its share of the GPUs running now and its share of the decayed usage (when there is
    any), each divided by its share of the nominal quotas. A department without nominal quota counts as at
    its cap. Summed in name order (determinism)."""
    total_nominal = sum(max(0, nominal[d]) for d in sorted(nominal))
    total_running = sum(max(0, running[d]) for d in sorted(running))
    history = fair_shares(usage)
    out: dict[str, float] = {}
    for d in sorted(set(nominal) | set(running) | set(usage)):
        entitled = max(0, nominal.get(d, 0)) / total_nominal if total_nominal else 0.0
        if entitled <= 0:
            out[d] = MAX_USE_RATIO
            continue
        now_share = max(0, running.get(d, 0)) / total_running if total_running else 0.0
        share = now_share if not history else 0.5 * (now_share + history.get(d, 0.0))
        out[d] = min(MAX_USE_RATIO, share / entitled)
    return out


def fair_factor(policy: Policy, use_ratio: float) -> float:
    """How fast a department's jobs gain score: 2 ** (-(fair_share_weight / 100) * (use_ratio - 1)). At
    weight 100 a department using twice its share ages at half speed and an idle one at twice the speed (at
    the default 400: a sixteenth, and 16 times); weight 0 turns fair share off."""
    if policy.fair_share_weight <= 0:
        return 1.0
    return 2.0 ** (-(policy.fair_share_weight / 100.0) * (use_ratio - 1.0))


def size_factor(policy: Policy, gpu_hours: float) -> float:
    """(1 + GPU-hours asked for) ** -size_weight: shorter, smaller work gains score faster."""
    if policy.size_weight <= 0:
        return 1.0
    return (1.0 + max(0.0, gpu_hours)) ** -policy.size_weight


def decay_usage(previous: float, elapsed_s: float, gpus_held: float, half_life_s: float) -> float:
    """Decayed GPU-seconds after ``elapsed_s`` more seconds with ``gpus_held`` GPUs in use: every GPU-second
    weighs 2^(-age / half_life_s), so ``previous`` halves every half-life and the new use is integrated
    exactly. The simulator advances its usage with it; the portal sums each attempt the same way. No memory
    when ``half_life_s`` is not positive."""
    if half_life_s <= 0:
        return 0.0
    f = 2.0 ** (-max(0.0, elapsed_s) / half_life_s)
    return previous * f + gpus_held * (half_life_s / LN2 * (1.0 - f))


def job_score(
    policy: Policy,
    now: float,
    *,
    urgency: str,
    user_tier: str,
    submitted_at: float,
    deadline: float | None,
    bid: int,
    use_ratio: float = 1.0,
    gpu_hours: float = 0.0,
    aging: bool = True,
    fair: float | None = None,
) -> float:
    """score = weight[urgency, user_tier] * fair_factor(use_ratio) * size_factor(gpu_hours)
    * (weight_points + aging_per_minute * minutes waited)
    + deadline_boost * proximity (0 at >= horizon away, 1 at or past the deadline) + bid_weight * bid.

    The weight multiplies the aging as well as the base points, so in a long queue a critical job keeps its
    lead (it ages four times as fast as a normal one) instead of drowning in everybody's waiting time; every
    weight above zero still ages, so nobody waits forever (and ``starvation_s`` bounds the wait outright).

    ``fair``: ``fair_factor(policy, use_ratio)`` when the caller already has it (one per department and cycle)."""
    weight = policy.weights.get((urgency, user_tier), policy.default_weight)
    base = policy.weight_points
    if aging:
        base += policy.aging_per_minute * max(0.0, now - submitted_at) / 60.0
    if fair is None:
        fair = fair_factor(policy, use_ratio)
    score = weight * fair * size_factor(policy, gpu_hours) * base
    if deadline is not None and policy.deadline_horizon_s > 0:
        proximity = 1.0 - (deadline - now) / policy.deadline_horizon_s
        score += policy.deadline_boost * min(1.0, max(0.0, proximity))
    score += policy.bid_weight * bid
    return score
