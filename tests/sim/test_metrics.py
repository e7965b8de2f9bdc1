import math

import pytest

from simulator.metrics import jain, mean, percentile, sharing_safety, srpt_fluid_bound, utilisation


def test_jain_index():
    assert jain([1, 1, 1, 1]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([1, 2]) == pytest.approx(9 / 10)
    assert math.isnan(jain([]))


def test_percentiles_linear_interpolation():
    xs = [1, 2, 3, 4]
    assert percentile(xs, 50) == pytest.approx(2.5)
    assert percentile(xs, 0) == 1 and percentile(xs, 100) == 4
    assert percentile(list(range(101)), 95) == pytest.approx(95)
    assert percentile([7], 99) == 7
    assert math.isnan(percentile([], 50))
    assert mean([1, 2, 3]) == 2


def test_utilisation():
    assert utilisation(busy_gpu_s=400, capacity=8, window=(0, 100)) == pytest.approx(0.5)


def test_srpt_fluid_bound_hand_computed():
    # capacity 2 GPU; job A arrives 0 with 10 GPU-s, job B arrives 0 with 2 GPU-s: B done at 1, A at 6
    assert srpt_fluid_bound([(0, 10), (0, 2)], 2) == pytest.approx((1 + 6) / 2)
    # B arrives at 2 while A (remaining 6) runs: B done at 3, A at 6 -> mean((6-0), (3-2)) = 3.5
    assert srpt_fluid_bound([(0, 10), (2, 2)], 2) == pytest.approx(3.5)


def test_sharing_safety():
    out = sharing_safety({1: 100, 2: 300, 3: 50}, {"a": {1: 100, 2: 100}, "b": {3: 10}}, slack_s=60)
    assert out["departments"]["a"]["safe"] is False  # 200 avg vs 100 alone
    assert out["departments"]["b"]["safe"] is True  # 50 vs 10 within slack
    assert (out["safe"], out["of"]) == (1, 2)
