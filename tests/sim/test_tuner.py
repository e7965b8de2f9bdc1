"""The policy tuner's search (simulator.tuner), on constructed replays (an ``evaluate`` that maps a policy
document to the figures a replay would give) and on one real what-if replay: a proposal names every target it
leaves further from its limit, there is none when the current policy is best, the bounds hold, the
configuration is validated field by field."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.policy import DEFAULT_POLICY, policy_to_dict
from simulator import tuner, whatif
from simulator.policies import Portal
from simulator.trace import TraceRow
from simulator.tuner import TunerConfig, TunerConfigError, config_from_dict, config_to_dict, tune

BASE = {k: v for k, v in policy_to_dict(DEFAULT_POLICY).items() if k != "version"}


def summary(*, rt=1.0, urgent=60.0, routine=600.0, lab_p95=3600.0, depts=None, idle=0.01):
    """A replay's summary as ``simulator.whatif.summarise`` shapes it, with the figures the targets read."""
    depts = depts if depts is not None else {"a": (1800.0, 0.8), "b": (3000.0, 1.5)}
    return {"realtime_jobs": 10, "realtime_within_5min": rt, "wait_urgent_nonrt": {"avg": urgent, "p95": urgent},
            "wait_urgency": {"normal": {"avg": routine, "p95": routine}}, "wait_p95": lab_p95,
            "wait_dept": {d: {"avg": p, "p95": p} for d, (p, _) in depts.items()},
            "dept_share_ratio": {d: r for d, (_, r) in depts.items()}, "idle_while_waiting": idle}


class Counting:
    def __init__(self, fn):
        self.fn, self.docs = fn, []

    def __call__(self, doc):
        self.docs.append(doc)
        return self.fn(doc)


def test_the_figures_and_the_misses_of_a_replay():
    figs = tuner.figures(summary(rt=0.8, urgent=300, routine=600, lab_p95=3600), ["a"])
    assert figs == {"realtime": 0.8, "urgent": 0.5, "idle": 0.01, "dept:a": 0.5}
    assert tuner.departments_within_share(summary()) == ["a"]  # b used 1.5x its share
    m = tuner.misses(figs, tuner.Targets(realtime_within_5min=0.95, urgent_wait_ratio=0.25))
    assert m["realtime"] == pytest.approx(0.15 / 0.95) and m["urgent"] == pytest.approx(1.0)
    assert m["idle"] == 0 and m["dept:a"] == 0
    # nothing to measure on: no realtime job, routine waits under a minute count as a minute
    s = summary(urgent=30, routine=0)
    s["realtime_jobs"] = 0
    assert tuner.figures(s, [])["realtime"] is None and tuner.figures(s, [])["urgent"] == 0.5


def test_no_proposal_when_every_target_is_met_after_one_replay():
    evaluate = Counting(lambda doc: summary())
    t = tune(evaluate, BASE)
    assert t.proposal is None and t.replays == 1 and len(evaluate.docs) == 1
    assert "meets every target" in t.reason


def test_no_proposal_when_no_change_helps():
    evaluate = Counting(lambda doc: summary(rt=0.5))  # realtime missed, and no knob moves it
    t = tune(evaluate, BASE, TunerConfig(max_replays=10))
    assert t.proposal is None and t.diff == [] and "No change tried" in t.reason
    assert t.replays == len(evaluate.docs) == 9  # the last replay was kept for a joint step nothing earned


def _headroom_fixes_realtime(doc):
    """Realtime starts on time with 2 GPUs of headroom; idle GPUs grow with it."""
    h = doc["realtime_headroom_gpus"]
    return summary(rt=min(1.0, 0.6 + 0.2 * h), idle=0.02 * h)


def test_a_proposal_names_what_it_improves_and_what_it_costs():
    current = dict(BASE, realtime_headroom_gpus=0)
    t = tune(_headroom_fixes_realtime, current, TunerConfig(max_change=1.0))
    assert t.diff == [{"field": "realtime_headroom_gpus", "old": 0, "new": 1}]
    assert t.improves == ["realtime"] and t.costs == []  # idle 0.02: still under 0.05
    assert t.current["realtime"] == 0.6 and t.predicted["realtime"] == pytest.approx(0.8)
    # at a tighter idle limit the same change costs the idle target, and says so
    tight = TunerConfig(targets=tuner.Targets(idle_while_waiting=0.015))
    t = tune(_headroom_fixes_realtime, current, tight)
    assert t.proposal["realtime_headroom_gpus"] >= 1 and t.improves == ["realtime"] and t.costs == ["idle"]


