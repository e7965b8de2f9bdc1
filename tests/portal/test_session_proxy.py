"""The session proxy on its own (no Django): only a 200 of the forward-auth endpoint goes through, to the
upstream it names; every refusal is a 404 and a portal that does not answer a 503; the portal's credentials
never reach the app, however its cookies are quoted; an app sets no cookie the portal or another session reads;
each route is its own host; the route's /_portal/ paths go to the portal; bodies are streamed under a cap and
read only after access is granted; WebSockets are carried both ways, from the route's own origin only, and end
when the grant does. Each route is reached on loopback with its host in the Host header (no DNS)."""

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
        self.app_sets: list[str] = []
        self.portal_requests: list[dict] = []

    def portal_app(self) -> web.Application:
        async def auth(request):
            self.auth_calls.append({"path": request.path, "headers": dict(request.headers)})
            headers = {"X-Portal-User": "alice", "X-Portal-Upstream": f"127.0.0.1:{self.upstream.port}"}
            return web.Response(status=self.auth, headers=headers if self.auth == 200 else {})

        async def exchange(request):
            self.portal_requests.append({"host": request.host, "body": await request.read()})
            return web.Response(status=302, headers={"Location": "/s/7/",
                                                     "Set-Cookie": "portal_s7=t; Path=/s/7/; HttpOnly"})

        app = web.Application()
        app.router.add_get("/sessions/{id}/auth", auth)
        app.router.add_get("/s/{id}/_portal/connect", exchange)
        return app

    def upstream_app(self) -> web.Application:
        async def page(request):
            body = await request.read()
            self.app_requests.append({"path": request.path_qs, "headers": dict(request.headers), "body": body})
            response = web.Response(text=f"app saw {request.path_qs}")
            for cookie in self.app_sets:
                response.headers.add("Set-Cookie", cookie)
            return response

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


DOMAIN = "sessions.test"
HOST = f"s7.{DOMAIN}"


def route(world, path):
    """(url on loopback, headers naming the route's host): how the tests and the demo reach a route."""
    return world.proxy.make_url(path), {"Host": HOST}


async def _world(recheck_s=60.0, max_body_mb=64):
    world = World()
    world.upstream = TestServer(world.upstream_app(), host="127.0.0.1")
    await world.upstream.start_server()
    world.portal = TestServer(world.portal_app(), host="127.0.0.1")
    await world.portal.start_server()
    world.proxy = TestServer(make_app(str(world.portal.make_url("")), domain=DOMAIN, recheck_s=recheck_s,
                                      max_body_mb=max_body_mb), host="127.0.0.1")
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
                    "Host": HOST, "Cookie": "portal_route=secret-token; sessionid=portal-login; csrftoken=c; "
                    "__Host-sessionid=x; _xsrf=app-own", "Authorization": "Bearer gps_key"})
                assert r.status == 200 and await r.text() == "app saw /s/7/lab?x=1"
            [call] = world.auth_calls
            assert call["path"] == "/sessions/7/auth" and "portal_route=secret-token" in call["headers"]["Cookie"]
            assert call["headers"]["Authorization"] == "Bearer gps_key"
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
                assert (await c.get(world.proxy.make_url("/s/7/"), headers={"Host": HOST})).status == 404
                assert (await c.post(world.proxy.make_url("/s/7/api"), data=b"x", headers={"Host": HOST})).status == 404
                assert (await c.get(world.proxy.make_url("/elsewhere"), headers={"Host": HOST})).status == 404
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
                assert (await c.get(world.proxy.make_url("/s/7/"), headers={"Host": HOST})).status == 503
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
                r = await c.get(world.proxy.make_url("/s/7/_portal/connect?code=abc"), allow_redirects=False,
                                headers={"Host": HOST})
                assert r.status == 302 and r.headers["Location"] == "/s/7/"
                assert "HttpOnly" in r.headers["Set-Cookie"]
            assert world.auth_calls == [] and world.app_requests == []
            assert world.portal_requests == [{"host": HOST, "body": b""}]  # on the route's host, for its cookie
        finally:
            await _close(world)

    run(go())


def test_a_websocket_is_carried_and_ends_with_its_grant():
    async def go():
        world = await _world(recheck_s=0.05)
        try:
            async with aiohttp.ClientSession() as c, c.ws_connect(world.proxy.make_url("/s/7/ws"), headers={
                    "Host": HOST, "Origin": f"http://{HOST}"}) as ws:
                await ws.send_str("6 * 7")
                assert (await ws.receive()).data == "echo 6 * 7"
                world.auth = 404  # the session stopped, the grant expired: the proxy's next check closes it
                msg = await ws.receive(timeout=10)
                assert msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING)
        finally:
            await _close(world)

    run(go())


def _app_got(cookie_header):
    async def go():
        world = await _world()
        try:
            async with aiohttp.ClientSession() as c:
                r = await c.get(world.proxy.make_url("/s/7/"), headers={"Host": HOST, "Cookie": cookie_header})
                assert r.status == 200
            [seen] = world.app_requests
            return seen["headers"].get("Cookie")
        finally:
            await _close(world)

    return run(go())


