"""Who wants what: preferences per kind and channel, unsubscribe links, webhooks, department settings."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core import signing
from django.db import transaction

from notifications.kinds import BY_NAME, KINDS
from notifications.models import DepartmentSettings, Preference, Webhook
from notifications.services import egress
from notifications.services.channels import new_secret
from portal.audit import audit
from portal.errors import ValidationFailed
from portal.tenancy import member, require_role

UNSUBSCRIBE_SALT = "notifications.unsubscribe"
CHANNELS = ("email", "webhook")


def defaults(kind: str) -> dict[str, bool]:
    k = BY_NAME[kind]
    return {"email": k.email, "webhook": k.webhook}


def effective(*, user_ids, kinds) -> dict[tuple[int, str], dict[str, bool]]:
    """Each user's channels for each of ``kinds``, keyed (user id, kind): their row, or the kind's defaults
    (one query for all users and kinds)."""
    kinds = set(kinds)
    rows = {(p.user_id, p.kind): {"email": p.email, "webhook": p.webhook}
            for p in Preference.objects.filter(user_id__in=list(user_ids), kind__in=kinds)}
    return {(uid, kind): rows.get((uid, kind), defaults(kind)) for uid in user_ids for kind in kinds}


def preferences_of(user) -> list[dict]:
    """The user's whole matrix: every kind, in the kinds' order, with the defaults beside the choice."""
    rows = {p.kind: p for p in Preference.objects.restrict(user).filter(user=user)}
    out = []
    for k in KINDS:
        p = rows.get(k.name)
        out.append({"kind": k.name, "title": k.title, "audience": k.audience,
                    "email": p.email if p else k.email, "webhook": p.webhook if p else k.webhook,
                    "default_email": k.email, "default_webhook": k.webhook})
    return out


def preferences_set(*, user, items: list[dict]) -> list[dict]:
    """Set channels per kind (``items``: validated ``{"kind", "email"?, "webhook"?}``); a channel not given
    keeps its current value."""
    current = {p["kind"]: p for p in preferences_of(user)}
    with transaction.atomic():
        for item in items:
            kind = item["kind"]
            values = {c: item.get(c, current[kind][c]) for c in CHANNELS}
            Preference.objects.update_or_create(user=user, kind=kind, defaults=values)
    return preferences_of(user)


# ------------------------------------------------------------------------------------------ unsubscribe


def unsubscribe_token(*, user_id: int, kind: str, channel: str = "email") -> str:
    return signing.dumps({"u": user_id, "k": kind, "c": channel}, salt=UNSUBSCRIBE_SALT, compress=True)


def read_unsubscribe_token(token: str) -> dict | None:
    """The token's user, kind and channel; None for a token this portal did not sign or that was altered."""
    try:
        value = signing.loads(token, salt=UNSUBSCRIBE_SALT)
    except signing.BadSignature:
        return None
    if not isinstance(value, dict) or value.get("k") not in BY_NAME or value.get("c") not in CHANNELS:
        return None
    if not isinstance(value.get("u"), int):
        return None
    return value


def unsubscribe(*, token: str) -> dict | None:
    """Turn the token's kind off on its channel for its user (no log-in: the signature is the proof)."""
    value = read_unsubscribe_token(token)
    if value is None:
        return None
    user = get_user_model().objects.filter(pk=value["u"]).first()
    if user is None:
        return None
    current = {p["kind"]: p for p in preferences_of(user)}[value["k"]]
    Preference.objects.update_or_create(user=user, kind=value["k"], defaults={
        **{c: current[c] for c in CHANNELS}, value["c"]: False})
    return {"user": user, "kind": BY_NAME[value["k"]], "channel": value["c"]}


# ------------------------------------------------------------------------------------------ webhooks


