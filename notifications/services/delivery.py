"""Delivering the outbox: expand an event into deliveries, claim due deliveries, send, retry with back-off.

Guarantees (docs/notifications.md, "Delivery guarantees"):

* **At most once per channel and recipient.** An event's deliveries are created with a unique key (event,
  channel, recipient), so two workers expanding one event create each delivery once. A delivery is *claimed*
  before it is sent: ``pending -> sending`` in a short transaction of its own, the rows picked with
  ``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (on SQLite, whose writers take the database lock at
  ``BEGIN IMMEDIATE``, the transaction itself is the lock), so only one worker ever sends a given delivery. A
  worker that dies between the claim and the outcome leaves the row ``sending``; the sweep marks it failed
  after ``STALE_CLAIM`` instead of sending it a second time.
* **Retries with exponential back-off.** A send that may succeed later (timeout, 5xx, 429, SMTP down) goes
  back to ``pending`` with ``next_attempt_at = now + NOTIFY_RETRY_BASE_S * 2^(attempt-1)``; after
  ``NOTIFY_MAX_ATTEMPTS`` attempts, or at once for a permanent error, it is ``failed`` with the last error,
  visible to its recipient on the notifications page and in the API.
* **Nothing lost with the broker.** The sweep expands every event no message announced and sends every
  delivery that is due, so a message lost with the broker only delays a notification.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from notifications.kinds import BY_NAME
from notifications.models import Channel, Delivery, Event, Webhook
from notifications.services import channels, preferences
from notifications.services.render import message_for
from portal.models import Membership, Role

log = logging.getLogger(__name__)

STALE_CLAIM = timedelta(minutes=10)
BATCH = 50
CLEANUP_BATCH = 1000  # events deleted per statement by the retention


# ------------------------------------------------------------------------------------------ expand


def expand_pending(*, event_ids: list[int] | None = None, limit: int = 200) -> int:
    """Create the deliveries of events not expanded yet (``event_ids``: only those). Returns how many events
    were expanded. Each event is locked (skipping those another worker holds) while it is expanded."""
    done = 0
    while True:
        with transaction.atomic():
            qs = Event.objects.filter(expanded_at__isnull=True).order_by("pk")
            if event_ids is not None:
                qs = qs.filter(pk__in=event_ids)
            events = list(qs.select_for_update(skip_locked=True)[:BATCH])
            if events:
                _expand(events)
                Event.objects.filter(pk__in=[e.pk for e in events]).update(expanded_at=timezone.now())
        done += len(events)
        if len(events) < BATCH or done >= limit:
            return done


class _Audience:
    """Who may receive a batch of events, read in a fixed number of queries whatever the batch's size (a cycle
    reports hundreds of events at once): the departments' admins, the active recipients, their preferences
    for the batch's kinds, the webhooks of the recipients and of the departments."""

    def __init__(self, events: list[Event]):
        departments = {e.department_id for e in events}
        self.admins: dict[int, set[int]] = {}
        admin_departments = {e.department_id for e in events if e.to_admins}
        for department_id, user_id in Membership.objects.filter(
                department_id__in=admin_departments, role=Role.DEPARTMENT_ADMIN).values_list("department_id",
                                                                                            "user_id"):
            self.admins.setdefault(department_id, set()).add(user_id)
        named = set().union(*(self.admins.values()), *(e.user_ids for e in events))
        self.users = {u.pk: u for u in get_user_model().objects.filter(pk__in=named, is_active=True)}
        self.wants = preferences.effective(user_ids=list(self.users), kinds={e.kind for e in events})
        self.hooks = list(Webhook.objects.filter(active=True).filter(
            Q(user_id__in=list(self.users)) | Q(user__isnull=True, department_id__in=departments)))
        self.user_hooks = {h.user_id: h for h in self.hooks if h.user_id}

    def recipients(self, event: Event) -> list[int]:
        ids = set(event.user_ids) | (self.admins.get(event.department_id, set()) if event.to_admins else set())
        return [uid for uid in sorted(ids) if uid in self.users]


def _expand(events: list[Event]) -> None:
    audience = _Audience(events)
    rows = [row for event in events for row in _deliveries(event, audience)]
    if rows:
        Delivery.objects.bulk_create(rows, ignore_conflicts=True)  # the unique key: once per recipient


