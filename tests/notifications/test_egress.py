"""Webhooks reach only public receivers, or those the operator allowed (NOTIFY_WEBHOOK_ALLOW): refused when a
webhook is created or changed (a 400 on ``url``) and again at every delivery, after resolving the name, to the
very address that was vetted (so DNS rebinding gets nowhere), with no redirect followed and nothing of the
receiver's answer but its status kept."""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_delivery import _fail, _webhook

from notifications.models import Delivery, Webhook
from notifications.services import channels, egress
from portal import config
from tests.fakes.dns import PUBLIC_V4, PUBLIC_V6

pytestmark = pytest.mark.django_db

REFUSED = [
    ("http://127.0.0.1/", "not_public"),
    ("http://127.0.0.1:5432/", "not_public"),  # the portal's own PostgreSQL
    ("http://127.0.0.1:6379/", "not_public"),  # and Redis
    ("http://[::1]/", "not_public"),
    ("http://0.0.0.0/", "not_public"),
    ("http://[::]/", "not_public"),
    ("http://10.1.2.3/", "not_public"),
    ("http://172.16.0.1/", "not_public"),
    ("http://172.31.255.254/", "not_public"),
    ("http://192.168.1.1/", "not_public"),
    ("http://169.254.169.254/latest/meta-data/", "not_public"),
    ("http://100.64.0.1/", "not_public"),  # CGNAT
    ("http://100.100.100.200/", "not_public"),  # a cloud's metadata service in CGNAT space
    ("http://224.0.0.1/", "not_public"),
    ("http://240.0.0.1/", "not_public"),
    ("http://255.255.255.255/", "not_public"),
    ("http://[::ffff:127.0.0.1]/", "not_public"),
    ("http://[::ffff:a9fe:a9fe]/", "not_public"),  # 169.254.169.254, mapped
    ("http://[::127.0.0.1]/", "not_public"),  # IPv4-compatible
    ("http://[2002:7f00:1::]/", "not_public"),  # 6to4 of 127.0.0.1
    ("http://[64:ff9b::a9fe:a9fe]/", "not_public"),  # NAT64 of 169.254.169.254
    ("http://[fe80::1]/", "not_public"),
    ("http://[fc00::1]/", "not_public"),
    ("http://[fec0::1]/", "not_public"),  # site-local
    ("http://[ff02::1]/", "not_public"),
    ("http://2130706433/", "numeric_host"),  # 127.0.0.1 as one decimal number
    ("http://0x7f000001/", "numeric_host"),
    ("http://0177.0.0.1/", "numeric_host"),
    ("http://0x7f.0.0.1/", "numeric_host"),
    ("http://127.1/", "numeric_host"),
    ("http://metadata.google.internal/computeMetadata/v1/", "not_public"),
    ("http://metadata/", "not_public"),
    ("http://localhost:8000/", "not_public"),
    ("http://LOCALHOST./", "not_public"),
    ("http://redis:6379/", "not_public"),  # a compose service name
    ("http://receiver.team.svc.cluster.local/", "not_public"),
    ("https://user:pw@hooks.example.org/", "userinfo"),
    ("ftp://hooks.example.org/", "invalid"),
    ("file:///etc/passwd", "invalid"),
    ("gopher://hooks.example.org:6379/_", "invalid"),
    ("https://hooks.example.org:6379/", "port"),
    ("http://93.184.215.14:5432/", "port"),
    ("https://nowhere.invalid/", "unresolvable"),
]


@pytest.mark.parametrize(("url", "code"), REFUSED)
def test_a_non_public_target_is_refused(url, code, settings):
    settings.NOTIFY_WEBHOOK_ALLOW = ""
    with pytest.raises(egress.Refused) as exc:
        egress.vet(url)
    assert exc.value.code == code, exc.value.message


def test_a_name_is_refused_when_any_of_its_addresses_is_not_public(dns, settings):
    settings.NOTIFY_WEBHOOK_ALLOW = ""
    dns.set("inside.example.net", "10.0.0.5")
    dns.set("mixed.example.net", PUBLIC_V4, "127.0.0.1")
    dns.set("mapped.example.net", PUBLIC_V6, "::ffff:169.254.169.254")
    for name in ("inside", "mixed", "mapped"):
        with pytest.raises(egress.Refused) as exc:
            egress.vet(f"https://{name}.example.net/hook")
        assert exc.value.code == "not_public" and f"{name}.example.net" in exc.value.message
    dns.set("both.example.net", PUBLIC_V4, PUBLIC_V6)
    assert egress.vet("https://both.example.net/hook").addresses == (PUBLIC_V4, PUBLIC_V6)


@pytest.mark.parametrize("url", ["https://hooks.example.org/services/T0/B0/x", "http://93.184.215.14/hook",
                                 f"https://[{PUBLIC_V6}]/hook", "http://[::ffff:93.184.215.14]/",
                                 "https://hooks.example.org:443/", "HTTPS://Hooks.Example.ORG./x"])