def test_cookies_with_unbalanced_quotes_do_not_carry_the_portals_cookies_to_the_app():
    # an app set aaa="start on its own path and zzz=end" on /: the browser sends the portal's cookies between
    # them, which a quote-honouring parser reads as one value of aaa and writes back unquoted
    got = _app_got('aaa="start; csrftoken=c0ffee; sessionid=s3cret; portal_route=t0ken; zzz=end"')
    assert got == 'aaa="start; zzz=end"'  # the app's own pieces, byte for byte
    assert "s3cret" not in got and "t0ken" not in got and "c0ffee" not in got


@pytest.mark.parametrize(("sent", "app_gets"), [
    ('a="x;sessionid=s3cret', 'a="x'),
    ("sessionid=s3cret", None),
    ('__Host-sessionid=s3cret; theme=dark', "theme=dark"),
    ("theme=dark;;; =oops; noequals; portal_s7=t0ken", "theme=dark"),
    ('x="a\\"; sessionid=s3cret; y="b"', 'x="a\\"; y="b"'),
])
def test_the_portals_cookies_never_reach_the_app_however_they_are_written(sent, app_gets):
    assert _app_got(sent) == app_gets


def test_an_app_cannot_set_a_cookie_the_portal_or_another_session_reads():
    async def go():
        world = await _world()
        world.app_sets = ["sessionid=planted; Domain=sessions.test; Path=/", "__Host-portal_route=x; Path=/",
                          "portal_route=x; Domain=.sessions.test; Path=/", "csrftoken=x",
                          "theme=dark; Domain=sessions.test; Path=/; HttpOnly", "_xsrf=t; Path=/s/7/"]
        try:
            async with aiohttp.ClientSession() as c:
                r = await c.get(world.proxy.make_url("/s/7/"), headers={"Host": HOST})
                assert r.headers.getall("Set-Cookie") == ["theme=dark; Path=/; HttpOnly", "_xsrf=t; Path=/s/7/"]
        finally:
            await _close(world)

    run(go())


@pytest.mark.parametrize(("host", "path"), [
    ("s8.sessions.test", "/s/7/"),  # another route's host
    ("sessions.test", "/s/7/"),
    ("127.0.0.1", "/s/7/"),  # the shared host of old: no route answers there
    ("s7.sessions.test.evil.example", "/s/7/"),
    ("s7.sessions.test", "/s/8/"),
    ("s07.sessions.test", "/s/7/"),
])
def test_a_route_answers_on_its_own_host_alone(host, path):
    async def go():
        world = await _world()
        try:
            async with aiohttp.ClientSession() as c:
                assert (await c.get(world.proxy.make_url(path), headers={"Host": host})).status == 404
                assert (await c.get(world.proxy.make_url("/s/7/_portal/connect?code=a"), allow_redirects=False,
                                    headers={"Host": host if path == "/s/7/" else "s8.sessions.test"})).status == 404
            assert world.auth_calls == world.app_requests == world.portal_requests == []
        finally:
            await _close(world)

    run(go())


@pytest.mark.parametrize("origin", ["http://evil.example", "http://s8.sessions.test", "null"])
def test_a_websocket_from_another_origin_is_refused(origin):
    async def go():
        world = await _world()
        try:
            async with aiohttp.ClientSession() as c:
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await c.ws_connect(world.proxy.make_url("/s/7/ws"), headers={"Host": HOST, "Origin": origin})
                assert refused.value.status == 404
            assert world.auth_calls[0]["headers"]["Origin"] == origin  # forward auth judges it too
        finally:
            await _close(world)

    run(go())


def test_a_body_is_streamed_to_the_app_and_one_over_the_cap_refused_before_access_is_asked():
    async def go():
        world = await _world(max_body_mb=1)
        try:
            async with aiohttp.ClientSession() as c:
                r = await c.post(world.proxy.make_url("/s/7/upload"), data=b"x" * 500_000, headers={"Host": HOST})
                assert r.status == 200 and world.app_requests[0]["body"] == b"x" * 500_000
                r = await c.post(world.proxy.make_url("/s/7/upload"), data=b"x" * 2_000_000, headers={"Host": HOST})
                assert r.status == 413 and len(world.auth_calls) == 1  # refused at its Content-Length

                async def chunked():  # no Content-Length: counted as it arrives
                    for _ in range(40):
                        yield b"y" * 65536

                r = await c.post(world.proxy.make_url("/s/7/upload"), data=chunked(), headers={"Host": HOST})
                assert r.status in (413, 502) and len(world.app_requests) == 1
                assert all(len(seen["body"]) <= 1024 * 1024 for seen in world.app_requests)
        finally:
            await _close(world)

    run(go())


def test_a_refused_or_portal_path_request_is_answered_without_reading_its_body():
    async def go():
        world = await _world()
        world.auth = 401
        try:
            async with aiohttp.ClientSession() as c:
                r = await c.post(world.proxy.make_url("/s/7/_portal/connect"), data=b"z" * 5_000_000,
                                 headers={"Host": HOST})
                assert r.status == 413 and world.portal_requests == []
                r = await c.post(world.proxy.make_url("/s/7/api"), data=b"z" * 5_000_000, headers={"Host": HOST})
                assert r.status == 404 and world.app_requests == []
        finally:
            await _close(world)

    run(go())
