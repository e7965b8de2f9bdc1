"""Bearer-token authentication for notebooks and scripts: ``Authorization: Bearer gpp_<id>_<secret>``."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from portal.lockout import token_attempt_failed
from portal.models import ApiToken


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if not parts:  # only whitespace (e.g. a lone no-break space): as malformed as a missing token
            raise exceptions.AuthenticationFailed("Malformed Authorization header: use 'Bearer <token>'.")
        if parts[0] not in (self.keyword, "Token"):
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: use 'Bearer <token>'.")
        # Verify first: a right token is never refused because of someone else's failures (its key id is not
        # secret, and addresses are shared). Wrong ones are counted per key id and per client address; over
        # the limit they are answered 429 instead of 401 (portal.lockout). Guessing a secret of 256 bits
        # needs no lock; the count is there to audit and to slow scanners.
        token = ApiToken.authenticate(parts[1])
        if token is None or not token.user.is_active:
            key_id = parts[1].split("_")[1][:64] if parts[1].count("_") >= 2 else parts[1][:64]
            token_attempt_failed(request, key_id)
            raise exceptions.AuthenticationFailed(ApiToken.refusal(parts[1]))
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=5):
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)  # throttled bookkeeping write
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword


try:  # document the scheme in the OpenAPI schema
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class BearerTokenScheme(OpenApiAuthenticationExtension):
        target_class = "portal.auth.BearerTokenAuthentication"
        name = "bearerToken"

        def get_security_definition(self, auto_schema):
            return {"type": "http", "scheme": "bearer", "bearerFormat": "gpp_<id>_<secret>",
                    "description": "API token from POST /api/v1/tokens (shown once)."}
except ImportError:  # pragma: no cover
    pass
