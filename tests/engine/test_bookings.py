"""The calendar's rules (``engine.bookings``): no job starts on booked or maintenance capacity that it would still
hold when the window begins (by its time limit), a job that ends before it backfills there, a booking's owners
get its GPUs at the window's start and alone inside it (outside their quota), the capacity is everyone's at its
end, and a maintenance window's nodes leave the schedulable set at its start."""

from __future__ import annotations

from dataclasses import replace

from core_builders import NOW, Snap, job, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import reasons, schedule
from engine.bookings import clock_text
from engine.types import RunningJob

HOUR = 3600.0


def _one_node(*, start: float = NOW + 2 * HOUR, end: float = NOW + 5 * HOUR, gpus: int = 8) -> Snap:
    """One 8-GPU node, A with the quota of all of it, B's NLP course booked ``gpus`` of it."""
    return (Snap().nodes(1).quota("A", 8).quota("B", 0)
            .booking(1, gpus, start, end, purpose="the NLP course", departments=("B",)))


def test_a_job_that_would_run_into_a_booking_waits_and_says_for_what():
    res = _one_node().pending(job(1, gpus=4, max_runtime_s=3 * HOUR)).decide()
    assert res.code(1) == reasons.BOOKED
    r = res.reason[1]
    assert "reserved for the NLP course from 05:46 UTC (in 2.0 h)" in r.message
    assert r.detail["booking"] == 1 and r.detail["window_start"] == NOW + 2 * HOUR
    # its estimate is after the booking (the replay takes the booked GPUs until the window ends)
    assert r.estimated_start is not None and r.estimated_start >= NOW + 5 * HOUR


def test_a_job_whose_time_limit_ends_before_the_booking_backfills_onto_it():
    res = _one_node().pending(job(1, gpus=8, max_runtime_s=2 * HOUR)).decide()
    assert res.code(1) == "admitted"


def test_a_booking_holds_only_what_it_books():
    snap = _one_node(gpus=4).pending(job(1, gpus=4, max_runtime_s=10 * HOUR, urgency="critical"),
                                     job(2, gpus=1, max_runtime_s=10 * HOUR))
    res = snap.decide()
    assert res.code(1) == "admitted"
    assert res.code(2) == reasons.BOOKED


def test_a_running_job_that_ends_before_the_start_leaves_its_gpus_to_the_booking():
    # 4 GPUs run until an hour before the booking: the 4 free now are the only ones a long job may take
    snap = (_one_node().running(run(10, on=("n0",), gpus=4, max_runtime_s=2 * HOUR))
            .pending(job(1, gpus=4, max_runtime_s=10 * HOUR)))
    assert snap.decide().code(1) == reasons.BOOKED


def test_the_booking_takes_what_is_free_at_its_start_on_the_fullest_nodes():
    # n0 is busy past the start; the booking holds n1, so a long job still starts on n2 (the rest of n0 too)
    snap = (Snap().nodes(3).quota("A", 24).running(run(10, on=("n0",), gpus=4, max_runtime_s=20 * HOUR))
            .booking(1, 8, NOW + HOUR, NOW + 3 * HOUR, departments=("B",))
            .pending(job(1, gpus=8, max_runtime_s=10 * HOUR), job(2, gpus=4, max_runtime_s=10 * HOUR),
                     job(3, gpus=8, max_runtime_s=10 * HOUR)))
    res = snap.decide()
    assert res.code(1) == "admitted" and res.code(2) == "admitted"
    assert {res.placement(1)[0], res.placement(2)[0]} == {"n0", "n2"} or res.placement(1) != res.placement(2)
    assert res.code(3) == reasons.BOOKED


def test_owners_get_the_booked_gpus_at_the_start_outside_their_quota():
    start = NOW
    snap = (_one_node(start=start, end=start + 3 * HOUR)
            .pending(job(1, dept="A", gpus=8, max_runtime_s=HOUR, urgency="critical"),
                     job(2, dept="B", gpus=8, max_runtime_s=HOUR)))
    res = snap.decide()
    assert res.code(2) == "admitted"  # B's nominal quota is 0: the booking is its quota
    assert res.code(1) == reasons.BOOKED  # ahead in the order, and the GPUs are idle: nobody else uses them
    assert "until 06:46 UTC" in res.reason[1].message


def test_nobody_else_uses_a_bookings_idle_gpus_inside_the_window():
    res = _one_node(start=NOW - HOUR, end=NOW + HOUR).pending(job(1, gpus=1, max_runtime_s=600)).decide()
    assert res.code(1) == reasons.BOOKED


def test_an_owners_job_past_the_bookings_end_queues_as_any_job():
    res = (_one_node(start=NOW - HOUR, end=NOW + HOUR)
           .pending(job(1, dept="B", gpus=1, max_runtime_s=2 * HOUR)).decide())
    assert res.code(1) != "admitted"