def webhook_create(*, user, url: str, scope: str = "user", kinds: list[str] | None = None) -> tuple[Webhook, str]:
    """A webhook for the user, or (``scope="department"``, department admins only) for their department.
    Returns it and its secret, which is shown this once."""
    m = member(user)
    if scope == "department":
        require_role(user, "change", "Only department admins can set the department's webhook.")
        taken = Webhook.objects.filter(department_id=m.department_id, user__isnull=True)
        owner = None
        kinds = kinds if kinds is not None else [k.name for k in KINDS if k.department_webhook]
    else:
        if kinds:
            raise ValidationFailed(fields={"kinds": [{"code": "invalid", "message":
                                   "A user's webhook follows the user's preferences; set those instead."}]})
        taken = Webhook.objects.filter(user=user)
        owner = user
        kinds = []
    _vet(url)
    if taken.exists():
        raise ValidationFailed(fields={"scope": [{"code": "exists", "message":
                               "There is already a webhook here; change or delete it, or rotate its secret."}]})
    secret = new_secret()
    with transaction.atomic():
        hook = Webhook.objects.create(department_id=m.department_id, user=owner, url=url, secret=secret,
                                      kinds=kinds, created_by=user)
        audit(actor=user, action="webhook.create", obj=hook, department=m.department,
              new={"url": url, "scope": hook.scope, "kinds": kinds})
    return hook, secret


def webhook_update(*, user, hook: Webhook, data: dict) -> Webhook:
    if hook.user_id is not None and data.get("kinds"):
        raise ValidationFailed(fields={"kinds": [{"code": "invalid", "message":
                               "A user's webhook follows the user's preferences; set those instead."}]})
    if "url" in data:
        _vet(data["url"])
    old = {"url": hook.url, "active": hook.active, "kinds": hook.kinds}
    for field in ("url", "active", "kinds"):
        if field in data:
            setattr(hook, field, data[field])
    with transaction.atomic():
        hook.save(update_fields=["url", "active", "kinds"])
        audit(actor=user, action="webhook.update", obj=hook, department=hook.department, old=old,
              new={"url": hook.url, "active": hook.active, "kinds": hook.kinds})
    return hook


def _vet(url: str) -> None:
    """A webhook reaches only public receivers or those the operator allowed (``egress``); checked again at
    every delivery."""
    try:
        egress.vet(url)
    except egress.Refused as exc:
        raise ValidationFailed(fields={"url": [{"code": exc.code, "message": exc.message}]})


def webhook_rotate(*, user, hook: Webhook) -> tuple[Webhook, str]:
    secret = new_secret()
    with transaction.atomic():
        Webhook.objects.filter(pk=hook.pk).update(secret=secret)
        hook.secret = secret
        audit(actor=user, action="webhook.rotate", obj=hook, department=hook.department)
    return hook, secret


def webhook_delete(*, user, hook: Webhook) -> None:
    with transaction.atomic():
        audit(actor=user, action="webhook.delete", obj=hook, department=hook.department,
              old={"url": hook.url, "scope": hook.scope})
        hook.delete()


# ------------------------------------------------------------------------------------------ department


def department_settings(*, user) -> DepartmentSettings:
    """The settings of the user's department (its admins only)."""
    m = require_role(user, "change", "Only department admins can change the department's notifications.")
    found, _ = DepartmentSettings.objects.get_or_create(department_id=m.department_id)
    return found


def department_settings_set(*, user, budget_low_threshold: int | None) -> DepartmentSettings:
    found = department_settings(user=user)
    old = {"budget_low_threshold": found.budget_low_threshold}
    with transaction.atomic():
        found.budget_low_threshold = budget_low_threshold
        found.save(update_fields=["budget_low_threshold"])
        audit(actor=user, action="notifications.settings", obj=found, department=found.department, old=old,
              new={"budget_low_threshold": budget_low_threshold})
    return found


def budget_low_threshold(*, department_id: int) -> int | None:
    """The department's explicit alert threshold in mcr, None when it uses the default."""
    return DepartmentSettings.objects.filter(department_id=department_id).values_list(
        "budget_low_threshold", flat=True).first()
