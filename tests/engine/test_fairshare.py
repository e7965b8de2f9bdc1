"""A department's fair-share statement reads what the cycle scores with: guaranteed, used, borrowed and lent per
quota scope, the decayed history behind its factor, and the factor's effect on its queued jobs' places."""

from __future__ import annotations

import pytest
from core_builders import NOW, Snap, job, run

from engine.fairshare import fair_statements
from engine.ordering import fair_standing


def test_borrowed_and_lent_balance_and_the_factor_is_the_cycles():
    snap = (
        Snap().nodes(2).quota("A", 4).quota("B", 8).quota("C", 4, lend=1)
        .running(run(1, "A", gpus=6), run(2, "C", on="n1", gpus=2))
        .usage(A=3600.0 * 40, B=3600.0 * 10, C=0.0).build()
    )  # fmt: skip
    s = fair_statements(snap)
    a, b, c = (s[d].scopes[0] for d in "ABC")
    assert (a.guaranteed, a.used, a.borrowed, a.lent) == (4, 6, 2, 0.0)
    # B's 8 idle lendable GPUs and C's 1 (its lending limit) lend A's 2 in proportion
    assert (b.used, b.borrowed, b.lent) == (0, 0, round(2 * 8 / 9, 2))
    assert (c.used, c.borrowed, c.lent) == (2, 0, round(2 * 1 / 9, 2))
    assert s["A"].history_share == pytest.approx(0.8) and s["A"].running_share == pytest.approx(0.75)
    assert s["A"].entitled_share == pytest.approx(0.25)
    standing = fair_standing(snap)
    for d in "ABC":
        assert (s[d].use_ratio, s[d].factor) == standing[d]
    assert s["A"].factor < 1 < s["B"].factor


def test_a_department_over_its_share_sees_where_its_jobs_would_stand_at_par():
    snap = (
        Snap().nodes(1).quota("A", 4).quota("B", 4).running(run(8, "A", gpus=2), run(9, "B", gpus=1))
        .usage(A=3600.0 * 200, B=3600.0 * 100)
        .pending(job(1, "A", urgency="critical"), job(2, "B"))
        .build()
    )  # fmt: skip
    s = fair_statements(snap)
    (a_place,) = s["A"].places
    (b_place,) = s["B"].places
    # A uses 4/3 of its share (factor 2^(-4/3)), B 2/3 (2^(4/3)): A's critical job (weight 4) stands behind B's
    # normal one (weight 1) and would stand ahead of it at par
    assert s["A"].use_ratio == pytest.approx(4 / 3) and s["B"].factor == pytest.approx(2 ** (4 / 3))
    assert (a_place.place, a_place.place_at_par, a_place.of) == (2, 1, 2)
    assert (b_place.place, b_place.place_at_par) == (1, 2)  # and B's factor gains it the place A lost


def test_a_department_at_par_keeps_its_place():
    snap = (
        Snap().nodes(1).quota("A", 4).quota("B", 4).running(run(8, "A"), run(9, "B")).usage(A=3600.0, B=3600.0)
        .pending(job(1, "A"), job(2, "B", submitted_at=NOW - 5)).build()
    )  # fmt: skip
    s = fair_statements(snap)
    assert s["A"].factor == s["B"].factor == 1.0
    assert all(p.place == p.place_at_par for d in "AB" for p in s[d].places)