def test_the_bounds_hold_a_knob_moves_at_most_max_change_and_untouched_knobs_stay():
    def evaluate(doc):  # the more preemption, the better realtime does: the search wants it unbounded
        return summary(rt=min(1.0, 0.1 * doc["preemption_rate_limit"]))

    current = dict(BASE, preemption_rate_limit=4)
    t = tune(evaluate, current, TunerConfig(max_change=0.5, knobs=("preemption_rate_limit",)))
    assert t.proposal["preemption_rate_limit"] == 6  # 4 + round(4 x 0.5), not further in later rounds
    assert tuner.within(current, t.proposal, 0.5) and not tuner.within(current, t.proposal, 0.25)
    t = tune(evaluate, current, TunerConfig(max_change=0.5, knobs=("fair_share_weight",)))
    assert t.proposal is None  # the only knob that helps is not one the lab lets the search touch


def test_a_weight_row_moves_by_one_factor_within_the_bound():
    def evaluate(doc):
        return summary(urgent=1200.0 / doc["weights"]["high"]["standard"], routine=600)

    t = tune(evaluate, BASE, TunerConfig(max_change=1.0, knobs=("weights.high",)))
    old, new = BASE["weights"]["high"], t.proposal["weights"]["high"]
    assert {u: new[u] / old[u] for u in old} == pytest.approx(dict.fromkeys(old, 2.0))
    assert {d["field"] for d in t.diff} == {f"weights.high.{u}" for u in old}


def test_min_runtime_never_goes_below_the_cooldown_floor():
    def evaluate(doc):
        return summary(rt=1.0 if doc["min_runtime_s"] < 700 else 0.5)

    t = tune(evaluate, dict(BASE, min_runtime_s=900.0), TunerConfig(max_change=1.0, knobs=("min_runtime_s",)))
    assert t.proposal["min_runtime_s"] == 600.0 and t.predicted["realtime"] == 1.0


KNOB_FIELDS = ("realtime_headroom_gpus", "preemption_rate_limit", "min_runtime_s", "size_weight",
               "fair_share_weight", "aging_per_minute")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(coef=st.lists(st.floats(-1, 1), min_size=4 * len(KNOB_FIELDS), max_size=4 * len(KNOB_FIELDS)),
       max_change=st.sampled_from([0.25, 0.5, 1.0]), replays=st.integers(2, 30))
def test_a_proposal_never_worsens_a_target_it_does_not_name(coef, max_change, replays):
    """Any replay (here: each figure a random function of the knobs) and any bound: every target whose miss
    grows is among the proposal's costs, the changes stay within the bound, the replays within the cap."""
    def evaluate(doc):
        x = [math.log1p(float(doc[k])) for k in KNOB_FIELDS]
        f = [sum(c * v for c, v in zip(coef[i::4], x, strict=True)) for i in range(4)]
        return summary(rt=min(1.0, max(0.0, 0.7 + 0.1 * f[0])), urgent=300 * math.exp(0.3 * f[1]),
                       depts={"a": (3600 * math.exp(0.3 * f[2]), 0.9)}, idle=max(0.0, 0.05 + 0.02 * f[3]))

    config = TunerConfig(max_change=max_change, max_replays=replays, knobs=KNOB_FIELDS)
    current = dict(BASE, realtime_headroom_gpus=2, min_runtime_s=1800.0)
    t = tune(evaluate, current, config)
    assert t.replays <= replays
    if t.proposal is None:
        return
    base_miss = tuner.misses(t.current, config.targets)
    new_miss = tuner.misses(t.predicted, config.targets)
    named = set(t.improves) | set(t.costs)
    for name in base_miss:
        if new_miss[name] > base_miss[name] + 1e-9:
            assert name in t.costs
        if name not in named:
            assert new_miss[name] == pytest.approx(base_miss[name])
    assert t.improves and tuner.within(current, t.proposal, max_change)
    assert tune(evaluate, t.proposal, config).current == pytest.approx(t.predicted)  # what it predicted


def test_automatic_application_within_the_labs_bounds_only():
    current = dict(BASE, realtime_headroom_gpus=0)
    t = tune(_headroom_fixes_realtime, current)
    assert tuner.auto_applicable(t, current, TunerConfig()) == (False, "automatic application is off")
    on = TunerConfig(auto_apply=True, auto_max_change=1.0, auto_targets=("realtime",))
    assert tuner.auto_applicable(t, current, on) == (True, "")
    ok, why = tuner.auto_applicable(t, current, TunerConfig(auto_apply=True, auto_max_change=1.0,
                                                            auto_targets=("urgent",)))
    assert not ok and "realtime" in why
    one = dict(BASE, realtime_headroom_gpus=1)
    big = tune(lambda doc: summary(rt=min(1.0, 0.5 + 0.1 * doc["realtime_headroom_gpus"])), one,
               TunerConfig(max_change=3.0))
    assert big.proposal["realtime_headroom_gpus"] == 4 and big.costs == []
    ok, why = tuner.auto_applicable(big, one, TunerConfig(auto_apply=True, auto_max_change=1.0))
    assert not ok and "automatic bound" in why
    traded = tune(_headroom_fixes_realtime, current, TunerConfig(targets=tuner.Targets(idle_while_waiting=0.015)))
    ok, why = tuner.auto_applicable(traded, current, on)
    assert not ok and "idle" in why