def _deliveries(event: Event, audience: _Audience) -> list[Delivery]:
    """One event's deliveries: per recipient the channels they want (a webhook only if they have one), and
    the department's webhook when it takes the event's kind."""
    rows = []

    def add(channel: str, recipient: str, user_id=None, webhook=None):
        rows.append(Delivery(event=event, department_id=event.department_id, channel=channel, user_id=user_id,
                             webhook=webhook, key=f"{event.pk}:{channel}:{recipient}",
                             next_attempt_at=event.created_at))

    kind = BY_NAME.get(event.kind)
    if kind is not None and kind.essential:  # e-mail only, whatever the preferences
        for uid in audience.recipients(event):
            if audience.users[uid].email:
                add(Channel.EMAIL, f"u{uid}", user_id=uid)
        return rows
    for uid in audience.recipients(event):
        user, wanted, hook = audience.users[uid], audience.wants[uid, event.kind], audience.user_hooks.get(uid)
        if wanted["email"] and user.email:
            add(Channel.EMAIL, f"u{uid}", user_id=uid)
        if wanted["webhook"] and hook is not None:
            add(Channel.WEBHOOK, f"w{hook.pk}", user_id=uid, webhook=hook)
    for hook in audience.hooks:
        if hook.user_id is None and hook.department_id == event.department_id and event.kind in (hook.kinds or []):
            add(Channel.WEBHOOK, f"w{hook.pk}", webhook=hook)
    return rows


# ------------------------------------------------------------------------------------------ send


def claim_due(*, now: datetime | None = None, event_ids: list[int] | None = None, limit: int = BATCH) -> list[int]:
    """Claim up to ``limit`` due deliveries for this worker: pending -> sending, committed before any send."""
    now = now or timezone.now()
    with transaction.atomic():
        qs = Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=now)
        if event_ids is not None:
            qs = qs.filter(event_id__in=event_ids)
        ids = list(qs.order_by("next_attempt_at", "pk").select_for_update(skip_locked=True)
                   .values_list("pk", flat=True)[:limit])
        if ids:
            Delivery.objects.filter(pk__in=ids, status=Delivery.Status.PENDING).update(
                status=Delivery.Status.SENDING, attempts=F("attempts") + 1, claimed_at=now)
    return ids


def send_claimed(delivery_id: int, *, now: datetime | None = None) -> str:
    """Send one delivery this worker claimed and record the outcome. Returns its new status."""
    d = Delivery.objects.select_related("event", "event__department", "user", "webhook").get(pk=delivery_id)
    if d.status != Delivery.Status.SENDING:
        return d.status
    try:
        _send(d)
    except channels.SendError as exc:
        return _failed(d, str(exc), retry=exc.retry, now=now)
    except Exception as exc:  # noqa: BLE001 - a bug in one delivery must not stop the others
        log.exception("delivery %s failed unexpectedly", d.key)
        return _failed(d, f"{type(exc).__name__}: {exc}", retry=True, now=now)
    Delivery.objects.filter(pk=d.pk).update(status=Delivery.Status.SENT, sent_at=timezone.now(), last_error="")
    return Delivery.Status.SENT


def _failed(d: Delivery, error: str, *, retry: bool, now: datetime | None) -> str:
    now = now or timezone.now()
    if retry and d.attempts < settings.NOTIFY_MAX_ATTEMPTS:
        delay = settings.NOTIFY_RETRY_BASE_S * 2 ** (d.attempts - 1)
        Delivery.objects.filter(pk=d.pk).update(status=Delivery.Status.PENDING, last_error=error[:500],
                                                next_attempt_at=now + timedelta(seconds=delay))
        log.info("delivery %s attempt %d failed (%s); next in %g s", d.key, d.attempts, error, delay)
        return Delivery.Status.PENDING
    Delivery.objects.filter(pk=d.pk).update(status=Delivery.Status.FAILED, last_error=error[:500])
    log.warning("delivery %s failed for good after %d attempt(s): %s", d.key, d.attempts, error)
    return Delivery.Status.FAILED