def test_public_receivers_on_80_and_443_are_allowed(url, settings):
    settings.NOTIFY_WEBHOOK_ALLOW = ""
    assert egress.vet(url).port in (80, 443)


def test_the_operators_allow_list_admits_in_cluster_receivers_and_nothing_more(dns, settings):
    dns.set("hooks.team.svc.cluster.local", "10.43.0.9")
    dns.set("chat.corp.example", "192.168.7.7")
    settings.NOTIFY_WEBHOOK_ALLOW = "10.42.0.0/16, hooks.team.svc.cluster.local:8080, *.corp.example, *:8443"
    assert egress.vet("http://10.42.3.4:9000/hook").addresses == ("10.42.3.4",)  # a network: any port
    assert egress.vet("http://hooks.team.svc.cluster.local:8080/").addresses == ("10.43.0.9",)
    assert egress.vet("https://chat.corp.example/x").host == "chat.corp.example"
    assert egress.vet("https://hooks.example.org:8443/").port == 8443  # *:8443, on a public receiver
    for url, code in [("http://10.43.0.9/", "not_public"),  # the name was allowed, not its address
                      ("http://hooks.team.svc.cluster.local:8081/", "not_public"),  # nor another port
                      ("http://10.41.0.1:9000/", "not_public"),
                      ("https://127.0.0.1:8443/", "not_public"),  # *:port opens no private address
                      ("https://hooks.example.org:8444/", "port")]:
        with pytest.raises(egress.Refused) as exc:
            egress.vet(url)
        assert exc.value.code == code, url


@pytest.mark.parametrize("raw", ["10.0.0.0/33", "hooks.example.org:0", "*", "a b", "hooks.example.org:http"])
def test_a_bad_allow_list_stops_the_start_with_the_entry_named(raw):
    with pytest.raises(config.ConfigError) as exc:
        config.load({"NOTIFY_WEBHOOK_ALLOW": raw})
    [problem] = exc.value.problems
    assert problem.startswith("NOTIFY_WEBHOOK_ALLOW=")


def test_create_and_patch_answer_400_on_the_url_and_change_nothing(lab, client_for, settings):
    settings.NOTIFY_WEBHOOK_ALLOW = ""
    c = client_for(lab.alice)
    for url in ("http://127.0.0.1:6379/", "http://[::ffff:127.0.0.1]/", "http://169.254.169.254/",
                "http://metadata.google.internal/", "http://2130706433/", "http://10.0.0.1/"):
        r = c.post("/api/v1/notifications/webhooks", {"url": url}, format="json")
        assert r.status_code == 400, (url, r.content)
        assert set(r.json()["error"]["fields"]) == {"url"}, url
    assert not Webhook.objects.exists()
    hook = c.post("/api/v1/notifications/webhooks", {"url": "https://hooks.example.org/a"}, format="json").json()
    r = c.patch(f"/api/v1/notifications/webhooks/{hook['id']}", {"url": "http://192.168.0.1/"}, format="json")
    assert r.status_code == 400 and r.json()["error"]["fields"]["url"][0]["code"] == "not_public"
    assert Webhook.objects.get(pk=hook["id"]).url == "https://hooks.example.org/a"


def test_the_service_refuses_too(lab, settings):
    from notifications.services import preferences
    from portal.errors import ValidationFailed

    settings.NOTIFY_WEBHOOK_ALLOW = ""
    with pytest.raises(ValidationFailed) as exc:
        preferences.webhook_create(user=lab.alice, url="http://169.254.169.254/")
    assert exc.value.fields["url"][0]["code"] == "not_public"


# ------------------------------------------------------------------------------------------ delivery


@pytest.fixture
def system_dns(dns, monkeypatch):
    """The machine's resolver answers names from the same fake table (literals as usual), so an HTTP client
    that looked a name up itself would be fooled the way a rebinding DNS server fools it."""
    real = socket.getaddrinfo
    asked = []

    def getaddrinfo(host, port, *args, **kwargs):
        try:
            egress.ipaddress.ip_address(host)
        except ValueError:
            asked.append(host)
            if host not in dns.table:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            host = dns.table[host][0]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def _port(receiver) -> int:
    return int(receiver.url.rsplit(":", 1)[1].split("/")[0])


def test_a_name_that_rebinds_to_loopback_after_validation_is_refused_at_delivery_and_nothing_is_sent(
        lab, running_job, go, client_for, receiver, dns, system_dns, settings):
    port = _port(receiver)
    settings.NOTIFY_WEBHOOK_ALLOW = f"*:{port}"  # a public receiver on that port, nothing on loopback
    dns.set("rebind.example.net", PUBLIC_V4)
    receiver.url = f"http://rebind.example.net:{port}/hook"
    _webhook(client_for, lab.alice, receiver)
    dns.set("rebind.example.net", "127.0.0.1")  # the attacker's DNS answers differently the second time
    _fail(go, running_job(lab.alice))
    d = Delivery.objects.get(channel="webhook")
    assert receiver.received == []
    assert (d.status, d.attempts) == ("failed", 1)
    assert d.last_error.startswith("refused: rebind.example.net (127.0.0.1) is not a public address")


