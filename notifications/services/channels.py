"""The channels: e-mail through Django's e-mail backend, webhooks as signed JSON POSTs.

A send either returns (delivered) or raises ``SendError``; ``retry`` says whether another attempt may succeed
(a timeout, a 5xx, a 429, an SMTP server that is down) or not (a 4xx, a refused recipient, a redirect).

Webhook signature: ``X-Portal-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the webhook's
secret>`` and ``X-Portal-Timestamp: <unix seconds>``. A receiver recomputes it over the raw body and rejects
old timestamps, so a captured request cannot be replayed later (docs/notifications.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import smtplib
import time

import httpx
from django.conf import settings
from django.core import mail

SIGNATURE_HEADER = "X-Portal-Signature"
TIMESTAMP_HEADER = "X-Portal-Timestamp"


class SendError(Exception):
    def __init__(self, message: str, *, retry: bool):
        super().__init__(message)
        self.retry = retry


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def send_email(*, to: str, subject: str, body: str, headers: dict[str, str]) -> None:
    message = mail.EmailMessage(subject=subject, body=body, from_email=settings.DEFAULT_FROM_EMAIL, to=[to],
                                headers=headers)
    try:
        message.send(fail_silently=False)
    except smtplib.SMTPRecipientsRefused as exc:
        raise SendError(f"recipient refused: {exc}", retry=False)
    except smtplib.SMTPResponseException as exc:  # 4xx: try later; 5xx: the server will not take it
        raise SendError(f"SMTP {exc.smtp_code}: {exc.smtp_error!r}", retry=400 <= exc.smtp_code < 500)
    except (TimeoutError, smtplib.SMTPException, OSError) as exc:
        raise SendError(f"SMTP unavailable: {exc}", retry=True)


def post_webhook(*, url: str, secret: str, payload: dict, headers: dict[str, str]) -> int:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    timestamp = int(time.time())
    sent = {"Content-Type": "application/json", "User-Agent": "gpu-portal-notifications",
            TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signature(secret, timestamp, body), **headers}
    try:
        # Redirects are not followed: a receiver that moved must be re-registered, and a redirect must not
        # carry a signed body to wherever it points.
        r = httpx.post(url, content=body, headers=sent, timeout=settings.NOTIFY_WEBHOOK_TIMEOUT_S,
                       follow_redirects=False)
    except httpx.HTTPError as exc:
        raise SendError(f"{type(exc).__name__}: {exc}"[:400], retry=True)
    if 200 <= r.status_code < 300:
        return r.status_code
    retry = r.status_code >= 500 or r.status_code in (408, 429)
    reason = "redirects are not followed" if 300 <= r.status_code < 400 else r.text[:200]
    raise SendError(f"HTTP {r.status_code}: {reason}", retry=retry)
