"""The portal's session proxy: where no ingress controller exists (the simulated cluster, the demo), it carries
a session's or service's HTTP and WebSocket traffic, ``/s/<job id>/...``, to the pod's app.

It does what an ingress with forward auth does: before every request (and every minute of an open WebSocket)
it asks the portal's forward-auth endpoint, ``/sessions/<id>/auth``, passing the request's cookies and
Authorization header; only a 200 goes through, to the address the answer names (``X-Portal-Upstream``).
Anything else is a 404 to the client: another user's session is not even acknowledged. The route's own
``/s/<id>/_portal/`` paths (the connect code's exchange) go to the portal itself. The portal's credentials
(its session and route cookies, the Authorization header of a session) are not passed on to the app.

Django's development server cannot carry WebSockets, hence this small asyncio process; the demo starts and
supervises it beside the worker and beat. Imports no Django.

Run: ``python -m portal.session_proxy --listen 127.0.0.1:8001 --portal http://127.0.0.1:8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re

import aiohttp
from aiohttp import WSMsgType, web

log = logging.getLogger("portal.session_proxy")

ROUTE = re.compile(r"^/s/(?P<id>[0-9]{1,18})/")
RECHECK_S = 60.0  # an open WebSocket is authorized again this often (and counts as a connected client)
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length"}
PORTAL_COOKIES = re.compile(r"^(sessionid|csrftoken|portal_s[0-9]+)$")
NOT_FOUND = "No such session. Open it with Connect on its page in the portal.\n"


def _app_headers(request: web.Request) -> dict[str, str]:
    """The request's headers as the app gets them: no hop-by-hop headers, none of the portal's credentials."""
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | {"cookie", "authorization"}}
    kept = "; ".join(f"{name}={value}" for name, value in request.cookies.items()
                     if not PORTAL_COOKIES.match(name))
    if kept:
        headers["Cookie"] = kept
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    return headers


class SessionProxy:
    def __init__(self, portal: str, *, recheck_s: float = RECHECK_S):
        self.portal = portal.rstrip("/")
        self.recheck_s = recheck_s
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
        for name in ("Cookie", "Authorization"):
            if name in request.headers:
                headers[name] = request.headers[name]
        try:
            async with self.client.get(f"{self.portal}/sessions/{job_id}/auth", headers=headers,
                                       allow_redirects=False, timeout=aiohttp.ClientTimeout(total=10)) as r:
                return r.status, r.headers.get("X-Portal-Upstream", ""), r.headers.get("X-Portal-User", "")
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("forward auth of job %s failed: %s", job_id, exc)
            return 503, "", ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        match = ROUTE.match(request.path)
        if match is None:
            return web.Response(status=404, text=NOT_FOUND)
        job_id = match["id"]
        if request.path.startswith(f"/s/{job_id}/_portal/"):
            return await self.forward(request, self.portal, _app_headers(request))
        status, upstream, user = await self.authorize(request, job_id)
        if status == 503:
            return web.Response(status=503, text="The portal does not answer; try again shortly.\n")
        if status != 200:
            return web.Response(status=404, text=NOT_FOUND)
        if not upstream:
            return web.Response(status=502, text="The session has no app answering yet; try again shortly.\n")
        headers = {**_app_headers(request), "X-Portal-User": user}
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self.websocket(request, f"http://{upstream}", headers, job_id)
        return await self.forward(request, f"http://{upstream}", headers)

    async def forward(self, request: web.Request, base: str, headers: dict[str, str]) -> web.StreamResponse:
        body = await request.read()
        try:
            async with self.client.request(request.method, f"{base}{request.path_qs}", headers=headers,
                                           data=body or None, allow_redirects=False) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for name, value in upstream.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        response.headers.add(name, value)
                await response.prepare(request)
                async for chunk in upstream.content.iter_chunked(65536):
                    await response.write(chunk)
                await response.write_eof()
                return response
        except aiohttp.ClientError as exc:
            log.warning("%s %s: %s", request.method, request.path, exc)
            return web.Response(status=502, text="The session's app does not answer.\n")

    async def websocket(self, request: web.Request, base: str, headers: dict[str, str],
                        job_id: str) -> web.StreamResponse:
        headers = {k: v for k, v in headers.items() if not k.lower().startswith("sec-websocket")}
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


def make_app(portal: str, *, recheck_s: float = RECHECK_S) -> web.Application:
    proxy = SessionProxy(portal, recheck_s=recheck_s)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.stop)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The portal's session proxy (HTTP and WebSocket).")
    parser.add_argument("--listen", default="127.0.0.1:8001", help="host:port to serve on")
    parser.add_argument("--portal", default="http://127.0.0.1:8000", help="the portal's address")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    logging.basicConfig(level=logging.WARNING)
    # a SIGTERM (the demo stopping) does not wait for open WebSockets: notebooks keep theirs open for hours
    web.run_app(make_app(args.portal), host=host or "127.0.0.1", port=int(port), access_log=None,
                print=lambda *a: None, shutdown_timeout=2.0)


if __name__ == "__main__":
    main()
