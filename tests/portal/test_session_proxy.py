"""The session proxy on its own (no Django): only a 200 of the forward-auth endpoint goes through, to the
upstream it names; every refusal is a 404 and a portal that does not answer a 503; the portal's credentials
never reach the app; the route's /_portal/ paths go to the portal; WebSockets are carried both ways and end when
the grant does."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from portal.session_proxy import make_app


class World:
    """A stand-in portal (its forward-auth answers what ``self.auth`` says) and a stand-in app."""

    def __init__(self):
        self.auth = 200
        self.auth_calls: list[dict] = []
        self.app_requests: list[dict] = []

    def portal_app(self) -> web.Application:
        async def auth(request):
            self.auth_calls.append({"path": request.path, "headers": dict(request.headers)})
            headers = {"X-Portal-User": "alice", "X-Portal-Upstream": f"127.0.0.1:{self.upstream.port}"}
            return web.Response(status=self.auth, headers=headers if self.auth == 200 else {})

        async def exchange(request):
            return web.Response(status=302, headers={"Location": "/s/7/",
                                                     "Set-Cookie": "portal_s7=t; Path=/s/7/; HttpOnly"})

        app = web.Application()
        app.router.add_get("/sessions/{id}/auth", auth)
        app.router.add_get("/s/{id}/_portal/connect", exchange)
        return app

    def upstream_app(self) -> web.Application:
        async def page(request):
            self.app_requests.append({"path": request.path_qs, "headers": dict(request.headers)})
            return web.Response(text=f"app saw {request.path_qs}")

        async def ws(request):
            sock = web.WebSocketResponse()
            await sock.prepare(request)
            async for msg in sock:
                if msg.type == WSMsgType.TEXT:
                    await sock.send_str(f"echo {msg.data}")
            return sock

        app = web.Application()
        app.router.add_get("/s/{id}/ws", ws)
        app.router.add_route("*", "/{tail:.*}", page)
        return app


def run(coro):
    return asyncio.run(coro)


async def _world(recheck_s=60.0):
    world = World()
    world.upstream = TestServer(world.upstream_app(), host="127.0.0.1")
    await world.upstream.start_server()
    world.portal = TestServer(world.portal_app(), host="127.0.0.1")
    await world.portal.start_server()
    world.proxy = TestServer(make_app(str(world.portal.make_url("")), recheck_s=recheck_s), host="127.0.0.1")
    await world.proxy.start_server()
    return world


async def _close(world):
    for server in (world.proxy, world.portal, world.upstream):
        await server.close()


def test_a_granted_request_reaches_the_app_without_the_portals_credentials():
    async def go():
        world = await _world()
        try:
            async with aiohttp.ClientSession() as c:
                r = await c.get(world.proxy.make_url("/s/7/lab?x=1"), headers={
                    "Cookie": "portal_s7=secret-token; sessionid=portal-login; csrftoken=c; _xsrf=app-own",
                    "Authorization": "Bearer gpp_a_b"})
                assert r.status == 200 and await r.text() == "app saw /s/7/lab?x=1"
            [call] = world.auth_calls
            assert call["path"] == "/sessions/7/auth" and "portal_s7=secret-token" in call["headers"]["Cookie"]
            assert call["headers"]["X-Forwarded-Uri"] == "/s/7/lab?x=1"
            [seen] = world.app_requests
            assert seen["headers"]["Cookie"] == "_xsrf=app-own" and "Authorization" not in seen["headers"]
            assert seen["headers"]["X-Portal-User"] == "alice"
        finally:
            await _close(world)

    run(go())


@pytest.mark.parametrize("refusal", [401, 403, 404])
def test_every_refusal_is_a_404_and_nothing_reaches_the_app(refusal):
    async def go():
        world = await _world()
        world.auth = refusal
        try:
            async with aiohttp.ClientSession() as c:
                assert (await c.get(world.proxy.make_url("/s/7/"))).status == 404
                assert (await c.post(world.proxy.make_url("/s/7/api"), data=b"x")).status == 404
                assert (await c.get(world.proxy.make_url("/elsewhere"))).status == 404  # not a route at all
            assert world.app_requests == []
        finally:
            await _close(world)

    run(go())


def test_a_portal_that_does_not_answer_is_a_503():
    async def go():
        world = await _world()
        await world.portal.close()
        try:
            async with aiohttp.ClientSession() as c:
                assert (await c.get(world.proxy.make_url("/s/7/"))).status == 503
            assert world.app_requests == []
        finally:
            await world.proxy.close()
            await world.upstream.close()

    run(go())


def test_the_routes_portal_paths_go_to_the_portal_and_its_cookie_comes_back():
    async def go():
        world = await _world()
        try:
            async with aiohttp.ClientSession() as c:
                r = await c.get(world.proxy.make_url("/s/7/_portal/connect?code=abc"), allow_redirects=False)
                assert r.status == 302 and r.headers["Location"] == "/s/7/"
                assert "HttpOnly" in r.headers["Set-Cookie"]
            assert world.auth_calls == [] and world.app_requests == []
        finally:
            await _close(world)

    run(go())


def test_a_websocket_is_carried_and_ends_with_its_grant():
    async def go():
        world = await _world(recheck_s=0.05)
        try:
            async with aiohttp.ClientSession() as c, c.ws_connect(world.proxy.make_url("/s/7/ws")) as ws:
                await ws.send_str("6 * 7")
                assert (await ws.receive()).data == "echo 6 * 7"
                world.auth = 404  # the session stopped, the grant expired: the proxy's next check closes it
                msg = await ws.receive(timeout=10)
                assert msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING)
        finally:
            await _close(world)

    run(go())
