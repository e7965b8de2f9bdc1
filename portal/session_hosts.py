"""Each session and service is an origin of its own: job 42's route is served on ``s42.<SESSION_DOMAIN>``,
never under a path of a shared host, so one session's page can neither read another's nor reach the portal's
cookies (docs/sessions.md, "Security model"). This module is that grammar, and the cookie rules at the route's
edge, shared by the portal (its middleware and views) and the session proxy. Pure: imports no Django.

Cookies at the edge are handled as the browser wrote them, never parsed and written again: a ``Cookie``
header is cut at every ``;`` (quotes mean nothing there), the portal's pieces are dropped and the app's own
go on byte for byte. A parser that honours quoted strings can be made, by two cookies with an unbalanced
``"``, to read the portal's cookies as part of an app's cookie value and hand them on.
"""

from __future__ import annotations

import re

ROUTE_LABEL = re.compile(r"^s([1-9][0-9]{0,17})$")
# The route's credential, set by its /_portal/connect on the session's own host. Behind TLS it carries the
# __Host- prefix: a browser then takes it only host-only, Secure and on Path=/, so a sibling host cannot plant one.
ROUTE_COOKIE = "portal_route"
# Every cookie name the portal sets or reads, with or without the prefixes (__Host-sessionid behind TLS):
# never handed to an app, never set by one.
PORTAL_COOKIE = re.compile(r"^(?:__host-|__secure-)?(?:sessionid|csrftoken|portal_route|portal_s[0-9]+)$",
                           re.IGNORECASE)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 6265's cookie-name (an HTTP token)


def route_host(job_id: int, domain: str) -> str:
    return f"s{int(job_id)}.{domain}"


def job_of_host(host: str, domain: str) -> int | None:
    """The job whose route ``host`` (``Host`` header, port allowed) is, or None when it is not one."""
    name = host.strip().lower()
    if name.startswith("["):
        return None
    name = name.rsplit(":", 1)[0] if ":" in name else name
    name = name.rstrip(".")
    suffix = "." + domain.lower()
    if not name.endswith(suffix):
        return None
    match = ROUTE_LABEL.match(name[: -len(suffix)])
    return int(match.group(1)) if match else None


def on_session_domain(host: str, domain: str) -> bool:
    name = host.strip().lower().rsplit(":", 1)[0].rstrip(".")
    return name == domain.lower() or name.endswith("." + domain.lower())


def route_cookie_name(secure: bool) -> str:
    return f"__Host-{ROUTE_COOKIE}" if secure else ROUTE_COOKIE


def cookie_pieces(header: str) -> list[tuple[str, str]]:
    """``(name, piece)`` for every ``;``-separated piece of a ``Cookie`` header, the piece exactly as sent."""
    pieces = []
    for piece in header.split(";"):
        piece = piece.strip()
        if piece:
            pieces.append((piece.split("=", 1)[0].strip(), piece))
    return pieces


def app_cookie_header(header: str) -> str:
    """The ``Cookie`` header an app gets: its own cookies as the browser sent them, none of the portal's, and
    nothing that is not a ``name=value`` with a proper name (so nothing can pass for one)."""
    return "; ".join(piece for name, piece in cookie_pieces(header)
                     if "=" in piece and _TOKEN.match(name) and not PORTAL_COOKIE.match(name))


def cookie_values(header: str, name: str) -> list[str]:
    """Every value the header carries for ``name`` (a sibling host may have planted a second one: each is
    tried, and none can stand for another session's, because a route's token belongs to its job alone)."""
    return [piece.split("=", 1)[1].strip().strip('"') for n, piece in cookie_pieces(header)
            if n == name and "=" in piece]


def app_set_cookie(value: str) -> str | None:
    """An app's ``Set-Cookie`` as the browser may take it: None for a cookie of the portal's name; otherwise
    the same, without any ``Domain`` attribute, so it stays on the session's own host (host-only)."""
    name_value, _, attributes = value.partition(";")
    name = name_value.split("=", 1)[0].strip()
    if "=" not in name_value or not _TOKEN.match(name) or PORTAL_COOKIE.match(name):
        return None
    kept = [a for a in attributes.split(";") if a.strip() and a.split("=", 1)[0].strip().lower() != "domain"]
    return ";".join([name_value, *kept])