def test_delivery_connects_to_the_vetted_address_without_a_second_lookup(
        lab, running_job, go, client_for, receiver, dns, system_dns, settings):
    port = _port(receiver)
    settings.NOTIFY_WEBHOOK_ALLOW = "127.0.0.1/32"
    dns.set("pinned.example.net", "127.0.0.1")
    receiver.url = f"http://pinned.example.net:{port}/hook"
    _webhook(client_for, lab.alice, receiver)
    del dns.lookups[:]
    _fail(go, running_job(lab.alice))
    [got] = receiver.received
    assert got["valid"] and got["headers"]["Host"] == f"pinned.example.net:{port}"
    assert dns.lookups == ["pinned.example.net"]  # vetted once at delivery ...
    assert "pinned.example.net" not in system_dns  # ... and never looked up again by the HTTP client


def test_a_webhook_stored_before_the_check_is_refused_at_delivery(lab, running_job, go, receiver, settings):
    Webhook.objects.create(department=lab.vision, user=lab.alice, url=receiver.url, secret="whsec_x")
    settings.NOTIFY_WEBHOOK_ALLOW = ""  # the operator allows no loopback receiver
    _fail(go, running_job(lab.alice))
    d = Delivery.objects.get(channel="webhook")
    assert receiver.received == [] and d.status == "failed" and "not a public address" in d.last_error


def _serve(handler, tls: ssl.SSLContext | None = None) -> tuple[ThreadingHTTPServer, threading.Thread]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def test_a_redirect_to_loopback_is_not_followed_and_says_so(lab, running_job, go, client_for, receiver):
    hits = []

    class Inside(BaseHTTPRequestHandler):
        def do_POST(self):  # what the redirect points at: must never be reached
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args):
            pass

    inside, _ = _serve(Inside)
    try:
        _webhook(client_for, lab.alice, receiver)
        receiver.statuses = [307]
        receiver.location = f"http://127.0.0.1:{inside.server_address[1]}/internal"
        _fail(go, running_job(lab.alice))
    finally:
        inside.shutdown()
        inside.server_close()
    d = Delivery.objects.get(channel="webhook")
    assert hits == [] and len(receiver.received) == 1
    assert d.status == "failed" and d.last_error.startswith("HTTP 307 (redirect): redirects are not followed")


def test_the_receivers_answer_is_never_echoed(lab, running_job, go, client_for, receiver):
    _webhook(client_for, lab.alice, receiver)
    receiver.statuses = [400]
    receiver.reply = b"-ERR wrong number of arguments for 'post' command (redis) PGSQL-BANNER"
    _fail(go, running_job(lab.alice))
    [n] = [n for n in client_for(lab.alice).get("/api/v1/notifications").json()["results"]
           if n["channel"] == "webhook"]
    assert n["last_error"] == "HTTP 400 (client error)"
    assert "redis" not in json.dumps(n) and "BANNER" not in Delivery.objects.get(channel="webhook").last_error


# ------------------------------------------------------------------------------------------ TLS


def _tls_pair(name: str):
    """A test CA and a server certificate for ``name`` signed by it (cryptography), as files and a context."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "portal test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(hours=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), cert.public_bytes(pem) + key_pem


def test_https_is_pinned_with_the_host_name_as_server_name_and_certificate_name(
        lab, running_job, go, client_for, receiver, dns, system_dns, settings, monkeypatch, tmp_path):
    ca_pem, server_pem = _tls_pair("tls.example.net")
    (tmp_path / "server.pem").write_bytes(server_pem)
    server_names = []
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "server.pem")
    server_ctx.sni_callback = lambda sock, name, ctx: server_names.append(name)
    client_ctx = ssl.create_default_context(cadata=ca_pem.decode())
    monkeypatch.setattr(channels, "tls_verify", lambda: client_ctx)
    got = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            got.append(self.headers["Host"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server, _ = _serve(Handler, server_ctx)
    port = server.server_address[1]
    try:
        settings.NOTIFY_WEBHOOK_ALLOW = "127.0.0.1/32"
        dns.set("tls.example.net", "127.0.0.1")
        dns.set("other.example.net", "127.0.0.1")
        receiver.url = f"https://tls.example.net:{port}/hook"
        _webhook(client_for, lab.alice, receiver)
        _fail(go, running_job(lab.alice))
        assert got == [f"tls.example.net:{port}"] and server_names == ["tls.example.net"]
        assert Delivery.objects.get(channel="webhook").status == "sent"
        # The certificate is still checked against the name: one for another name is refused.
        Webhook.objects.filter(user=lab.alice).update(url=f"https://other.example.net:{port}/hook")
        Delivery.objects.all().delete()
        _fail(go, running_job(lab.alice, name="second"))
        d = Delivery.objects.get(channel="webhook")
        assert got == [f"tls.example.net:{port}"] and d.status == "pending" and "could not connect" in d.last_error
    finally:
        server.shutdown()
        server.server_close()
    assert "tls.example.net" not in system_dns
