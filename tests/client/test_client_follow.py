"""wait(), logs(follow=True) and quote() against the live portal, with the simulated cluster driven between
the client's polls (its ``sleep`` runs the next admission cycle or lets simulated time pass)."""

from __future__ import annotations

import pytest
from client_world import Script, age_pods, finish_pods, run_cycle

import gpuportal

pytestmark = pytest.mark.django_db(transaction=True)


def test_wait_follows_the_job_to_success_with_a_progress_line(portal, job_spec, capsys):
    sleeps = Script(lambda: None, run_cycle, finish_pods)
    client = portal(sleep=sleeps)
    job = client.submit(job_spec())
    seen = []
    final = client.wait(job, poll_interval=7, progress=True, on_change=lambda j: seen.append(j["state"]))
    assert final["state"] == "succeeded" and final["exit_code"] == 0
    assert seen == ["queued", "running", "succeeded"]
    assert sleeps.pauses == [7, 7, 7]  # polled every poll_interval
    err = capsys.readouterr().err
    assert f"job {job['id']}: queued" in err and "succeeded" in err  # tqdm writes to stderr


def test_wait_raises_job_failed_with_the_job(portal, job_spec):
    client = portal(sleep=Script(run_cycle, finish_pods))
    job = client.submit(job_spec(env={"SIM_EXIT_CODE": "3"}))
    with pytest.raises(gpuportal.JobFailed) as err:
        client.wait(job, poll_interval=1)
    assert err.value.job["state"] == "failed" and err.value.job["exit_code"] == 3
    assert str(err.value).count("exit code 3") == 1  # said once, though the portal's reason says it too
    assert client.wait(job, raise_on_failure=False)["state"] == "failed"


def test_wait_raises_job_cancelled(portal, job_spec, lab):
    client = portal()
    job = client.submit(job_spec())
    client.sleep = Script(lambda: portal(lab.vadmin).cancel(job, comment="no"))  # a department admin cancels
    with pytest.raises(gpuportal.JobCancelled) as err:
        client.wait(job, poll_interval=1)
    assert err.value.job["state"] == "cancelled"


def test_wait_times_out_and_the_job_goes_on(portal, job_spec):
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    client = portal(sleep=sleep, monotonic=lambda: now[0])
    job = client.submit(job_spec())
    with pytest.raises(gpuportal.WaitTimeout) as err:
        client.wait(job, timeout=12, poll_interval=5)
    assert isinstance(err.value, TimeoutError) and err.value.job["state"] == "queued"
    assert now[0] == 12  # 5 + 5 + 2: the last pause is cut to the deadline
    assert client.get(job)["state"] == "queued"


def test_logs_follow_the_job_from_queued_to_its_end_without_repeating_lines(portal, job_spec):
    # The simulated cluster runs SIM_SPEEDUP (60) times faster: a pod that has run 2.5 s of the test's clock
    # has run 150 s and logged steps 0, 60 and 120; at 5.5 s, steps up to 300. The clock moves only here,
    # however long the polls take.
    sleeps = Script(run_cycle, lambda: age_pods(2.5), lambda: age_pods(5.5), finish_pods)
    client = portal(sleep=sleeps)
    job = client.submit(job_spec(command=["python", "train.py", "--epochs=3"]))
    lines = list(client.logs(job, follow=True, poll_interval=1))
    assert lines == ["$ python train.py --epochs=3", "[sim] step 0: running", "[sim] step 60: running",
                     "[sim] step 120: running", "[sim] step 180: running", "[sim] step 240: running",
                     "[sim] step 300: running", "done"]
    assert client.get(job)["state"] == "succeeded"
    # Without follow: what there is now, at once.
    assert list(client.logs(job)) == ["$ python train.py --epochs=3", "done"]
    assert list(client.logs(job, tail=1)) == ["done"]


def test_logs_follow_a_log_longer_than_the_tail_without_repeating_lines_at_a_reconnect(portal, job_spec):
    # --tail 2 of a log that already has 5 lines: the reconnection must resume after the last line given, not
    # start again from lines the follower was never given (and then print everything twice).
    sleeps = Script(lambda: age_pods(6.5), lambda: age_pods(8.5), finish_pods)
    client = portal(sleep=sleeps)
    job = client.submit(job_spec(command=["python", "train.py"], env={"SIM_DURATION_S": "600"}))
    run_cycle()
    age_pods(4.5)  # the log: the command, steps 0 to 240
    lines = list(client.logs(job, follow=True, tail=2, poll_interval=1))
    assert lines == ["[sim] step 180: running", "[sim] step 240: running", "[sim] step 300: running",
                     "[sim] step 360: running", "[sim] step 420: running", "[sim] step 480: running", "done"]