def test_the_configuration_round_trips_and_defaults():
    assert config_from_dict({}) == TunerConfig()
    c = TunerConfig(days=3, max_change=0.5, max_replays=12, knobs=("size_weight",), auto_apply=True,
                    auto_max_change=0.25, auto_targets=("realtime", "idle"))
    assert config_from_dict(config_to_dict(c)) == c


@pytest.mark.parametrize(("doc", "field"), [
    ([], "__all__"),
    ({"colour": 1}, "colour"),
    ({"targets": 3}, "targets"),
    ({"targets": {"realtime_within_5min": 1.5}}, "targets.realtime_within_5min"),
    ({"targets": {"urgent_wait_ratio": "half"}}, "targets.urgent_wait_ratio"),
    ({"targets": {"nice": 1}}, "targets.nice"),
    ({"search": {"max_replays": 1}}, "search.max_replays"),
    ({"search": {"max_replays": 2.5}}, "search.max_replays"),
    ({"search": {"max_change": 0}}, "search.max_change"),
    ({"search": {"days": 0}}, "search.days"),
    ({"search": {"knobs": ["weights.urgent"]}}, "search.knobs"),
    ({"search": {"knobs": []}}, "search.knobs"),
    ({"automatic": {"enabled": "yes"}}, "automatic.enabled"),
    ({"automatic": {"targets": ["everything"]}}, "automatic.targets"),
    ({"automatic": {"max_change": 2.0}}, "automatic.max_change"),  # beyond search.max_change (1.0)
])
def test_each_bad_configuration_names_its_field(doc, field):
    with pytest.raises(TunerConfigError) as exc:
        config_from_dict(doc)
    assert field in exc.value.errors


def test_a_real_replay_proposes_a_shorter_cooldown_when_it_starves_realtime():
    """One 8-GPU node kept busy by long elastic jobs; realtime jobs arrive every half hour. Under a 2-hour
    minimum runtime nothing may be preempted for them; the tuner proposes a shorter one."""
    rows = [TraceRow(f"e{i}", i * 1800.0, 4 * 3600.0, 4, "a", tier="elastic", max_runtime_s=4 * 3600.0)
            for i in range(12)]
    rows += [TraceRow(f"r{i}", 900.0 + i * 1800.0, 600.0, 2, "b", tier="realtime", max_runtime_s=1200.0)
             for i in range(12)]
    groups = [{"name": "n", "count": 1, "gpus_per_node": 8, "flavor": "a100"}]
    quotas = {"a": {"a100": 4}, "b": {"a100": 4}}

    def evaluate(doc):
        meter = tuner.IdleMeter(Portal())
        s = whatif.replay(rows, node_groups=groups, quotas=quotas, policy=whatif.overrides_of(doc), decide=meter)
        s["idle_while_waiting"] = meter.share
        return s

    current = dict(BASE, min_runtime_s=7200.0, realtime_headroom_gpus=0)
    t = tune(evaluate, current, TunerConfig(max_replays=6, knobs=("min_runtime_s", "realtime_headroom_gpus")))
    assert t.current["realtime"] < 0.95
    assert t.proposal is not None and "realtime" in t.improves
    assert t.predicted["realtime"] > t.current["realtime"]
    assert 0 <= t.current["idle"] <= 1


def test_knobs_that_help_only_together_are_moved_together_in_the_joint_step():
    """Headroom and a higher preemption rate each start a few more realtime jobs on time but idle GPUs cost
    more than that gains; together they meet the realtime target, which outweighs the idle cost."""
    def evaluate(doc):
        h, r = doc["realtime_headroom_gpus"] >= 1, doc["preemption_rate_limit"] >= 2
        return summary(rt=0.5 + 0.05 * h + 0.05 * r + 0.35 * (h and r), idle=0.04 + 0.03 * h + 0.03 * r)

    current = dict(BASE, realtime_headroom_gpus=0, preemption_rate_limit=1)
    config = TunerConfig(max_replays=6, knobs=("realtime_headroom_gpus", "preemption_rate_limit"))
    t = tune(evaluate, current, config)
    assert [d["field"] for d in t.diff] == ["preemption_rate_limit", "realtime_headroom_gpus"]
    assert t.proposal["realtime_headroom_gpus"] == 1 and t.proposal["preemption_rate_limit"] == 2
    assert t.improves == ["realtime"] and t.costs == ["idle"] and t.replays <= 6
    assert [x["knob"] for x in t.tried if x["accepted"]] == ["joint"]