def _account_link(user) -> dict:
    """A set-password link's parts, made now: Django's password-reset token, which a new password or a
    sign-in spends and PASSWORD_RESET_TIMEOUT expires. The event never holds it."""
    return {"uidb64": urlsafe_base64_encode(force_bytes(user.pk)), "token": default_token_generator.make_token(user),
            "valid_days": max(1, settings.PASSWORD_RESET_TIMEOUT // 86400)}


def _send_essential(d: Delivery) -> None:
    msg = message_for(d.event, _account_link(d.user))
    channels.send_email(to=d.user.email, subject=f"[GPU portal] {msg.subject}", body=f"{msg.body}\n\n{msg.url}\n",
                        headers={"X-Portal-Event": d.event.kind, "X-Portal-Delivery": d.key})


def _send(d: Delivery) -> None:
    event = d.event
    if d.channel == Channel.EMAIL:
        if d.user is None or not d.user.email:
            raise channels.SendError("the recipient has no e-mail address", retry=False)
        if event.kind in BY_NAME and BY_NAME[event.kind].essential:
            _send_essential(d)
            return
    msg = message_for(event)
    if d.channel == Channel.EMAIL:
        token = preferences.unsubscribe_token(user_id=d.user_id, kind=event.kind)
        unsubscribe = f"{settings.PORTAL_URL}/notifications/unsubscribe/{token}/"
        title = BY_NAME[event.kind].title if event.kind in BY_NAME else event.kind
        body = (f"{msg.body}\n\n{msg.url}\n\n-- \nYou receive this because \"{title}\" e-mails are on for you. "
                f"Stop them: {unsubscribe}\nAll your notification settings: {settings.PORTAL_URL}/notifications/\n")
        channels.send_email(to=d.user.email, subject=f"[GPU portal] {msg.subject}", body=body, headers={
            "List-Unsubscribe": f"<{unsubscribe}>", "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
            "X-Portal-Event": event.kind, "X-Portal-Delivery": d.key})
        return
    hook = d.webhook
    if hook is None or not hook.active:
        raise channels.SendError("the webhook was deleted or disabled", retry=False)
    if not hook.secret:
        raise channels.SendError("the webhook's secret cannot be decrypted with FIELD_ENCRYPTION_KEYS: add the "
                                 "key it was stored with, or rotate the secret", retry=False)
    payload = {
        # Slack and Mattermost incoming webhooks show "text"; other receivers read the structured fields.
        "text": f"*{msg.subject}*\n{msg.body}\n<{msg.url}|Open in the portal>",
        "event": event.kind, "event_id": event.pk, "delivery": d.key,
        "department": event.department.slug, "created_at": event.created_at.isoformat(),
        "subject": msg.subject, "body": msg.body, "url": msg.url, "data": event.data,
    }
    channels.post_webhook(url=hook.url, secret=hook.secret, payload=payload,
                          headers={"X-Portal-Event": event.kind, "X-Portal-Delivery": d.key})


# ------------------------------------------------------------------------------------------ entry points


def deliver(*, event_ids: list[int] | None = None, now: datetime | None = None) -> dict[str, int]:
    """Expand ``event_ids`` (or every pending event) and send what is due of them (or of everything)."""
    counts: dict[str, int] = {"expanded": expand_pending(event_ids=event_ids)}
    while True:
        ids = claim_due(now=now, event_ids=event_ids)
        for pk in ids:
            status = send_claimed(pk, now=now)
            counts[status] = counts.get(status, 0) + 1
        if len(ids) < BATCH:
            return counts


def sweep(*, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
    """The periodic pass: give up on stale claims, expand every pending event, send every due delivery (at
    most ``limit`` per run; the next run goes on)."""
    now = now or timezone.now()
    stale = Delivery.objects.filter(status=Delivery.Status.SENDING, claimed_at__lt=now - STALE_CLAIM).update(
        status=Delivery.Status.FAILED,
        last_error="the worker stopped while sending; not sent again, so it is never sent twice")
    counts: dict[str, int] = {"stale": stale, "expanded": expand_pending(limit=limit)}
    sent = 0
    while sent < limit:
        ids = claim_due(now=now, limit=min(BATCH, limit - sent))
        if not ids:
            break
        for pk in ids:
            status = send_claimed(pk, now=now)
            counts[status] = counts.get(status, 0) + 1
        sent += len(ids)
    return counts


def cleanup(*, now: datetime | None = None) -> int:
    """Delete the events reported more than NOTIFY_RETENTION_DAYS ago, with their deliveries, once nothing is
    left to do for them: expanded, and every delivery sent or failed (one still pending or being sent is
    kept, whatever its age, so a retry is never lost). Returns how many events were deleted.

    Most events are never sent to anyone (kinds that are off by default, such as a job starting); without
    this the outbox would grow by several rows per job for ever. An event's ``dedupe_key`` goes with it, which
    is why the retention is at least a month: the once-per-period events (an allowance used up) are then
    never reported twice in one period."""
    horizon = (now or timezone.now()) - timedelta(days=settings.NOTIFY_RETENTION_DAYS)
    unfinished = Delivery.objects.filter(event=OuterRef("pk")).exclude(
        status__in=(Delivery.Status.SENT, Delivery.Status.FAILED))
    old = Event.objects.filter(created_at__lt=horizon, expanded_at__isnull=False).exclude(Exists(unfinished))
    deleted = 0
    while True:  # in batches: a first run after a long time must not hold one huge delete
        ids = list(old.values_list("pk", flat=True)[:CLEANUP_BATCH])
        if not ids:
            return deleted
        Event.objects.filter(pk__in=ids).delete()
        deleted += len(ids)