def test_logs_follow_resumes_within_lines_of_one_instant(portal, job_spec):
    # The command line and the secrets line are written at the pod's start, a microsecond apart; the follower's
    # cursor counts the lines of its last instant, so a reconnection skips exactly those.
    from gpuportal.client import _LogCursor

    cursor = _LogCursor()
    assert cursor.params(tail=2) == {"tail": 2}
    given = [cursor.feed(x) for x in ["2026-01-01T00:00:00.5Z a", "2026-01-01T00:00:01Z b", "2026-01-01T00:00:01Z c"]]
    assert given == ["a", "b", "c"]
    assert cursor.params(tail=5000) == {"since_time": "2026-01-01T00:00:01Z"}
    again = [cursor.feed(x) for x in ["2026-01-01T00:00:01Z b", "2026-01-01T00:00:01Z c", "2026-01-01T00:00:01Z d",
                                      "2026-01-01T00:00:02.25Z e", "no stamp"]]
    assert again == [None, None, "d", "e", "no stamp"]
    assert cursor.params(tail=5000) == {"since_time": "2026-01-01T00:00:02.25Z"}
    assert [cursor.feed("2026-01-01T00:00:02.25Z e"), cursor.feed("2026-01-01T00:00:03Z e")] == [None, "e"]


def test_logs_of_a_colleagues_job_are_refused(portal, lab, job_spec):
    job = portal(lab.amy).submit(job_spec())
    with pytest.raises(gpuportal.PermissionDenied):
        list(portal(lab.alice).logs(job))


def _budgets(lab, *, balance, price, rule=None, allowance=None):
    from quotas.models import Price
    from quotas.services import allowances, rules, wallets

    wallets.wallet_create(department=lab.vision, actor=lab.root, balance=balance)
    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=price)
    if rule:
        rules.approval_rule_set(department=lab.vision, actor=lab.root, **rule)
    if allowance:
        allowances.allowance_set(user=lab.alice, limit=allowance, actor=lab.root)


def test_quote_prices_the_job_as_the_portal_will(portal, lab, job_spec):
    from quotas.services import pricing
    from scheduling.models import Job

    _budgets(lab, balance=100_000, price=2_000, rule={"gpus_above": 2, "cost_above": None, "realtime": False})
    client = portal()
    spec = job_spec(gpus=2, pods=2, max_runtime_s=7200)
    q = client.quote(spec)
    assert q["rate"] == q["base_price"] == 2_000 and q["gpus_total"] == 4 and q["gpu_hours"] == 8
    assert q["estimated_cost"] == 16_000 and q["estimated_credits"] == 16
    assert q["metered"] and q["available"] == 100_000 and q["affordable"]
    assert q["needs_approval"] and q["approval_reasons"] == ["4 GPUs > 2"]
    assert q["free_gpus"] == 8
    # The portal agrees: the job waits for approval and its worst case is the quote.
    job = client.submit(spec)
    assert job["state"] == "pending_approval"
    assert pricing.estimated_cost(job=Job.objects.get(pk=job["id"])) == q["estimated_cost"]

    # A bid above the base price is the worst-case rate (borrowed capacity clears at no more than the bid).
    small = client.quote(job_spec(bid=5_000, max_runtime_s=360))
    assert small["rate"] == 5_000 and small["estimated_cost"] == 500 and not small["needs_approval"]
    assert client.submit(job_spec(bid=5_000, max_runtime_s=360))["state"] == "queued"


def test_quote_counts_the_allowance_and_an_unmetered_department(portal, lab, job_spec):
    _budgets(lab, balance=1_000, price=1_000, allowance=1_500)
    client = portal()
    q = client.quote(job_spec(gpus=2))  # 2 GPU-hours at 1000: 2000 mcr
    assert q["estimated_cost"] == 2_000 and not q["affordable"]
    assert q["needs_approval"] and "allowance" in q["approval_reasons"][0]
    assert client.submit(job_spec(gpus=2))["state"] == "pending_approval"
    bobs = portal(lab.bob).quote(job_spec())  # nlp has no wallet: not metered
    assert not bobs["metered"] and bobs["available"] is None and bobs["affordable"]


def test_quote_refuses_what_it_cannot_price(portal, job_spec):
    client = portal()
    with pytest.raises(gpuportal.ValidationError) as err:
        client.quote(job_spec(flavor="h100"))
    assert err.value.fields["flavor"][0]["code"] == "does_not_exist"
    with pytest.raises(gpuportal.ValidationError) as err:
        client.quote({"flavor": "a100-80gb", "name": "x", "image": "busybox", "command": ["true"]})
    assert err.value.fields["gpus"][0]["code"] == "required"
