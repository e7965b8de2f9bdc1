"""policy_from_dict / policy_to_dict: validation with field-level errors, and a lossless round trip."""

from __future__ import annotations

import json

import pytest

from scheduling.core.policy import DEFAULT_POLICY, PolicyError, job_score, policy_from_dict, policy_to_dict


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
    ("kw", "delta"),
    [
        ({"submitted_at": -600.0}, 10.0),  # 10 minutes of aging
        ({"deadline": 0.0}, 50.0),  # at the deadline: full boost
        ({"deadline": 3 * 3600.0}, 25.0),  # half the 6 h horizon away
        ({"bid": 1000}, 10.0),
        ({"share": 0.5}, -10.0),
    ],
)
def test_score_terms(kw, delta):
    base = {"urgency": "normal", "user_tier": "standard", "submitted_at": 0.0, "deadline": None, "bid": 0,
            "share": 0.0}  # fmt: skip
    assert job_score(DEFAULT_POLICY, 0.0, **{**base, **kw}) == pytest.approx(100.0 + delta)


def test_the_plain_policy_is_the_documented_default():
    from scheduling.core.types import Policy

    assert Policy() == DEFAULT_POLICY
    assert Policy().weights[("critical", "pi")] == 5.0
