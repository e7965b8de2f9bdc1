"""Notification pages (mounted under /notifications/, namespace ``notifications``): your preferences and recent
notifications, and the unsubscribe link of e-mails, which works without logging in (its signature is the
proof) and asks for a click before it changes anything, so a mail scanner following links changes nothing."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from notifications import selectors
from notifications.api.serializers import PreferencesInputSerializer
from notifications.kinds import BY_NAME, NAMES
from notifications.models import Webhook
from notifications.services import preferences
from portal.errors import ValidationFailed
from portal.tenancy import VIEW

CHANNELS = preferences.CHANNELS


@login_required
@require_http_methods(["GET", "POST"])
def preferences_page(request):
    status = 200
    if request.method == "POST":
        payload = {"preferences": [{"kind": kind, **{c: f"{c}:{kind}" in request.POST for c in CHANNELS}}
                                   for kind in NAMES]}
        s = PreferencesInputSerializer(data=payload)
        if s.is_valid():
            preferences.preferences_set(user=request.user, items=s.validated_data["preferences"])
            messages.success(request, "Notification preferences saved.")
            return redirect("notifications:preferences")
        messages.error(request, f"Not saved: {ValidationFailed(fields=s.errors).message}")
        status = 400
    recent = [selectors.describe(d) for d in selectors.recent_notifications(user=request.user, limit=30)]
    hooks = Webhook.objects.restrict(request.user, VIEW).select_related("department")
    return render(request, "notifications/preferences.html", {
        "rows": preferences.preferences_of(request.user), "recent": recent, "webhooks": hooks,
        "has_email": bool(request.user.email)}, status=status)


@csrf_exempt  # the signed token is the credential; mail clients' one-click unsubscribe POSTs without a form
@require_http_methods(["GET", "POST"])
def unsubscribe(request, token: str):
    value = preferences.read_unsubscribe_token(token)
    if value is None:
        return render(request, "notifications/unsubscribe.html", {"invalid": True}, status=404)
    kind = BY_NAME[value["k"]]
    if request.method == "POST":
        done = preferences.unsubscribe(token=token)
        if done is None:
            return render(request, "notifications/unsubscribe.html", {"invalid": True}, status=404)
        return render(request, "notifications/unsubscribe.html", {"done": True, "kind": kind,
                                                                   "channel": value["c"]})
    return render(request, "notifications/unsubscribe.html", {"kind": kind, "channel": value["c"]})
