"""The portal's session proxy: where no ingress controller exists (the simulated cluster, the demo), it carries
a session's or service's HTTP and WebSocket traffic to the pod's app. Each route is a host of its own,
``s<job id>.<SESSION_DOMAIN>``, and the proxy routes by the ``Host`` header (``/s/<id>/...`` of that same job).

It does what an ingress with forward auth does: before every request (and every minute of an open WebSocket)
it asks the portal's forward-auth endpoint, ``/sessions/<id>/auth``, passing the request's cookies, its
Authorization header and its Origin, before it reads any of the body; only a 200 goes through, to the address
the answer names (``X-Portal-Upstream``). Anything else is a 404 to the client: another user's session is not
even acknowledged. The route's own ``/s/<id>/_portal/`` paths (the connect code's exchange) go to the portal
itself, without a body. Bodies are streamed, up to ``--max-body-mb``.

The app never receives the portal's credentials: the ``Cookie`` header is cut at every ``;`` as sent and only
the app's own pieces go on (``portal.session_hosts``), and ``Authorization`` (a service key) is removed. An
app cannot set a cookie the portal or another session reads: a ``Set-Cookie`` of a portal cookie's name is
dropped, and every other loses its ``Domain`` attribute, staying on the session's own host. A WebSocket upgrade
whose ``Origin`` is another host is refused.

Django's development server cannot carry WebSockets, hence this small asyncio process; the demo starts and
supervises it beside the worker and beat. Imports no Django.

Run: ``python -m portal.session_proxy --listen 127.0.0.1:8001 --portal http://127.0.0.1:8000 --domain
sessions.localhost``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict

from portal.session_hosts import app_cookie_header, app_set_cookie, job_of_host

log = logging.getLogger("portal.session_proxy")

RECHECK_S = 60.0  # an open WebSocket is authorized again this often (and counts as a connected client)
MAX_BODY_MB = 64
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length"}
NOT_FOUND = "No such session. Open it with Connect on its page in the portal.\n"


class BodyTooLarge(Exception):
    pass


def _app_headers(request: web.Request) -> CIMultiDict:
    """The request's headers as the app gets them: no hop-by-hop headers, none of the portal's credentials."""
    headers = CIMultiDict((k, v) for k, v in request.headers.items()
                          if k.lower() not in HOP_BY_HOP | {"cookie", "authorization"})
    kept = app_cookie_header("; ".join(request.headers.getall("Cookie", [])))
    if kept:
        headers["Cookie"] = kept
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    return headers


def _portal_headers(request: web.Request) -> CIMultiDict:
    """For the route's own /_portal/ paths: the request as sent, on the route's host (the portal answers those
    paths on that host alone, and sets the route's cookie there)."""
    headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
    headers["Host"] = request.host
    return headers


class SessionProxy:
    def __init__(self, portal: str, *, domain: str, recheck_s: float = RECHECK_S, max_body_mb: float = MAX_BODY_MB):
        self.portal = portal.rstrip("/")
        self.domain = domain
        self.recheck_s = recheck_s
        self.max_body = int(max_body_mb * 1024 * 1024)
        self.client: aiohttp.ClientSession | None = None

    async def start(self, app: web.Application) -> None:
        self.client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
                                            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())

    async def stop(self, app: web.Application) -> None:
        if self.client is not None:
            await self.client.close()

    async def authorize(self, request: web.Request, job_id: str) -> tuple[int, str, str]:
        """Ask the portal: (status, upstream address, user)."""
        headers = {"X-Forwarded-Uri": request.path_qs, "X-Forwarded-Method": request.method,
                   "X-Forwarded-Host": request.host}
        for name in ("Cookie", "Authorization", "Origin"):
            if name in request.headers:
                headers[name] = "; ".join(request.headers.getall(name)) if name == "Cookie" else request.headers[name]
        try:
            async with self.client.get(f"{self.portal}/sessions/{job_id}/auth", headers=headers,
                                       allow_redirects=False, timeout=aiohttp.ClientTimeout(total=10)) as r:
                return r.status, r.headers.get("X-Portal-Upstream", ""), r.headers.get("X-Portal-User", "")
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("forward auth of job %s failed: %s", job_id, exc)
            return 503, "", ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        job = job_of_host(request.host, self.domain)
        if job is None or not request.path.startswith(f"/s/{job}/"):
            return web.Response(status=404, text=NOT_FOUND)
        job_id = str(job)
        if request.path.startswith(f"/s/{job_id}/_portal/"):
            if request.body_exists:  # the exchange is a GET: nothing to carry, nothing to buffer
                return web.Response(status=413, text="The route's portal paths take no body.\n")
            return await self.forward(request, self.portal, _portal_headers(request), app=False)
        if request.content_length is not None and request.content_length > self.max_body:
            return self.too_large()
        status, upstream, user = await self.authorize(request, job_id)
        if status == 503:
            return web.Response(status=503, text="The portal does not answer; try again shortly.\n")
        if status != 200:
            return web.Response(status=404, text=NOT_FOUND)
        if not upstream:
            return web.Response(status=502, text="The session has no app answering yet; try again shortly.\n")
        headers = _app_headers(request)
        headers["X-Portal-User"] = user
        if request.headers.get("Upgrade", "").lower() == "websocket":
            origin = request.headers.get("Origin")
            if origin is not None and urlsplit(origin).netloc.lower() != request.host.lower():
                # a page of another origin (another session's) must not drive this one's kernel
                return web.Response(status=404, text=NOT_FOUND)
            return await self.websocket(request, f"http://{upstream}", headers, job_id)
        return await self.forward(request, f"http://{upstream}", headers)

    def too_large(self) -> web.Response:
        return web.Response(status=413, text=f"The request body is larger than {self.max_body} bytes.\n")

    async def body(self, request: web.Request) -> AsyncIterator[bytes]:
        """The request's body as it arrives, never more than ``max_body`` bytes (a chunked body has no
        Content-Length to refuse up front)."""
        seen = 0
        async for chunk in request.content.iter_chunked(65536):
            seen += len(chunk)
            if seen > self.max_body:
                raise BodyTooLarge
            yield chunk

    async def forward(self, request: web.Request, base: str, headers, *, app: bool = True) -> web.StreamResponse:
        data = self.body(request) if request.body_exists else None
        try:
            async with self.client.request(request.method, f"{base}{request.path_qs}", headers=headers,
                                           data=data, allow_redirects=False) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for name, value in upstream.headers.items():
                    if name.lower() in HOP_BY_HOP:
                        continue
                    if app and name.lower() == "set-cookie":
                        value = app_set_cookie(value)
                        if value is None:
                            log.warning("%s: the app's Set-Cookie of a portal cookie's name was dropped",
                                        request.host)
                            continue
                    response.headers.add(name, value)
                await response.prepare(request)
                async for chunk in upstream.content.iter_chunked(65536):
                    await response.write(chunk)
                await response.write_eof()
                return response
        except BodyTooLarge:
            return self.too_large()
        except aiohttp.ClientError as exc:
            if isinstance(exc.__cause__, BodyTooLarge) or isinstance(exc.__context__, BodyTooLarge):
                return self.too_large()
            log.warning("%s %s: %s", request.method, request.path, exc)
            return web.Response(status=502, text="The session's app does not answer.\n")

    async def websocket(self, request: web.Request, base: str, headers: dict[str, str],
                        job_id: str) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in headers.items() if not k.lower().startswith("sec-websocket"))
        try:
            upstream = await self.client.ws_connect(f"{base}{request.path_qs}", headers=headers)
        except aiohttp.ClientError as exc:
            log.warning("WebSocket %s: %s", request.path, exc)
            return web.Response(status=502, text="The session's app does not answer.\n")
        client = web.WebSocketResponse()
        await client.prepare(request)

        async def pipe(source, sink):
            async for msg in source:
                if msg.type == WSMsgType.TEXT:
                    await sink.send_str(msg.data)
                elif msg.type == WSMsgType.BINARY:
                    await sink.send_bytes(msg.data)
                else:
                    break

        async def recheck():
            while True:  # the grant may be revoked, the session stopped: the socket ends with it
                await asyncio.sleep(self.recheck_s)
                status, _, _ = await self.authorize(request, job_id)
                if status != 200:
                    return

        tasks = [asyncio.create_task(pipe(client, upstream)), asyncio.create_task(pipe(upstream, client)),
                 asyncio.create_task(recheck())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await upstream.close()
            await client.close()
        return client


def make_app(portal: str, *, domain: str, recheck_s: float = RECHECK_S,
             max_body_mb: float = MAX_BODY_MB) -> web.Application:
    proxy = SessionProxy(portal, domain=domain, recheck_s=recheck_s, max_body_mb=max_body_mb)
    app = web.Application(client_max_size=proxy.max_body)
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.stop)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    return app


