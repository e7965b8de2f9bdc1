"""gpuportal.Client against the live portal: submit (idempotent retries), typed errors, tenancy, list
pagination, batches, cancel, quote."""

from __future__ import annotations

import pytest
from client_world import Recorder, Script

import gpuportal
from gpuportal import Client

pytestmark = pytest.mark.django_db(transaction=True)


def _jobs(user):
    from scheduling.models import Job

    return Job.objects.filter(owner=user)


def test_submit_returns_the_job_and_get_reads_it_back(portal, lab, job_spec):
    client = portal()
    job = client.submit(job_spec(), name="r50", gpus=2)
    assert job["state"] == "queued" and job["name"] == "r50" and job["gpus"] == 2
    assert job["owner"] == "alice" and job["department"] == "vision"
    again = client.get(job["id"])
    assert again["id"] == job["id"] and again["events"][0]["to_state"] == "queued"
    assert client.get(str(job["id"]))["id"] == client.get(job)["id"] == job["id"]
    me = client.whoami()
    assert me["username"] == "alice" and me["membership"]["department"] == "vision"


def test_a_lost_answer_is_retried_with_the_same_key_and_creates_one_job(portal, lab, job_spec):
    transport = Recorder(lose=2)  # the portal creates the job, the answer never arrives, twice
    sleeps = Script()
    client = portal(transport=transport, sleep=sleeps)
    job = client.submit(job_spec())
    assert [r.method for r in transport.requests] == ["POST"] * 3
    keys = {r.headers["Idempotency-Key"] for r in transport.requests}
    assert len(keys) == 1 and len(next(iter(keys))) >= 32  # one generated key on every attempt
    assert len(sleeps.pauses) == 2 and all(p > 0 for p in sleeps.pauses)  # backed off between attempts
    assert _jobs(lab.alice).count() == 1
    assert _jobs(lab.alice).get().pk == job["id"]


def test_the_same_key_twice_is_one_job_and_another_body_is_refused(portal, lab, job_spec):
    client = portal()
    first = client.submit(job_spec(), idempotency_key="cell-7")
    second = client.submit(job_spec(), idempotency_key="cell-7")
    assert first["id"] == second["id"] and _jobs(lab.alice).count() == 1
    with pytest.raises(gpuportal.IdempotencyKeyReused) as err:
        client.submit(job_spec(gpus=2), idempotency_key="cell-7")
    assert err.value.status == 422 and err.value.code == "idempotency_key_reused"


def test_connection_refused_is_retried_then_typed(lab):
    sleeps = Script()
    client = Client("http://127.0.0.1:9", "gpp_x_y", retries=2, backoff=0.01, sleep=sleeps)  # discard port
    with pytest.raises(gpuportal.PortalUnreachable) as err:
        client.submit(JOB_MIN)
    assert err.value.code == "unreachable" and len(sleeps.pauses) == 2


JOB_MIN = {"name": "x", "image": "busybox", "command": ["true"], "flavor": "a100-80gb", "gpus": 1}


def test_validation_errors_are_typed_with_the_field_errors(portal, lab, job_spec):
    client = portal()
    with pytest.raises(gpuportal.ValidationError) as err:
        client.submit(job_spec(gpus=-1, image="Not An Image", privileged=True))
    e = err.value
    assert e.status == 400 and e.code == "validation_error"
    assert e.fields["gpus"][0]["code"] == "min_value"
    assert e.fields["image"][0]["code"] == "invalid_image"
    assert e.fields["privileged"][0]["code"] == "unknown_field"
    assert "gpus:" in str(e) and "privileged" in str(e)
    assert isinstance(e, gpuportal.PortalError)
    assert _jobs(lab.alice).count() == 0


def test_another_departments_job_is_not_found_on_every_verb(portal, lab, submit):
    bobs = submit(lab.bob)
    client = portal(lab.alice)
    for call in (client.get, client.cancel, lambda j: list(client.logs(j))):
        with pytest.raises(gpuportal.NotFound) as err:
            call(bobs.pk)
        assert err.value.status == 404 and err.value.code == "not_found"
    assert client.list() == []


def test_a_bad_token_and_a_non_member_get_their_own_errors(portal, lab, job_spec):
    with pytest.raises(gpuportal.AuthenticationError) as err:
        Client(portal.url, "gpp_1_not-a-secret").whoami()
    assert err.value.status == 401 and err.value.code == "authentication_failed"
    with pytest.raises(gpuportal.PermissionDenied) as err:
        portal(lab.stranger).submit(job_spec())
    assert err.value.status == 403


