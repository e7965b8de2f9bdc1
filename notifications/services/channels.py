"""The channels: e-mail through Django's e-mail backend, webhooks as signed JSON POSTs.

A send either returns (delivered) or raises ``SendError``; ``retry`` says whether another attempt may succeed
(a timeout, a 5xx, a 429, an SMTP server that is down) or not (a 4xx, a refused recipient, a redirect, a
receiver that is not public: ``notifications.services.egress``).

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

from notifications.services import egress

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


def tls_verify():
    """How receivers' certificates are checked: httpx's default CA bundle (tests trust their own CA here)."""
    return True


def post_webhook(*, url: str, secret: str, payload: dict, headers: dict[str, str]) -> int:
    """POST the signed payload to the webhook, at an address ``egress.vet`` allowed just now.

    The request goes to that vetted address itself, with the URL's host in the ``Host`` header and as the TLS
    server name (so the certificate is still checked against the host name): a second DNS lookup, which could
    answer differently (DNS rebinding), never happens. Proxies from the environment are not used, since a
    proxy would resolve the name again. Nothing of the receiver's answer but its status code is kept: the
    error is shown to the webhook's owner, and a body would let them read what the URL reached."""
    try:
        target = egress.vet(url)
    except egress.Refused as exc:
        raise SendError(f"refused: {exc.message}", retry=exc.retry)
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    timestamp = int(time.time())
    parsed = httpx.URL(url)
    sent = {"Content-Type": "application/json", "User-Agent": "gpu-portal-notifications",
            "Host": parsed.netloc.decode("ascii"),
            TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signature(secret, timestamp, body), **headers}
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    # Redirects are not followed: a receiver that moved must be registered again, and a redirect must not carry
    # a signed body to an address nobody vetted.
    with httpx.Client(timeout=settings.NOTIFY_WEBHOOK_TIMEOUT_S, follow_redirects=False, trust_env=False,
                      verify=tls_verify()) as client:
        for i, address in enumerate(target.addresses):
            try:
                r = client.post(parsed.copy_with(host=address), content=body, headers=sent, extensions=extensions)
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent: try the next address
                if i == len(target.addresses) - 1:
                    raise SendError(f"could not connect ({type(exc).__name__})", retry=True)
            except httpx.HTTPError as exc:
                raise SendError(f"no answer ({type(exc).__name__})", retry=True)
    if 200 <= r.status_code < 300:
        return r.status_code
    if 300 <= r.status_code < 400:
        raise SendError(f"HTTP {r.status_code} (redirect): redirects are not followed; register the new URL",
                        retry=False)
    retry = r.status_code >= 500 or r.status_code in (408, 429)
    kind = "server error" if r.status_code >= 500 else "client error" if r.status_code >= 400 else "unexpected"
    raise SendError(f"HTTP {r.status_code} ({kind})", retry=retry)