def test_owners_jobs_inside_the_booking_count_against_it_not_their_quota():
    started = NOW - HOUR
    inside = replace(run(10, dept="B", on=("n0",), gpus=4, max_runtime_s=2 * HOUR), started_at=started)
    snap = (Snap().nodes(2).quota("A", 12).quota("B", 4, borrow=0)
            .booking(1, 8, started, NOW + 2 * HOUR, purpose="the NLP course", departments=("B",))
            .running(inside)
            .pending(job(1, dept="B", gpus=4, max_runtime_s=HOUR, urgency="critical"),
                     job(2, dept="B", gpus=4, max_runtime_s=HOUR, urgency="critical"),
                     job(3, dept="B", gpus=1, max_runtime_s=HOUR, urgency="low")))
    res = snap.decide()
    assert res.code(1) == "admitted"  # the 4 GPUs left of the booking
    assert res.code(2) == "admitted"  # its quota of 4: the booking's GPUs are not in it
    assert res.code(3) == reasons.QUOTA_EXHAUSTED


def test_a_booking_for_users_lets_only_them_in():
    snap = (Snap().nodes(1).quota("A", 0)
            .booking(1, 8, NOW, NOW + HOUR, users=("ada",))
            .pending(job(1, dept="A", user="bob", gpus=1, max_runtime_s=600),
                     job(2, dept="A", user="ada", gpus=2, max_runtime_s=600)))
    res = snap.decide()
    assert res.code(2) == "admitted"
    assert res.code(1) != "admitted"


def test_a_booking_for_a_team_lets_only_its_members_in_outside_the_teams_share():
    # B has a team of the same slug: a booking names its team by account (A/nlp), never by slug alone
    snap = (Snap().nodes(1).quota("A", 8).quota("B", 8).team("A", "nlp", 2, borrow=0).team("A", "cv", 2)
            .team("B", "nlp", 2)
            .booking(1, 8, NOW, NOW + HOUR, purpose="the NLP course", teams=("A/nlp",))
            .pending(job(1, dept="A", team="nlp", gpus=4, max_runtime_s=600, urgency="low"),
                     job(2, dept="B", team="nlp", gpus=1, max_runtime_s=600, urgency="critical"),
                     job(3, dept="A", team="cv", gpus=1, max_runtime_s=600, urgency="critical"),
                     job(4, dept="A", gpus=1, max_runtime_s=600, urgency="critical")))
    res = snap.decide()
    assert res.code(1) == "admitted"  # 4 GPUs, its team's nominal 2 and no borrowing: the booking is its share
    assert [res.code(i) for i in (2, 3, 4)] == [reasons.BOOKED] * 3


def test_a_teams_jobs_inside_its_booking_count_against_it_not_the_teams_share():
    started = NOW - HOUR
    inside = replace(run(10, dept="A", on=("n0",), gpus=4, max_runtime_s=2 * HOUR, team="nlp"), started_at=started)
    snap = (Snap().nodes(2).quota("A", 16).team("A", "nlp", 2, borrow=0).team("A", "cv", 2)
            .booking(1, 4, started, NOW + 2 * HOUR, teams=("A/nlp",))
            .running(inside)
            .pending(job(1, dept="A", team="nlp", gpus=2, max_runtime_s=HOUR, urgency="critical"),
                     job(2, dept="A", team="nlp", gpus=1, max_runtime_s=HOUR, urgency="low")))
    res = snap.decide()
    assert res.code(1) == "admitted"  # the booking is full; its team's own 2 are untouched by the 4 inside it
    assert res.code(2) == reasons.TEAM_BORROW_LIMIT


def test_at_the_end_the_capacity_is_everyones_again():
    res = _one_node(start=NOW - 3 * HOUR, end=NOW).pending(job(1, gpus=8, max_runtime_s=10 * HOUR)).decide()
    assert res.code(1) == "admitted"


def test_a_maintenance_window_drains_its_node_in_time():
    snap = (Snap().nodes(2).quota("A", 24).maintenance(1, NOW + 2 * HOUR, NOW + 4 * HOUR, nodes=("n0",))
            .pending(job(1, gpus=8, max_runtime_s=3 * HOUR), job(2, gpus=8, max_runtime_s=3 * HOUR),
                     job(3, gpus=8, max_runtime_s=HOUR, urgency="low")))
    res = snap.decide()
    assert res.code(1) == "admitted" and res.placement(1) == ("n1",)
    assert res.code(2) == reasons.MAINTENANCE
    assert "node n0 goes into maintenance at 05:46 UTC" in res.reason[2].message
    assert res.code(3) == "admitted" and res.placement(3) == ("n0",)  # it ends before the window


