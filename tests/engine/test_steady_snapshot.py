"""The steady-state benchmark's next snapshot (``benchmarks.engine.next_snapshot``): what cycle 2 reads is cycle 1's
decisions applied as the adapter applies them, ten seconds on, with a few jobs ended and submitted."""

from __future__ import annotations

from benchmarks.engine import make_snapshot, next_snapshot
from engine import schedule


def test_next_snapshot_applies_the_decisions_and_the_delta():
    first = make_snapshot(300, 40)
    result = schedule(first)
    assert result.admissions and result.preemptions  # (the cell exercises both)
    second = next_snapshot(first, result, ends=5, submissions=7)
    running = {r.id: r for r in second.running}
    pending = {j.id: j for j in second.pending}
    assert second.now == first.now + 10.0
    for adm in result.admissions:  # admitted: running where it was placed, since the last cycle (or ended)
        assert adm.job_id not in pending
        if adm.job_id in running:
            assert running[adm.job_id].placement == adm.placement and running[adm.job_id].started_at == first.now
    assert sum(adm.job_id in running for adm in result.admissions) >= len(result.admissions) - 5
    leaving = {v: p.preemptor_id for p in result.preemptions for v in p.victim_ids}
    for victim, preemptor in leaving.items():  # still running while it leaves, for its preemptor
        assert running[victim].evicting_for == preemptor and not running[victim].preemptible
    assert second.recent_preemptions == first.recent_preemptions + len(leaving)
    before = {r.id for r in first.running} | {a.job_id for a in result.admissions}
    assert len(before - set(running)) == 5  # ended
    new = [j for j in second.pending if j.submitted_at == second.now]
    assert len(new) == 7 and len(pending) == len(first.pending) - len(result.admissions) + 7
    assert next_snapshot(first, result, ends=5, submissions=7) == second  # (the same delta for the same seed)
