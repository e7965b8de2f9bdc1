"""A fake resolver for webhook URLs, so no test asks a real DNS server (and none depends on the network).

``notifications.services.egress.resolve`` is replaced by ``FakeDNS`` in every test (the ``dns`` fixture of
tests/conftest.py). Names under the example domains resolve to a public address; any other name does not
resolve unless a test sets it (``dns.set("hooks.lab.test", "10.0.0.5")``). ``lookups`` records every name asked.
"""

from __future__ import annotations

import socket

PUBLIC_V4 = "93.184.215.14"  # a global unicast address (ipaddress.is_global), as example.org answers
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:10c8"
EXAMPLE_DOMAINS = ("example.org", "example.com", "example.net")


class FakeDNS:
    def __init__(self):
        self.table: dict[str, list[str]] = {}
        self.lookups: list[str] = []

    def set(self, name: str, *addresses: str) -> None:
        self.table[name] = list(addresses)

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        if host in self.table:
            return list(self.table[host])
        if any(host == d or host.endswith("." + d) for d in EXAMPLE_DOMAINS):
            return [PUBLIC_V4]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