def test_a_maintenance_window_by_label_covers_the_rack():
    snap = (Snap().nodes(2, labels=(("rack", "r1"),)).nodes(1, prefix="m").quota("A", 24)
            .maintenance(1, NOW + HOUR, NOW + 4 * HOUR, rack="r1")
            .pending(*[job(i, gpus=8, max_runtime_s=2 * HOUR) for i in (1, 2, 3)]))
    res = snap.decide()
    assert [res.code(i) for i in (1, 2, 3)] == ["admitted", reasons.MAINTENANCE, reasons.MAINTENANCE]
    assert res.placement(1) == ("m0",)
    assert "nodes n0, n1 go into maintenance" in res.reason[2].message


def test_inside_a_maintenance_window_its_nodes_are_out_and_running_work_is_left_alone():
    snap = (Snap().nodes(2).quota("A", 16).maintenance(1, NOW - HOUR, NOW + HOUR)
            .running(run(10, on=("n0",), gpus=2, max_runtime_s=10 * HOUR))
            .pending(job(1, gpus=1, max_runtime_s=60)))
    res = snap.decide()
    assert res.code(1) != "admitted"
    assert 10 not in res.victims
    after = Snap(now=NOW + HOUR).nodes(2).quota("A", 16).maintenance(1, NOW - HOUR, NOW + HOUR).pending(
        job(1, gpus=1, max_runtime_s=60)).decide()
    assert after.code(1) == "admitted"


def test_a_maintenance_window_elsewhere_changes_nothing():
    snap = (Snap().nodes(1).quota("A", 8).maintenance(1, NOW + HOUR, NOW + 2 * HOUR, cluster="other")
            .pending(job(1, gpus=8, max_runtime_s=10 * HOUR)))
    assert snap.decide().code(1) == "admitted"


def test_holds_take_no_place_of_the_reserved_heads():
    # depth 1: the one head reservation the pool allows is still there for the big job
    snap = (Snap().nodes(2).quota("A", 32).policy(reservation_depth=1)
            .booking(1, 4, NOW + 10 * HOUR, NOW + 12 * HOUR, departments=("B",))
            .running(run(10, on=("n0",), gpus=8, max_runtime_s=2 * HOUR, ran=HOUR))
            .pending(job(1, gpus=8, pods=2, max_runtime_s=HOUR), job(2, gpus=8, max_runtime_s=3 * HOUR)))
    res = snap.decide()
    assert "reserved_from" in res.reason[1].detail
    assert res.code(2) != "admitted"  # it would run past the head's reserved start


def test_clock_text():
    assert clock_text(9 * HOUR, 0) == "09:00 UTC"
    assert clock_text(86400 * 4 + 9 * HOUR, 0) == "Mon 09:00 UTC"
    assert clock_text(86400 * 10, 0) == "00:00 UTC in 10 days"


# ---------------------------------------------------------------- a booking is never delayed


@st.composite
def _arrivals(draw):
    jobs = []
    for i in range(draw(st.integers(5, 25))):
        jobs.append((draw(st.integers(0, 20)) * 600.0, draw(st.sampled_from(["A", "C"])),
                     draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2])),
                     draw(st.sampled_from([0.5, 1, 2, 3, 6])) * HOUR, i + 1))
    return jobs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_arrivals(), st.integers(1, 4), st.integers(1, 16))
def test_a_booking_is_never_delayed_by_a_job_started_before_it(arrivals, hours_ahead, booked):
    """Cycles every 10 minutes admit what the engine decides; at the booking's start its owners' GPUs are free
    (no job started before it still runs there) and the owners' jobs waiting then start."""
    start, end = NOW + hours_ahead * HOUR, NOW + (hours_ahead + 2) * HOUR
    nodes = Snap().nodes(3).quota("A", 12).quota("C", 12)
    running: list[RunningJob] = []
    pending = []
    now = NOW
    while now <= start:
        pending += [job(i, dept=d, gpus=g, pods=p, max_runtime_s=rt, submitted_at=NOW + at)
                    for at, d, g, p, rt, i in arrivals if NOW + at == now]
        running = [r for r in running if r.expected_end > now]
        snap = replace(nodes.booking(1, booked, start, end, departments=("B",)).build(),
                       now=now, running=tuple(running), pending=tuple(pending))
        nodes._bookings.clear()
        res = schedule(snap)
        for a in res.admissions:
            j = next(p for p in pending if p.id == a.job_id)
            running.append(RunningJob(j.id, j.department, j.flavor, j.tier, a.placement, j.gpus_per_pod, now,
                                      j.max_runtime_s))
        pending = [p for p in pending if p.id not in {a.job_id for a in res.admissions}]
        now += 600.0
    busy = sum(r.total_gpus for r in running if r.expected_end > start)
    assert busy <= 24 - booked
    # and at the start the owners' pods for all the booking's GPUs start at once
    owners = job(999, dept="B", gpus=1, pods=booked, max_runtime_s=HOUR)
    snap = replace(nodes.booking(1, booked, start, end, departments=("B",)).build(), now=start,
                   running=tuple(r for r in running if r.expected_end > start), pending=(owners,))
    nodes._bookings.clear()
    assert 999 in {a.job_id for a in schedule(snap).admissions}
