"""The simulated cluster's stand-in for a session's or service's app: a small HTTP + WebSocket server on loopback,
one process per running pod, started and ended by the simulated kubelet (``simulated.py``).

It serves what a notebook needs of the path it is routed under (``--base``, e.g. ``/s/12/``): a page with a
cell to run, its readiness path, and a WebSocket (``<base>ws``) that runs each cell it is sent and answers with
the output. "Running" a cell evaluates a sum or product of numbers, or echoes the text: enough to show that a
message went through the portal and back. It ends with its parent (the process that started it) or after
``--lifetime`` seconds, so a crashed kubelet leaves no server behind.

Run: ``python -m scheduling.backends.standin --base /s/12/ --readiness /api/status --lifetime 3600``; the first
line it prints is ``LISTENING 127.0.0.1:<port>``. Imports no Django.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import re
import sys

from aiohttp import WSMsgType, web

ARITHMETIC = re.compile(r"^\s*-?\d+(\.\d+)?(\s*[-+*]\s*\d+(\.\d+)?){0,50}\s*$")

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title></head>
<body>
<h1>{title}</h1>
<p>A stand-in notebook of the simulated cluster: type a cell and run it. It reaches this pod through the
portal, over a WebSocket.</p>
<input id="cell" value="6 * 7" size="40"> <button id="run">Run</button>
<pre id="out"></pre>
<script>
const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "{base}ws");
const out = document.getElementById("out");
ws.onopen = () => document.body.dataset.connected = "yes";
ws.onmessage = (e) => {{ const m = JSON.parse(e.data); out.textContent += "Out[" + m.n + "]: " + m.output + "\\n"; }};
document.getElementById("run").onclick = () => ws.send(JSON.stringify({{cell: document.getElementById("cell").value}}));
</script>
</body></html>
"""


def run_cell(text: str) -> str:
    """A cell's output: a sum or product of numbers is computed (by hand, nothing is evaluated), anything
    else is echoed."""
    if not ARITHMETIC.match(text):
        return text
    tokens = re.findall(r"\d+(?:\.\d+)?|[-+*]", text)
    if tokens[0] == "-":
        tokens.insert(0, "0")
    total, term, op = 0.0, float(tokens[0]), None
    for tok in tokens[1:]:
        if tok in ("+", "-", "*"):
            if tok in ("+", "-"):
                total, term = total + term, None
            op = tok
            continue
        value = float(tok)
        term = term * value if op == "*" else (value if op == "+" else -value)
    total += term or 0.0
    return str(int(total)) if total == int(total) else str(total)


def make_app(base: str, readiness: str, title: str) -> web.Application:
    count = {"n": 0}

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE.format(title=html.escape(title), base=base), content_type="text/html")

    async def ready(request: web.Request) -> web.Response:
        return web.json_response({"ready": True})

    async def socket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            try:
                cell = str(json.loads(msg.data).get("cell", ""))
            except (ValueError, AttributeError):
                cell = msg.data
            count["n"] += 1
            await ws.send_str(json.dumps({"n": count["n"], "output": run_cell(cell[:1000])}))
        return ws

    app = web.Application()
    app.router.add_get(f"{base}ws", socket)
    # a readiness path of "/" (a service's default) is the page itself, which answers 200 as readiness needs
    for path in dict.fromkeys((readiness, f"{base}{readiness.lstrip('/')}")):
        if path not in ("/", base):
            app.router.add_get(path, ready)
    app.router.add_get(base, page)
    app.router.add_get("/{tail:.*}", page)
    return app


async def serve(base: str, readiness: str, title: str, lifetime: float, parent: int) -> None:
    runner = web.AppRunner(make_app(base, readiness, title), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(f"LISTENING 127.0.0.1:{port}", flush=True)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lifetime
    while loop.time() < deadline and os.getppid() == parent:
        await asyncio.sleep(1.0)
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="/")
    parser.add_argument("--readiness", default="/")
    parser.add_argument("--title", default="Stand-in notebook")
    parser.add_argument("--lifetime", type=float, default=3600.0)
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    asyncio.run(serve(args.base, args.readiness, args.title, args.lifetime, os.getppid()))


if __name__ == "__main__":
    main()
