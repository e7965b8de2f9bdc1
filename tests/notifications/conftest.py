"""Real receivers for the notification tests: an SMTP server (aiosmtpd) and an HTTP server that checks each
webhook's HMAC signature, both on loopback with a free port, both started and stopped by their fixture."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Inbox:
    """What the SMTP server accepted: parsed messages."""

    def __init__(self):
        self.messages = []

    async def handle_DATA(self, server, session, envelope):
        msg = message_from_bytes(envelope.original_content, policy=policy.default)
        self.messages.append({"to": list(envelope.rcpt_tos), "subject": msg["Subject"], "headers": msg,
                              "body": msg.get_body(("plain",)).get_content()})
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server(settings):
    """A real SMTP server on 127.0.0.1; Django's SMTP backend points at it."""
    from aiosmtpd.controller import Controller

    inbox = Inbox()
    with socket.socket() as s:  # a free port (the controller checks its server by connecting to it)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_TIMEOUT = 5
    try:
        yield inbox
    finally:
        controller.stop()


class Receiver:
    """A webhook receiver that verifies signatures the way docs/notifications.md tells receivers to."""

    def __init__(self):
        self.secret = ""
        self.statuses: list[int] = []  # answers to give, in order; 200 once they are used up
        self.received: list[dict] = []
        self.delay_s = 0.0
        self.lock = threading.Lock()
        self.url = ""
        self.location = ""  # with a 3xx answer: its Location header
        self.reply = b""  # the body of every answer (empty: "ok" or "receiver error")

    def verify(self, headers, body: bytes) -> bool:
        ts = headers.get("X-Portal-Timestamp", "")
        sig = headers.get("X-Portal-Signature", "")
        if not ts.isdigit() or abs(time.time() - int(ts)) > 300:
            return False
        expected = "sha256=" + hmac.new(self.secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, sig)


@pytest.fixture
def receiver(settings):
    """A receiver on loopback, which the portal reaches only because the operator's allow-list names it."""
    settings.NOTIFY_WEBHOOK_ALLOW = "127.0.0.1/32"
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if state.delay_s:
                time.sleep(state.delay_s)
            with state.lock:
                code = state.statuses.pop(0) if state.statuses else 200
                state.received.append({"headers": dict(self.headers), "body": json.loads(body),
                                       "valid": state.verify(self.headers, body), "answered": code})
            self.send_response(code)
            if state.location:
                self.send_header("Location", state.location)
            self.end_headers()
            self.wfile.write(state.reply if state.reply else b"ok" if code < 300 else b"receiver error")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def running_job(lab, submit, go):
    """running_job(user) -> a job admitted and running on the simulated cluster."""
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    def make(user, **fields):
        job = go(submit, user, **fields)
        go(run_cycle)
        go(sync_cluster)
        job.refresh_from_db()
        assert job.state == "running", job.state
        return job

    return make
