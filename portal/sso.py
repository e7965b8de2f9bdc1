"""Single sign-on with OpenID Connect (authorization code flow, mozilla-django-oidc).

Off unless ``OIDC_RP_CLIENT_ID`` is configured (portal/config.py); then the log-in page offers it beside the
local accounts, which keep working (the demo, break-glass admins), and so do API tokens: a user signed in
through SSO creates them from their session (``POST /api/v1/tokens``) like anyone else.

Who is who:

* an account is found by the provider's ``(iss, sub)`` pair only, stored as an ``ExternalIdentity``: the ID
  token's issuer must be ``OIDC_OP_ISSUER``, its audience this client, and the userinfo ``sub`` the ID
  token's. ``preferred_username`` (``OIDC_USERNAME_CLAIM``) is mutable at most providers, so it is never
  matched: it names a new account and is kept on the identity as the display name; a rename at the provider
  changes that name, never which account signs in;
* the first sign-in of a pair links it to an existing account only when the provider vouches for the e-mail
  an admin gave that account (the lab file's or the department page's ``email``, or an account of the
  earlier name-matched sign-ins): ``email_verified`` is true and exactly one account with that address has
  no local password and no identity yet. Otherwise a new account is created (no local password) under the
  claimed name, or, when that name is taken, the first free ``name-2``, ``name-3``...: a name never takes
  over an account (a break-glass ``admin`` stays local). Each link is audited (``sso_identity.link``);
* at the first sign-in, the user's groups (the ``OIDC_GROUPS_CLAIM`` claim) are looked up in the group map
  (the lab file's ``sso.groups``, then ``OIDC_GROUP_MAP``): the matching entry with the highest role gives the
  department, role and user tier, and the membership is created through the members service (audited). A
  user of no mapped group signs in but belongs to no department until an admin adds them. Later sign-ins
  change no membership: admins manage members in the portal from then on.

Sessions: ``SessionRefresh`` sends a signed-in browser back to the provider with ``prompt=none`` every
``OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS``; a provider that no longer signs the user in (disabled, logged out)
answers with an error and the portal's session ends. Logging out goes on to the provider's end-session
endpoint (``OIDC_OP_LOGOUT_ENDPOINT``) with the ID token as ``id_token_hint``.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, get_user_model
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.dispatch import Signal
from django.http import Http404
from django.shortcuts import redirect, resolve_url
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from mozilla_django_oidc import middleware
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
    OIDCLogoutView,
)

from portal.audit import audit
from portal.models import Department, ExternalIdentity, Membership, Role, SsoGroupMapping, UserTier

log = logging.getLogger(__name__)

ROLE_RANK = {Role.RESEARCHER: 0, Role.DEPARTMENT_ADMIN: 1, Role.PLATFORM_ADMIN: 2}

# A first sign-in whose groups map to a department asks for that membership (user, department, role,
# user_tier, comment). Adding a member is the lab's use case (lab.services.members, which also keeps the
# member's allowance in step), so the lab app answers it and this foundation imports no app.
membership_requested = Signal()


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


def _display_name(claims) -> str:
    return str(claims.get(settings.OIDC_USERNAME_CLAIM) or "").strip()[:150]


def _free_username(claims) -> str:
    """The claimed name made a valid Django user name, or the first ``name-N`` no account has (compared
    without case, so ``Zoe`` does not pass for ``zoe``)."""
    User = get_user_model()
    base = re.sub(r"[^\w.@+-]", "", _display_name(claims)) or "sso-user"
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        suffix = f"-{n}"
        name = base[:150 - len(suffix)] + suffix
    return name


def _is_true(value) -> bool:
    return value is True or str(value).lower() == "true"  # some providers send the string


class PortalOIDCBackend(OIDCAuthenticationBackend):
    def get_or_create_user(self, access_token, id_token, payload):
        issuer, subject = self._identity_of(payload)
        claims = self.get_userinfo(access_token, id_token, payload)
        if str(claims.get("sub") or "") != subject:  # OpenID Connect Core 5.3.2: else the claims are not theirs
            raise SuspiciousOperation("the userinfo sub is not the ID token's")
        for attempt in range(3):  # two first sign-ins at once: the loser of the unique constraint reads the winner
            try:
                with transaction.atomic():
                    return self._sign_in(issuer, subject, claims)
            except IntegrityError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _identity_of(self, payload) -> tuple[str, str]:
        """The ID token's (iss, sub), once its issuer and audience are this provider and this client (the
        library checks only the signature, the nonce and the expiry)."""
        issuer, subject = str(payload.get("iss") or ""), str(payload.get("sub") or "")
        if not settings.OIDC_OP_ISSUER or issuer != settings.OIDC_OP_ISSUER:
            raise SuspiciousOperation(f"ID token of issuer {issuer!r}, not OIDC_OP_ISSUER")
        aud = payload.get("aud")
        audiences = [aud] if isinstance(aud, str) else list(aud or [])
        if settings.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("ID token for another client")
        if len(audiences) > 1 and payload.get("azp") != settings.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("ID token authorized for another client")
        if not subject or len(subject) > 255 or "exp" not in payload:
            raise SuspiciousOperation("ID token without a usable sub or an expiry")
        return issuer, subject

    def _sign_in(self, issuer: str, subject: str, claims):
        identity = (ExternalIdentity.objects.select_for_update().select_related("user")
                    .filter(issuer=issuer, subject=subject).first())
        if identity is None:
            user, how = self._account_for_new_identity(claims)
            identity = ExternalIdentity.objects.create(user=user, issuer=issuer, subject=subject)
            audit(actor=None, action="sso_identity.link", obj=identity,
                  department=getattr(Membership.objects.filter(user=user).first(), "department", None),
                  new={"user": user.get_username(), "issuer": issuer, "subject": subject}, comment=how)
        user = identity.user
        identity.preferred_username = _display_name(claims)
        identity.last_login_at = timezone.now()
        identity.save(update_fields=["preferred_username", "last_login_at"])
        email = claims.get("email") or ""
        if email and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        if not Membership.objects.filter(user=user).exists():
            self._first_membership(user, claims)
        return user

    def _account_for_new_identity(self, claims):
        """The account a pair signs in as the first time, and how it was chosen (for the audit entry)."""
        User = get_user_model()
        email = str(claims.get("email") or "").strip()
        if email and _is_true(claims.get("email_verified")):
            # locked, then asked again: another identity may have been linked to it meanwhile
            candidates = [u for u in User.objects.select_for_update().order_by("pk")
                          .filter(email__iexact=email, password__startswith=UNUSABLE_PASSWORD_PREFIX)
                          if not ExternalIdentity.objects.filter(user=u).exists()]
            if len(candidates) == 1:
                return candidates[0], f"single sign-on, first login: the provider verified {email}"
        user = User(username=_free_username(claims), email=email)
        user.set_unusable_password()
        user.save()
        return user, f"single sign-on, first login: a new account ({_display_name(claims)!r} at the provider)"

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
        membership_requested.send(
            sender=type(self), user=user, department=dept, role=target["role"], user_tier=target["tier"],
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


class SessionRefresh(middleware.SessionRefresh):
    """mozilla-django-oidc's SessionRefresh, inert while single sign-on is off. After
    ``OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS`` a GET of a session that signed in through the provider is sent back
    to it with ``prompt=none``: a user it still signs in returns at once, to the page they asked for; one it
    refuses (disabled, logged out there) comes back with an error, and the callback ends the session. Sessions
    of local accounts and API tokens are not concerned."""

    def process_request(self, request):
        if not settings.SSO_ENABLED:
            return None
        return super().process_request(request)

    @cached_property
    def exempt_urls(self):
        # the library's list names an ``oidc_logout`` route; the portal's log-out is ``logout`` (POST only)
        return {u if u.startswith("/") else reverse(u) for u in
                [*self.OIDC_EXEMPT_URLS, "oidc_authentication_init", "oidc_authentication_callback", "logout",
                 "login"] if isinstance(u, str)}


def provider_logout_url(request) -> str:
    """Where logging out sends the browser (``OIDC_OP_LOGOUT_URL_METHOD``, called before the session ends):
    for a session that signed in through the provider, its end-session endpoint with the ID token as
    ``id_token_hint``, which comes back to the log-in page; otherwise the log-in page."""
    local = resolve_url(settings.LOGOUT_REDIRECT_URL)
    id_token = request.session.get("oidc_id_token")
    backend = request.session.get(BACKEND_SESSION_KEY, "")
    if not (settings.SSO_ENABLED and settings.OIDC_OP_LOGOUT_ENDPOINT and id_token
            and backend == "portal.sso.PortalOIDCBackend"):
        return local
    params = urlencode({"id_token_hint": id_token, "client_id": settings.OIDC_RP_CLIENT_ID,
                        "post_logout_redirect_uri": request.build_absolute_uri(local)})
    endpoint = settings.OIDC_OP_LOGOUT_ENDPOINT
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{params}"


logout = OIDCLogoutView.as_view()  # POST; the URL of provider_logout_url, then the session ends


def context(request) -> dict:
    return {"sso_enabled": settings.SSO_ENABLED, "sso_label": settings.OIDC_LOGIN_LABEL}
