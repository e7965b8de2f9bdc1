"""Choosing a password from an invitation's link (lab/services/invitations.py).

Django's own password-reset confirmation, with the portal's words: the link's token is Django's
``default_token_generator``'s, so it works once (a new password or a sign-in changes what it was made from)
and expires after PASSWORD_RESET_TIMEOUT. The password must pass AUTH_PASSWORD_VALIDATORS; then the member is
signed in. A used, expired, altered or foreign link is refused (400) and changes nothing.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views


class SetPasswordView(auth_views.PasswordResetConfirmView):
    template_name = "portal/set_password.html"
    reset_url_token = "choose"  # the token leaves the address bar (and Referer headers) after the first visit
    post_reset_login = True
    post_reset_login_backend = "django.contrib.auth.backends.ModelBackend"
    success_url = "/"

    def get_user(self, uidb64):
        user = super().get_user(uidb64)
        return user if user is not None and user.is_active else None  # a deactivated account stays out

    def form_valid(self, form):
        response = super().form_valid(form)
        messages.success(self.request, "Your password is set, and you are signed in.")
        return response

    def render_to_response(self, context, **kwargs):
        if not context.get("validlink"):
            kwargs["status"] = 400
        return super().render_to_response(context, **kwargs)
