"""Members of a department: add (creating the account if it is new), change role and user tier, remove.

Who may do what (the caller has already passed the tenancy gate for the department, ``change``):

* platform admins manage every department's members, platform admins included;
* a department admin manages their own department's researchers and department admins, but never grants,
  changes or removes the platform-admin role, and never demotes or removes themselves (a department must
  not lose its last admin by a slip; another admin or a platform admin does it).

A new account gets an unusable password: it signs in through single sign-on (linked by its ``email`` when
the provider verifies that address, never by the user name: portal/sso.py), or, without single sign-on, it is
invited to choose one by e-mail (the pages and the API: lab/services/invitations.py), or the lab file's
``password_env`` gives it one. A user belongs to one department at a time.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from lab.services import invitations
from portal.audit import audit
from portal.errors import Conflict, Forbidden, ValidationFailed
from portal.models import Department, Membership, Role, UserTier
from portal.tenancy import membership_of
from quotas.models import Allowance, UserLimit

USERNAME_MAX = 150


def _values(m: Membership) -> dict:
    return {"user": m.user.get_username(), "department": m.department.slug, "role": m.role,
            "user_tier": m.user_tier}


def _check_choices(role: str | None, user_tier: str | None) -> None:
    errors = {}
    if role is not None and role not in Role.values:
        errors["role"] = [{"code": "invalid_choice", "message": f"Choose one of {', '.join(Role.values)}."}]
    if user_tier is not None and user_tier not in UserTier.values:
        errors["user_tier"] = [{"code": "invalid_choice",
                                "message": f"Choose one of {', '.join(UserTier.values)}."}]
    if errors:
        raise ValidationFailed(fields=errors)


def _exists(username: str) -> bool:
    return get_user_model().objects.filter(username=username).exists()


def _may_grant(actor, role: str) -> None:
    m = membership_of(actor) if actor is not None else None
    if role == Role.PLATFORM_ADMIN and actor is not None and not (m and m.is_platform_admin):
        raise Forbidden("Only platform admins can grant or change the platform-admin role.")


def _admin_site_access(user, role: str | None) -> None:
    """Platform admins may open the Django admin (read-only lookups, break-glass user accounts); the access
    follows the role both ways, so a demoted or removed platform admin loses it with the role."""
    allowed = role == Role.PLATFORM_ADMIN
    if (user.is_staff, user.is_superuser) != (allowed, allowed):
        user.is_staff = user.is_superuser = allowed
        user.save(update_fields=["is_staff", "is_superuser"])


def member_add(*, department: Department, actor, username: str, role: str = Role.RESEARCHER,
               user_tier: str = UserTier.STANDARD, email: str = "", comment: str = "",
               invite: bool = False) -> Membership:
    """``invite``: a new account is sent an invitation to choose its password (lab/services/invitations.py),
    so without single sign-on it needs an e-mail address. An existing account is never invited."""
    _check_choices(role, user_tier)
    _may_grant(actor, role)
    username = username.strip()
    errors = {}
    if not username or len(username) > USERNAME_MAX:
        errors["username"] = [{"code": "invalid", "message": "Give a user name (up to 150 characters)."}]
    if email:
        try:
            validate_email(email)
        except Exception:  # noqa: BLE001 - Django's ValidationError, reported as a field error
            errors["email"] = [{"code": "invalid", "message": "Enter a valid e-mail address."}]
    if errors:
        raise ValidationFailed(fields=errors)
    if department.is_archived:
        raise Conflict(f"{department.slug} is archived: it takes no new members.")
    if invite and not email and invitations.needed() and not _exists(username):
        raise invitations.email_required()
    User = get_user_model()
    with transaction.atomic():
        user = User.objects.filter(username=username).first()
        created = user is None
        if created:
            user = User(username=username, email=email)
            user.set_unusable_password()
            user.save()
        existing = Membership.objects.select_related("department").filter(user=user).first()
        if existing is not None:
            where = "this department" if existing.department_id == department.pk else "another department"
            raise ValidationFailed(fields={"username": [{"code": "member_elsewhere" if where != "this department"
                                                         else "unique",
                                                         "message": f"{username} is a member of {where} already: "
                                                                    "a user belongs to one department."}]})
        try:
            with transaction.atomic():
                m = Membership.objects.create(user=user, department=department, role=role, user_tier=user_tier)
        except IntegrityError:
            raise Conflict(f"{username} was added at the same moment by someone else.")
        if role == Role.PLATFORM_ADMIN:
            _admin_site_access(user, role)
        audit(actor=actor, action="membership.add", obj=m, department=department, new=_values(m),
              comment=(comment + (" (new account)" if created else "")).strip())
        m.invited = invite and created and invitations.needed()
        if m.invited:
            invitations.invite(membership=m, actor=actor)
    return m


def add_on_first_sign_in(*, sender, user, department: Department, role: str, user_tier: str, comment: str,
                         **kwargs) -> Membership:
    """The membership a first single sign-on asks for (``portal.sso.membership_requested``)."""
    return member_add(department=department, actor=None, username=user.username, role=role, user_tier=user_tier,
                      comment=comment)


def member_invite_again(*, membership: Membership, actor) -> None:
    """Send the invitation to choose a password again (the last one expired, or went astray)."""
    if membership.role == Role.PLATFORM_ADMIN:
        _may_grant(actor, Role.PLATFORM_ADMIN)
    invitations.invite(membership=membership, actor=actor, again=True)


def member_change(*, membership: Membership, actor, role: str | None = None, user_tier: str | None = None,
                  comment: str = "") -> Membership:
    _check_choices(role, user_tier)
    if role is not None and (role == Role.PLATFORM_ADMIN or membership.role == Role.PLATFORM_ADMIN):
        if role != membership.role:
            _may_grant(actor, Role.PLATFORM_ADMIN)
    if membership.role == Role.PLATFORM_ADMIN and actor is not None:
        _may_grant(actor, Role.PLATFORM_ADMIN)
    if actor is not None and membership.user_id == actor.pk and role not in (None, membership.role):
        am = membership_of(actor)
        if not (am and am.is_platform_admin):
            raise Forbidden("You cannot change your own role; ask another admin.")
    with transaction.atomic():
        m = Membership.objects.select_for_update().select_related("user", "department").get(pk=membership.pk)
        old = _values(m)
        if role is not None:
            m.role = role
        if user_tier is not None:
            m.user_tier = user_tier
        if _values(m) != old:
            m.save(update_fields=["role", "user_tier"])
            if m.role != old["role"]:
                _admin_site_access(m.user, m.role)
            audit(actor=actor, action="membership.change", obj=m, department=m.department, old=old,
                  new=_values(m), comment=comment)
    return m


def member_remove(*, membership: Membership, actor, comment: str = "") -> None:
    """End a membership. The account stays (its jobs and ledger entries refer to it); its allowance in the
    department's wallet and its own per-user limit go. Its jobs run on; the user can submit no more."""
    if membership.role == Role.PLATFORM_ADMIN:
        _may_grant(actor, Role.PLATFORM_ADMIN)
    if actor is not None and membership.user_id == actor.pk:
        raise Forbidden("You cannot remove yourself; ask another admin.")
    with transaction.atomic():
        m = Membership.objects.select_for_update().select_related("user", "department").get(pk=membership.pk)
        old = _values(m)
        allowance = Allowance.objects.filter(user=m.user, wallet__department=m.department).first()
        if allowance is not None:
            old["allowance"] = {"limit": allowance.limit, "period": allowance.period}
            allowance.delete()
        limit = UserLimit.objects.filter(user=m.user, department=m.department).first()
        if limit is not None:  # a member's own limit is the department's business: it goes with the membership
            old["user_limit"] = {"max_gpus": limit.max_gpus, "max_queued": limit.max_queued}
            limit.delete()
        audit(actor=actor, action="membership.remove", obj=m, department=m.department, old=old, comment=comment)
        m.delete()
        _admin_site_access(m.user, None)
