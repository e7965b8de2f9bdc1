"""Notifications end to end: events written with their change, delivered by a real SMTP server and a real
webhook receiver that checks signatures, once per channel and recipient, with retries and back-off."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnavailable

from notifications.models import Delivery, Event
from notifications.services import delivery, emit
from scheduling.models import JobState
from scheduling.services import lifecycle

pytestmark = pytest.mark.django_db


def _fail(go, job, **kw):
    args = {"exit_code": 137, "reason": "OOMKilled", "message": "pod job-x failed: OOMKilled", "finished_at": None}
    return go(lifecycle.finish, job=job, state=JobState.FAILED, **{**args, **kw})


def _webhook(client_for, user, receiver, **body):
    r = client_for(user).post("/api/v1/notifications/webhooks", {"url": receiver.url, **body}, format="json")
    assert r.status_code == 201, r.content
    receiver.secret = r.json()["secret"]
    return r.json()


def test_a_failed_job_is_mailed_through_a_real_smtp_server_with_a_hint_and_an_unsubscribe_link(
        lab, running_job, go, smtp_server):
    job = running_job(lab.alice, name="resnet")
    _fail(go, job)
    [mail] = smtp_server.messages
    assert mail["to"] == ["alice@x.test"]
    assert mail["subject"] == f"[GPU portal] Job {job.pk} (resnet) failed: OOMKilled"
    # The hint of its cause, as its page shows it (an OOMKilled pod also exits 137: the cause wins)
    assert "ran out of memory" in mail["body"] and f"/jobs/{job.pk}/" in mail["body"]
    assert "/notifications/unsubscribe/" in mail["headers"]["List-Unsubscribe"]
    assert mail["headers"]["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    d = Delivery.objects.get(user=lab.alice)
    assert (d.channel, d.status, d.attempts) == ("email", "sent", 1) and d.sent_at is not None


def test_noisy_kinds_are_off_by_default_and_preferences_turn_them_on_and_important_ones_off(
        lab, running_job, go, smtp_server, client_for):
    running_job(lab.alice)  # admitted and started: nobody asked
    assert smtp_server.messages == [] and Delivery.objects.count() == 0
    assert Event.objects.filter(kind__in=["job.admitted", "job.started"]).count() == 2  # reported, not sent
    c = client_for(lab.alice)
    r = c.patch("/api/v1/notifications/preferences", {"preferences": [
        {"kind": "job.started", "email": True}, {"kind": "job.failed", "email": False}]}, format="json")
    assert r.status_code == 200, r.content
    prefs = {p["kind"]: p for p in r.json()["preferences"]}
    assert prefs["job.started"]["email"] and not prefs["job.failed"]["email"]
    assert prefs["job.failed"]["webhook"] and prefs["job.failed"]["default_email"]  # untouched channel kept
    job = running_job(lab.alice, name="second")
    _fail(go, job)
    assert [m["subject"] for m in smtp_server.messages] == [f"[GPU portal] Job {job.pk} (second) is running"]


def test_a_signed_webhook_reaches_a_real_receiver_and_its_secret_is_shown_once(
        lab, running_job, go, client_for, receiver):
    hook = _webhook(client_for, lab.alice, receiver)
    assert hook["secret"].startswith("whsec_") and hook["scope"] == "user"
    listed = client_for(lab.alice).get("/api/v1/notifications/webhooks").json()
    assert [h["id"] for h in listed] == [hook["id"]] and "secret" not in listed[0]
    assert "secret" not in client_for(lab.alice).get(f"/api/v1/notifications/webhooks/{hook['id']}").json()
    job = running_job(lab.alice, name="bert")
    _fail(go, job, reason="ImagePullBackOff", exit_code=None)
    [got] = receiver.received
    assert got["valid"], got["headers"]
    body = got["body"]
    assert body["event"] == "job.failed" and body["data"]["job_id"] == job.pk
    assert "image could not be pulled" in body["data"]["hint"] and body["text"].startswith("*Job")
    assert got["headers"]["X-Portal-Delivery"] == body["delivery"]
    # A rotated secret signs from now on; the receiver that kept the old one rejects it.
    old = receiver.secret
    r = client_for(lab.alice).post(f"/api/v1/notifications/webhooks/{hook['id']}/rotate", {}, format="json")
    assert r.status_code == 200 and r.json()["secret"] not in (old, "")
    job2 = running_job(lab.alice, name="bert2")
    _fail(go, job2)
    assert receiver.received[-1]["valid"] is False  # still checking with the old secret
    receiver.secret = r.json()["secret"]
    assert receiver.verify({"X-Portal-Timestamp": receiver.received[-1]["headers"]["X-Portal-Timestamp"],
                            "X-Portal-Signature": receiver.received[-1]["headers"]["X-Portal-Signature"]},
                           _raw(receiver.received[-1]["body"]))


def _raw(body: dict) -> bytes:
    import json

    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def test_a_500_is_retried_with_exponential_back_off_then_succeeds(lab, running_job, go, client_for, receiver,
                                                                   settings):
    settings.NOTIFY_RETRY_BASE_S = 30
    _webhook(client_for, lab.alice, receiver)
    receiver.statuses = [500, 503]
    job = running_job(lab.alice)
    t0 = timezone.now()
    _fail(go, job)  # first attempt: 500
    d = Delivery.objects.get(channel="webhook")
    assert (d.status, d.attempts) == ("pending", 1) and "HTTP 500" in d.last_error
    assert timedelta(seconds=29) <= d.next_attempt_at - t0 <= timedelta(seconds=40)
    assert delivery.sweep(now=t0 + timedelta(seconds=10)).get("pending") is None  # not due yet: nothing sent
    assert len(receiver.received) == 1
    go(delivery.sweep, now=d.next_attempt_at + timedelta(seconds=1))  # second attempt: 503, 60 s more
    d.refresh_from_db()
    assert (d.status, d.attempts) == ("pending", 2)
    second = d.next_attempt_at
    go(delivery.sweep, now=second + timedelta(seconds=1))  # third: 200
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_error) == ("sent", 3, "")
    assert [r["answered"] for r in receiver.received] == [500, 503, 200]
    assert len({r["body"]["delivery"] for r in receiver.received}) == 1  # the same delivery each time
    assert all(r["valid"] for r in receiver.received)


def test_a_delivery_that_keeps_failing_ends_failed_and_visible(lab, running_job, go, client_for, receiver,
                                                               settings, client):
    settings.NOTIFY_MAX_ATTEMPTS = 2
    _webhook(client_for, lab.alice, receiver)
    receiver.statuses = [500, 500, 500]
    job = running_job(lab.alice)
    _fail(go, job)
    go(delivery.sweep, now=timezone.now() + timedelta(hours=1))
    go(delivery.sweep, now=timezone.now() + timedelta(hours=2))
    assert len(receiver.received) == 2
    items = client_for(lab.alice).get("/api/v1/notifications").json()["results"]
    hook = [n for n in items if n["channel"] == "webhook"]
    assert [(n["kind"], n["status"], n["attempts"]) for n in hook] == [("job.failed", "failed", 2)]
    assert "HTTP 500" in hook[0]["last_error"]
    client.force_login(lab.alice)
    page = client.get("/notifications/")
    assert page.status_code == 200 and b'data-status="failed"' in page.content


def test_a_4xx_is_not_retried(lab, running_job, go, client_for, receiver):
    _webhook(client_for, lab.alice, receiver)
    receiver.statuses = [410]
    _fail(go, running_job(lab.alice))
    d = Delivery.objects.get(channel="webhook")
    assert (d.status, d.attempts) == ("failed", 1) and "HTTP 410" in d.last_error


def test_the_broker_down_at_event_time_delays_the_mail_until_the_sweep(lab, running_job, go, smtp_server,
                                                                       monkeypatch, caplog):
    from notifications import tasks

    job = running_job(lab.alice, name="offline")

    def refuse(*args, **kwargs):
        raise BrokerUnavailable("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.deliver, "delay", refuse)
    _fail(go, job)  # committed; the message announcing it is lost
    job.refresh_from_db()
    assert job.state == "failed"
    assert smtp_server.messages == [] and Event.objects.filter(kind="job.failed", expanded_at=None).count() == 1
    assert "broker unreachable" in caplog.text
    monkeypatch.undo()  # the broker is back: beat's sweep delivers what was written meanwhile
    assert go(tasks.sweep.delay).get()["sent"] == 1
    assert [m["subject"] for m in smtp_server.messages] == [f"[GPU portal] Job {job.pk} (offline) failed: OOMKilled"]
    assert "sent" not in go(tasks.sweep.delay).get()  # and never again
    assert len(smtp_server.messages) == 1


def test_a_rolled_back_change_sends_nothing(lab, running_job, go, smtp_server):
    job = running_job(lab.alice)

    class Boom(Exception):
        pass

    def fail_then_roll_back():
        with transaction.atomic():
            lifecycle.finish(job=job, state=JobState.FAILED, exit_code=1, reason="Error", message="x",
                            finished_at=None)
            raise Boom

    with pytest.raises(Boom):
        go(fail_then_roll_back)
    job.refresh_from_db()
    assert job.state == "running"
    assert not Event.objects.filter(kind="job.failed").exists()
    go(delivery.sweep)
    assert smtp_server.messages == []


def test_an_event_is_delivered_once_however_often_it_is_expanded_and_swept(lab, go, smtp_server, monkeypatch):
    from notifications import tasks

    monkeypatch.setattr(tasks.deliver, "delay", lambda *a: None)
    event = go(emit, kind="budget.low", department_id=lab.vision.pk, users=[lab.alice.pk], admins=True,
               data={"department": "vision", "balance": 5, "threshold": 10})
    for _ in range(3):
        delivery.expand_pending(event_ids=[event.pk])
        Event.objects.filter(pk=event.pk).update(expanded_at=None)  # as if a worker died after expanding
    go(delivery.sweep)
    go(delivery.sweep)
    assert sorted(m["to"][0] for m in smtp_server.messages) == ["alice@x.test", "vadmin@x.test"]


def test_a_stale_claim_is_failed_not_sent_twice(lab, go, smtp_server, monkeypatch):
    from notifications import tasks

    monkeypatch.setattr(tasks.deliver, "delay", lambda *a: None)
    go(emit, kind="job.failed", department_id=lab.vision.pk, users=[lab.alice.pk], data={"job_id": 1})
    delivery.expand_pending()
    [pk] = delivery.claim_due()  # this worker dies before sending
    assert delivery.claim_due() == []  # nobody else takes it
    later = timezone.now() + delivery.STALE_CLAIM + timedelta(seconds=1)
    assert delivery.sweep(now=later)["stale"] == 1
    d = Delivery.objects.get(pk=pk)
    assert d.status == "failed" and "never sent twice" in d.last_error and smtp_server.messages == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_deliverers_send_each_delivery_once(lab, client_for, receiver, monkeypatch):
    """Two workers sweep the same due deliveries at the same time, on PostgreSQL: FOR UPDATE SKIP LOCKED and
    the claim give each delivery to one of them."""
    from django.contrib.auth import get_user_model

    from notifications import tasks
    from notifications.models import Webhook
    from portal.models import Membership

    monkeypatch.setattr(tasks.deliver, "delay", lambda *a: None)
    receiver.secret = "s" * 20
    receiver.delay_s = 0.05
    users = []
    for i in range(12):
        u = get_user_model().objects.create_user(username=f"u{i}", email="")
        Membership.objects.create(user=u, department=lab.vision)
        Webhook.objects.create(department=lab.vision, user=u, url=receiver.url, secret=receiver.secret)
        users.append(u.pk)
    for i in range(3):
        emit(kind="job.failed", department_id=lab.vision.pk, users=users, data={"job_id": i})
    barrier = threading.Barrier(2)
    results, errors = [], []

    def worker():
        try:
            barrier.wait()
            results.append(delivery.sweep())
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    keys = [r["body"]["delivery"] for r in receiver.received]
    assert len(keys) == 36 and len(set(keys)) == 36  # 3 events x 12 recipients, none twice
    assert Delivery.objects.filter(status="sent").count() == 36
    assert sum(r.get("sent", 0) for r in results) == 36


def test_the_events_of_one_transaction_leave_in_one_message(lab, monkeypatch, django_capture_on_commit_callbacks):
    from notifications import tasks

    sent = []
    monkeypatch.setattr(tasks.deliver, "delay", lambda ids: sent.append(list(ids)))
    with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
        events = [emit(kind="job.failed", department_id=lab.vision.pk, users=[lab.alice.pk], data={"job_id": i})
                  for i in range(3)]
        with pytest.raises(RuntimeError), transaction.atomic():  # a savepoint rolled back: its event is gone
            emit(kind="job.failed", department_id=lab.vision.pk, users=[lab.alice.pk], data={"job_id": 99})
            raise RuntimeError
    assert len(callbacks) == 1
    callbacks[0]()
    assert sent[0][:3] == [e.pk for e in events] and Event.objects.count() == 3
    with django_capture_on_commit_callbacks() as later:  # the next transaction sends its own message
        emit(kind="job.failed", department_id=lab.vision.pk, users=[lab.alice.pk], data={"job_id": 4})
    assert len(later) == 1


def test_a_batch_of_events_is_expanded_in_the_same_queries_whatever_its_size(lab, monkeypatch):
    """A cycle reports hundreds of events in one transaction: expanding them reads recipients, preferences and
    webhooks once per batch, not once per event, and gives each event the deliveries it gave alone."""
    from django.test.utils import CaptureQueriesContext

    from notifications import tasks
    from notifications.models import Preference, Webhook

    monkeypatch.setattr(tasks.deliver, "delay", lambda *a: None)
    Preference.objects.create(user=lab.amy, kind="job.failed", email=False, webhook=True)
    hook = Webhook.objects.create(department=lab.vision, user=lab.amy, url="https://hooks.x.test/amy", secret="s" * 20)
    dept_hook = Webhook.objects.create(department=lab.nlp, url="https://hooks.x.test/nlp", secret="s" * 20,
                                       kinds=["job.succeeded"])

    def expand(n: int) -> tuple[int, set[str]]:
        events = []
        for _ in range(n):
            events += [
                emit(kind="job.failed", department_id=lab.vision.pk, users=[lab.alice.pk, lab.amy.pk], data={}),
                emit(kind="budget.low", department_id=lab.vision.pk, admins=True, data={}),
                emit(kind="job.succeeded", department_id=lab.nlp.pk, users=[lab.bob.pk], data={}),
                emit(kind="job.admitted", department_id=lab.nlp.pk, users=[lab.bob.pk], data={}),
            ]
        with CaptureQueriesContext(connection) as q:
            assert delivery.expand_pending() == 4 * n
        first = events[:4]
        keys = set(Delivery.objects.filter(event__in=first).values_list("key", flat=True))
        return len(q.captured_queries), {k.split(":", 1)[1] + f"@{[e.pk for e in first].index(int(k.split(':')[0]))}"
                                         for k in keys}

    small, wanted = expand(1)
    assert wanted == {f"email:u{lab.alice.pk}@0", f"webhook:w{hook.pk}@0",  # amy: webhook only, as she chose
                      f"email:u{lab.vadmin.pk}@1", f"webhook:w{dept_hook.pk}@2"}  # job.admitted: off by default
    large, again = expand(10)
    assert again == wanted and large == small