def test_list_walks_every_page_and_filters(portal, lab, submit):
    ids = [submit(lab.alice, name=f"a{i}").pk for i in range(7)]
    submit(lab.amy, name="amys")
    submit(lab.bob, name="bobs")  # another department: never listed
    transport = Recorder()
    client = portal(transport=transport)
    mine = client.list(mine=True, page_size=3)
    assert sorted(j["id"] for j in mine) == sorted(ids)
    pages = [r for r in transport.requests if r.url.path.endswith("/jobs")]
    assert [r.url.params["page"] for r in pages] == ["1", "2", "3"]
    everyone = client.list(page_size=3)
    assert len(everyone) == 8 and {j["owner"] for j in everyone} == {"alice", "amy"}
    assert len(client.list(limit=4, page_size=3)) == 4
    assert [j["name"] for j in client.list(q="amy")] == ["amys"]
    assert client.list(state=["running", "succeeded"]) == []
    assert len(client.list(state="queued", tier=["elastic"])) == 8
    # plain records with the same keys: what pandas.DataFrame(records) needs
    assert len({tuple(sorted(j)) for j in everyone}) == 1


def test_submit_batch_all_or_nothing(portal, lab, job_spec):
    client = portal()
    jobs = client.submit_batch([job_spec(name=f"lr{i}") for i in range(3)], idempotency_key="sweep-1")
    assert [j["name"] for j in jobs] == ["lr0", "lr1", "lr2"]
    assert [j["id"] for j in client.submit_batch([job_spec(name=f"lr{i}") for i in range(3)],
                                                 idempotency_key="sweep-1")] == [j["id"] for j in jobs]
    with pytest.raises(gpuportal.ValidationError) as err:
        client.submit_batch([job_spec(), job_spec(gpus=0)])
    assert "jobs.1.gpus" in err.value.fields
    assert _jobs(lab.alice).count() == 3


def test_rate_limited_submissions_wait_out_retry_after(portal, lab, job_spec, settings):
    from django.core.cache import cache

    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"submit": "2/min"}}
    sleeps = Script(cache.clear)  # the pause "lets the minute pass": the rate's history is gone after it
    client = portal(sleep=sleeps)
    for i in range(3):
        client.submit(job_spec(name=f"j{i}"))
    assert _jobs(lab.alice).count() == 3
    assert len(sleeps.pauses) == 1 and sleeps.pauses[0] >= 1  # at least the portal's Retry-After
    # A Retry-After beyond what the client is told to wait: raised, with the wait it would need.
    impatient = portal(max_retry_after=0.5)
    impatient.submit(job_spec(name="j3"))
    with pytest.raises(gpuportal.RateLimited) as err:
        impatient.submit(job_spec(name="j4"))
    assert err.value.status == 429 and err.value.retry_after >= 1
    # A batch larger than the whole rate can never pass: no Retry-After, no retry.
    with pytest.raises(gpuportal.RateLimited) as err:
        portal(sleep=Script()).submit_batch([job_spec()] * 3)
    assert err.value.retry_after is None


def test_cancel_is_idempotent_and_a_finished_job_is_a_conflict(portal, lab, job_spec, submit):
    client = portal()
    job = client.submit(job_spec())
    assert client.cancel(job, comment="wrong data")["state"] == "cancelled"
    assert client.cancel(job["id"])["state"] == "cancelled"
    from client_world import finish_pods, run_cycle

    done = client.submit(job_spec(name="done"))
    run_cycle()
    finish_pods()
    assert client.get(done)["state"] == "succeeded"
    with pytest.raises(gpuportal.Conflict) as err:
        client.cancel(done)
    assert err.value.status == 409 and err.value.code == "invalid_state"


def test_client_defaults_are_the_portals():
    from scheduling.api.serializers import JobSubmitSerializer
    from scheduling.models import Tier

    fields = JobSubmitSerializer().fields
    # The tier's default depends on the kind (sessions and services are realtime): the client names a batch
    # job's, which the submission path applies (tests/scheduling/test_sessions.py holds the other kinds).
    static = {name: value for name, value in gpuportal.JOB_DEFAULTS.items() if name != "tier"}
    assert static == {name: fields[name].default for name in static}
    assert gpuportal.JOB_DEFAULTS["tier"] == "elastic" == Tier.ELASTIC
