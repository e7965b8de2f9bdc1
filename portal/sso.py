"""Single sign-on with OpenID Connect (authorization code flow, mozilla-django-oidc).

Off unless ``OIDC_RP_CLIENT_ID`` is configured (portal/config.py); then the log-in page offers it beside the
local accounts, which keep working (the demo, break-glass admins), and so do API tokens: a user signed in
through SSO creates them from their session (``POST /api/v1/tokens``) like anyone else.

Who is who:

* the user name is the ``OIDC_USERNAME_CLAIM`` claim (``preferred_username``); an SSO user is an account
  without a local password. A local account with a password of the same name is never taken over: that
  sign-in is refused (a break-glass ``admin`` must not become whoever the provider calls ``admin``);
* at the first sign-in, the user's groups (the ``OIDC_GROUPS_CLAIM`` claim) are looked up in the group map
  (the lab file's ``sso.groups``, then ``OIDC_GROUP_MAP``): the matching entry with the highest role gives the
  department, role and user tier, and the membership is created through the members service (audited). A
  user of no mapped group signs in but belongs to no department until an admin adds them. Later sign-ins
  change no membership: admins manage members in the portal from then on.
"""

from __future__ import annotations

import logging

import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.http import Http404
from django.shortcuts import redirect
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from lab.services import members
from portal.models import Department, Membership, Role, SsoGroupMapping, UserTier

log = logging.getLogger(__name__)

ROLE_RANK = {Role.RESEARCHER: 0, Role.DEPARTMENT_ADMIN: 1, Role.PLATFORM_ADMIN: 2}


def group_mappings() -> list[dict]:
    """Every group mapping: the lab file's (stored), then the environment's."""
    rows = [{"group": m.group, "department": m.department.slug, "role": m.role, "tier": m.user_tier}
            for m in SsoGroupMapping.objects.select_related("department")]
    return rows + [dict(m) for m in settings.OIDC_GROUP_MAP]


def membership_for(groups) -> dict | None:
    """The membership the group map gives a user of ``groups``: the matching entry with the highest role
    (the first one on a tie), or None."""
    if isinstance(groups, str):
        groups = [groups]
    groups = set(groups or [])
    best = None
    for m in group_mappings():
        if m["group"] not in groups:
            continue
        role = m.get("role", Role.RESEARCHER)
        if best is None or ROLE_RANK.get(role, 0) > ROLE_RANK.get(best["role"], 0):
            best = {"department": m["department"], "role": role, "tier": m.get("tier", UserTier.STANDARD)}
    return best


class PortalOIDCBackend(OIDCAuthenticationBackend):
    def _username(self, claims) -> str:
        return str(claims.get(settings.OIDC_USERNAME_CLAIM) or "").strip()[:150]

    def verify_claims(self, claims) -> bool:
        username = self._username(claims)
        if not username:
            log.warning("single sign-on refused: no %s claim", settings.OIDC_USERNAME_CLAIM)
            return False
        local = self.UserModel.objects.filter(username=username).first()
        if local is not None and local.has_usable_password():
            log.warning("single sign-on refused for %s: a local account with a password has that name", username)
            return False
        return True

    def filter_users_by_claims(self, claims):
        return self.UserModel.objects.filter(username=self._username(claims))

    def create_user(self, claims):
        user = self.UserModel(username=self._username(claims), email=claims.get("email") or "")
        user.set_unusable_password()
        user.save()
        self._first_membership(user, claims)
        return user

    def update_user(self, user, claims):
        email = claims.get("email") or ""
        if email and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        if not Membership.objects.filter(user=user).exists():
            self._first_membership(user, claims)
        return user

    def _first_membership(self, user, claims) -> None:
        groups = claims.get(settings.OIDC_GROUPS_CLAIM) or []
        target = membership_for(groups)
        if target is None:
            log.info("single sign-on: %s is in no mapped group (%s)", user.username, groups)
            return
        dept = Department.objects.filter(slug=target["department"], archived_at__isnull=True).first()
        if dept is None:
            log.warning("single sign-on: %s maps to %s, which does not exist or is archived", user.username,
                        target["department"])
            return
        members.member_add(department=dept, actor=None, username=user.username, role=target["role"],
                           user_tier=target["tier"],
                           comment=f"single sign-on, first login (groups: {', '.join(sorted(map(str, groups)))})")


def _enabled():
    if not settings.SSO_ENABLED:
        raise Http404("Single sign-on is not configured.")


def start(request):
    """Send the browser to the identity provider (404 when single sign-on is off)."""
    _enabled()
    return OIDCAuthenticationRequestView.as_view()(request)


def callback(request):
    """The identity provider sends the browser back here with a code; it is exchanged and checked. A
    provider that refuses the exchange (a wrong client secret, an expired code), cannot be reached, or sends an
    ID token whose signature its published keys do not verify is a
    failed sign-in with a message on the log-in page, not a server error."""
    _enabled()
    try:
        return OIDCAuthenticationCallbackView.as_view()(request)
    except (requests.RequestException, SuspiciousOperation) as exc:  # refused, unreachable, or a bad signature
        log.warning("single sign-on failed: %s", exc)
        return redirect(settings.LOGIN_REDIRECT_URL_FAILURE)


def context(request) -> dict:
    return {"sso_enabled": settings.SSO_ENABLED, "sso_label": settings.OIDC_LOGIN_LABEL}
