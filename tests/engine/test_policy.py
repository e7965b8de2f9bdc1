"""policy_from_dict / policy_to_dict: validation with field-level errors, and a lossless round trip."""

from __future__ import annotations

import json
import math

import pytest

from engine.policy import (
    DEFAULT_POLICY,
    PolicyError,
    decay_usage,
    in_priority_band,
    job_score,
    policy_from_dict,
    policy_to_dict,
    use_ratios,
)


def test_default_round_trips_through_json():
    data = json.loads(json.dumps(policy_to_dict(DEFAULT_POLICY)))
    assert policy_from_dict(data) == DEFAULT_POLICY
    assert data["weights"]["critical"]["pi"] == 5.0 and data["weight_points"] == 100.0


def test_empty_dict_is_the_default():
    assert policy_from_dict({}) == DEFAULT_POLICY


def test_changes_are_applied():
    p = policy_from_dict({"version": 3, "weights": {"high": {"pi": 7}}, "aging_per_minute": 2})
    assert p.version == 3 and p.aging_per_minute == 2.0
    assert p.weights == {("high", "pi"): 7.0}
    assert policy_from_dict(policy_to_dict(p)) == p


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"colour": 1}, "colour"),
        ({"aging_per_minute": -1}, "aging_per_minute"),
        ({"bid_weight": "a lot"}, "bid_weight"),
        ({"fair_share_weight": True}, "fair_share_weight"),
        ({"deadline_horizon_s": 0}, "deadline_horizon_s"),
        ({"preemption_rate_limit": 1.5}, "preemption_rate_limit"),
        ({"preemption_rate_limit": -1}, "preemption_rate_limit"),
        ({"reservation_depth": -1}, "reservation_depth"),
        ({"reservation_depth": 2.5}, "reservation_depth"),
        ({"weights": {"urgent": {"pi": 1}}}, "weights.urgent"),
        ({"weights": {"high": {"professor": 1}}}, "weights.high.professor"),
        ({"weights": {"high": {"pi": -1}}}, "weights.high.pi"),
        ({"weights": [1, 2]}, "weights"),
        ({"priority_classes": {"gold": "x"}}, "priority_classes.gold"),
        ({"priority_classes": {"realtime": "Not A Name"}}, "priority_classes.realtime"),
        ({"min_runtime_s": 60}, "min_runtime_s"),
        ({"min_runtime_s": 60, "allow_short_min_runtime": "yes"}, "allow_short_min_runtime"),
        ({"min_runtime_s": float("nan")}, "min_runtime_s"),
    ],
)
def test_invalid_fields_are_reported_per_field(data, field):
    with pytest.raises(PolicyError) as exc:
        policy_from_dict(data)
    assert field in exc.value.errors
    assert all(isinstance(m, str) and m for m in exc.value.errors[field])


def test_all_errors_are_reported_at_once():
    with pytest.raises(PolicyError) as exc:
        policy_from_dict({"aging_per_minute": -1, "bid_weight": -2, "x": 0})
    assert set(exc.value.errors) == {"aging_per_minute", "bid_weight", "x"}


def test_short_min_runtime_needs_the_explicit_flag():
    p = policy_from_dict({"min_runtime_s": 60, "allow_short_min_runtime": True})
    assert p.min_runtime_s == 60.0
    data = policy_to_dict(p)
    assert data["allow_short_min_runtime"] is True
    assert policy_from_dict(data) == p


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, 100.0),  # a fresh normal job of a standard user: weight 1 x 100 points
        ({"submitted_at": -600.0}, 110.0),  # 10 minutes of aging
        ({"urgency": "critical", "submitted_at": -600.0}, 440.0),  # the weight multiplies the aging too
        ({"deadline": 0.0}, 150.0),  # at the deadline: full boost
        ({"deadline": 3 * 3600.0}, 125.0),  # half the 6 h horizon away
        ({"bid": 1000}, 110.0),
        ({"use_ratio": 2.0}, 100.0 / 16),  # twice its share: a sixteenth of the pace (weight 400)
        ({"use_ratio": 0.5}, 400.0),  # half its share: four times the pace
        ({"gpu_hours": 7.0}, 100.0 / 8),  # (1 + GPU-hours) ** -size_weight
    ],
)
def test_score_terms(kw, expected):
    base = {"urgency": "normal", "user_tier": "standard", "submitted_at": 0.0, "deadline": None, "bid": 0}
    assert job_score(DEFAULT_POLICY, 0.0, **{**base, **kw}) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("nominal", "running", "usage", "expected"),
    [
        ({"A": 4, "B": 4}, {"A": 4, "B": 4}, {}, {"A": 1.0, "B": 1.0}),
        ({"A": 4, "B": 4}, {"A": 8}, {}, {"A": 2.0, "B": 0.0}),
        ({"A": 6, "B": 2}, {"A": 4, "B": 4}, {}, {"A": 4 / 6, "B": 2.0}),
        # history counts half: A ran everything lately, nothing now
        ({"A": 4, "B": 4}, {"B": 8}, {"A": 100.0}, {"A": 1.0, "B": 1.0}),
        # a department without nominal quota is at the cap; use beyond 4x its share counts as 4x
        ({"A": 7, "B": 1, "C": 0}, {"B": 8}, {}, {"A": 0.0, "B": 4.0, "C": 4.0}),
    ],
)
def test_use_ratios(nominal, running, usage, expected):
    assert use_ratios(nominal=nominal, running=running, usage=usage) == pytest.approx(expected)


def test_fair_share_weight_zero_turns_fair_share_off():
    policy = policy_from_dict({"fair_share_weight": 0})
    base = {"urgency": "normal", "user_tier": "standard", "submitted_at": 0.0, "deadline": None, "bid": 0}
    assert job_score(policy, 0.0, **base, use_ratio=4.0) == job_score(policy, 0.0, **base, use_ratio=0.0)


def test_the_plain_policy_is_the_documented_default():
    from engine.types import Policy

    assert Policy() == DEFAULT_POLICY
    assert Policy().weights[("critical", "pi")] == 5.0


def test_decayed_usage_halves_every_half_life_and_integrates_new_use_exactly():
    day = 86400.0
    assert decay_usage(1000.0, day, 0, day) == pytest.approx(500.0)
    # 4 GPUs for one half-life: the integral of 4 * 2^(-age/h) over [0, h] is 4 * h / (2 ln 2)
    assert decay_usage(0.0, day, 4, day) == pytest.approx(4 * day / (2 * math.log(2)))
    # stepping in small increments gives the same as one step (the simulator advances event by event)
    stepped = 0.0
    for _ in range(24):
        stepped = decay_usage(stepped, day / 24, 4, day)
    assert stepped == pytest.approx(decay_usage(0.0, day, 4, day))
    assert decay_usage(1000.0, day, 4, 0.0) == 0.0  # no memory


@pytest.mark.parametrize(
    ("band_weight", "urgency", "user_tier", "in_band"),
    [
        (0.0, "critical", "pi", False),  # off: nobody is in the band
        (2.0, "high", "standard", True),  # weight 2.0 reaches it
        (2.0, "normal", "pi", False),  # 1.3 does not
        (2.0, "low", "guest", True),  # a pair missing from the matrix weighs default_weight (3 here)
        (4.0, "low", "guest", False),
    ],
)
def test_the_priority_band_is_the_pairs_whose_weight_reaches_it(band_weight, urgency, user_tier, in_band):
    from dataclasses import replace

    policy = replace(DEFAULT_POLICY, priority_band_weight=band_weight, default_weight=3.0)
    assert in_priority_band(policy, urgency, user_tier) is in_band
