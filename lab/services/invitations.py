"""Invitations: how a member added without single sign-on gets a password of their own.

Adding a new account with an e-mail address on the Lab pages (or the API) invites it: an ``account.invited``
event is written in the same transaction, and after commit the notifications outbox e-mails a set-password
link (docs/notifications.md). The link carries Django's password-reset token, made when the e-mail is sent
and never stored: setting a password (or signing in) spends it, and PASSWORD_RESET_TIMEOUT expires it. An
admin may send it again while the member has neither signed in nor a password. With single sign-on on nobody is invited:
members sign in with the institution's account, linked by their e-mail (portal/sso.py).
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from notifications.services import emit
from portal.audit import audit
from portal.errors import Conflict, ValidationFailed
from portal.models import AuditEntry, Department, Membership

INVITE_ACTION = "membership.invite"


def needed() -> bool:
    """Whether new members need an invitation to sign in at all."""
    return not settings.SSO_ENABLED


def email_required() -> ValidationFailed:
    return ValidationFailed(fields={"email": [{
        "code": "required", "message": "Give the new member's e-mail address: without single sign-on, the "
                                       "invitation to choose a password goes there."}]})


def invite(*, membership: Membership, actor, again: bool = False) -> None:
    """Write the invitation of ``membership``'s user (in the caller's transaction: e-mailed after commit)."""
    user, dept = membership.user, membership.department
    if not needed():
        raise Conflict("Single sign-on is on: members sign in with it, no invitation is needed.")
    if user.last_login is not None:
        raise Conflict(f"{user.get_username()} has signed in already: they need no invitation.")
    if user.has_usable_password():
        raise Conflict(f"{user.get_username()} has a password already: they sign in with it.")
    if not user.email:
        raise email_required()
    with transaction.atomic():
        emit(kind="account.invited", department_id=dept.pk, users=[user.pk], data={
            "username": user.get_username(), "department": dept.slug, "department_name": dept.name,
            "role": membership.get_role_display(), "actor": actor.get_username() if actor else "The platform"})
        audit(actor=actor, action=INVITE_ACTION, obj=membership, department=dept,
              new={"user": user.get_username(), "email": user.email}, comment="sent again" if again else "")


def invited_at(department: Department) -> dict[str, object]:
    """{user name: when the last invitation was sent} for the department's members (one query)."""
    rows = AuditEntry.objects.filter(action=INVITE_ACTION, department=department).order_by("at")
    return {entry.new.get("user"): entry.at for entry in rows if entry.new}
