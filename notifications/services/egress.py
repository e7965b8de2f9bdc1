"""Where the portal may send a webhook: the one place that decides (docs/notifications.md, "Which receivers").

A webhook URL is a request the portal makes on a user's behalf, from inside the lab's network. Without a
check it reaches what only the portal can reach: its own PostgreSQL and Redis, the cloud's metadata service
(169.254.169.254), the cluster's services. So a URL is allowed only when

* its scheme is http or https, it names no user or password, and its host is a host name or a plain address
  (``http://2130706433/``, ``0x7f.1`` and other numeric spellings that resolvers read as addresses are refused);
* its host is not a local or metadata name (``localhost``, ``metadata.google.internal``, ``*.internal``,
  ``*.local``, a name without a dot such as ``redis``);
* **every** address the host resolves to is public (``ipaddress``'s ``is_global``, and not loopback, private,
  link-local, CGNAT, multicast, reserved, unspecified or site-local; IPv4-mapped, 6to4 and NAT64 addresses
  are judged by the IPv4 address inside them, IPv4-compatible ones are refused); and
* its port is 80 or 443,

unless NOTIFY_WEBHOOK_ALLOW names it: a network (any port), a host name (whatever it resolves to), or
``*:port`` (that port on public receivers).

``vet`` runs when a webhook is created or changed (a 400 on the URL) and again before every delivery, where
the request goes to the very addresses it vetted (``pinned``), so a name that resolves elsewhere the second
time (DNS rebinding) does not reach anything unchecked.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from portal.config import EgressAllow, webhook_allow

DEFAULT_PORTS = {"http": 80, "https": 443}
PUBLIC_PORTS = frozenset({80, 443})
# Names of cloud metadata services and suffixes that are local by definition (RFC 6761, RFC 8375, ICANN's
# .internal): never a public receiver, whatever a resolver answers for them.
METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal", "metadata.azure.internal", "metadata.oraclecloud.com",
                            "metadata.tencentyun.com", "metadata.platformequinix.com"})
LOCAL_SUFFIXES = ("localhost", "local", "internal", "localdomain", "home.arpa", "lan", "intranet")
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(Exception):
    """The URL may not be a webhook. ``code`` is machine-readable; ``retry``: at delivery, whether the same
    URL may pass later (a name that does not resolve now), or never as it is (a private address)."""

    def __init__(self, message: str, *, code: str, retry: bool = False):
        super().__init__(message)
        self.message, self.code, self.retry = message, code, retry


@dataclass(frozen=True)
class Target:
    url: str
    scheme: str
    host: str  # as written, lower case, without brackets or a final dot
    port: int
    addresses: tuple[str, ...]  # every address the host resolved to, all vetted, in the resolver's order


def resolve(host: str, port: int) -> list[str]:
    """Every address of ``host`` (tests replace this with a fake resolver)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def vet(url: str) -> Target:
    """The URL's target, resolved and checked; ``Refused`` says why it may not be used."""
    allow = webhook_allow(settings.NOTIFY_WEBHOOK_ALLOW)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("The URL's host or port cannot be read.", code="invalid")
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise Refused("Use an http:// or https:// URL.", code="invalid")
    if "@" in parts.netloc:
        raise Refused("A webhook URL may not carry a user name or password.", code="userinfo")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise Refused("The URL has no host.", code="invalid")
    port = port or DEFAULT_PORTS[scheme]
    by_name = _name_allowed(allow, host, port)
    literal = _address(host)
    if literal is None:
        if all(_NUMERIC_LABEL.fullmatch(label) for label in host.split(".")):
            raise Refused("Write the address as a host name or as a.b.c.d: numeric spellings such as "
                          "2130706433 or 0x7f.1 are refused.", code="numeric_host")
        if not by_name and (host in METADATA_NAMES or "." not in host
                            or any(host == s or host.endswith("." + s) for s in LOCAL_SUFFIXES)):
            raise Refused(f"{host} is a local or metadata name, not a public receiver; an operator can allow "
                          "in-cluster receivers with NOTIFY_WEBHOOK_ALLOW.", code="not_public")
        try:
            addresses = resolve(host, port)
        except (OSError, UnicodeError):
            raise Refused(f"{host} does not resolve.", code="unresolvable", retry=True)
        if not addresses:
            raise Refused(f"{host} does not resolve.", code="unresolvable", retry=True)
    else:
        addresses = [str(literal)]
    if not by_name:
        for text in addresses:
            _check_address(allow, host, text, port)
    return Target(url=url, scheme=scheme, host=host, port=port, addresses=tuple(addresses))


def _address(text: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _name_allowed(allow: EgressAllow, host: str, port: int) -> bool:
    for pattern, allowed_port in allow.names:
        matches = host.endswith(pattern[1:]) if pattern.startswith("*.") else host == pattern
        if matches and allowed_port in (None, port):
            return True
    return False


def _inner(addr):
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64), else the address itself."""
    if addr.version == 6:
        if addr.ipv4_mapped is not None:
            return addr.ipv4_mapped
        if addr.sixtofour is not None:
            return addr.sixtofour
        if addr in _NAT64:
            return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return addr


def _public(addr) -> bool:
    if addr.version == 6 and (addr.is_site_local or (int(addr) >> 32 == 0)):  # IPv4-compatible, ::, ::1
        return False
    return addr.is_global and not (addr.is_private or addr.is_loopback or addr.is_link_local or addr.is_multicast
                                   or addr.is_reserved or addr.is_unspecified)


def _check_address(allow: EgressAllow, host: str, text: str, port: int) -> None:
    addr = ipaddress.ip_address(text.split("%", 1)[0])
    inner = _inner(addr)
    if any(a in net for net in allow.networks for a in {addr, inner} if a.version == net.version):
        return
    if not (_public(addr) if inner is addr else _public(inner)):
        shown = host if host == text else f"{host} ({text})"
        raise Refused(f"{shown} is not a public address (loopback, private, link-local, metadata or reserved); "
                      "an operator can allow in-cluster receivers with NOTIFY_WEBHOOK_ALLOW.", code="not_public")
    if port not in PUBLIC_PORTS | allow.public_ports:
        raise Refused(f"Port {port} is not allowed for webhooks: use 80 or 443 (an operator can allow others "
                      "with NOTIFY_WEBHOOK_ALLOW).", code="port")