def arguments() -> argparse.ArgumentParser:
    # The defaults are the portal's own settings from the same environment (a systemd unit's environment file),
    # so the proxy and the links the portal writes cannot disagree.
    parser = argparse.ArgumentParser(description="The portal's session proxy (HTTP and WebSocket).")
    parser.add_argument("--listen", default=f"127.0.0.1:{os.environ.get('SESSION_PORT') or 8001}",
                        help="host:port to serve on (default 127.0.0.1:SESSION_PORT, 8001 when it is empty)")
    parser.add_argument("--portal", default="http://127.0.0.1:8000", help="the portal's address")
    parser.add_argument("--domain", default=os.environ.get("SESSION_DOMAIN") or "sessions.localhost",
                        help="SESSION_DOMAIN (the default): job 42's route is served on s42.<domain>")
    parser.add_argument("--max-body-mb", type=float, default=MAX_BODY_MB, help="the largest request body carried")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    logging.basicConfig(level=logging.WARNING)
    # a SIGTERM (the demo stopping) does not wait for open WebSockets: notebooks keep theirs open for hours
    web.run_app(make_app(args.portal, domain=args.domain, max_body_mb=args.max_body_mb), host=host or "127.0.0.1", port=int(port), access_log=None,
                print=lambda *a: None, shutdown_timeout=2.0)


if __name__ == "__main__":
    main()
