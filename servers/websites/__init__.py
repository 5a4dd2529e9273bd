"""Small local websites for the offline WebArena tasks: a shop (`shop.py`) and a forum (`forum.py`).

Where they sit: `servers/webarena.py` starts each site on a loopback port inside its own process
(`start_site`) and points the task placeholders `__SHOPPING__` and `__REDDIT__` at them, so the
browser of every environment instance talks to real, server-rendered HTML with links, search,
lists, detail pages, forms and a login.

Site state lives in *worlds*: a world is a fresh copy of the site's seeded data, chosen by the
`wa_world` cookie. The environment gives each browser context (one per instance) its own world
and a new one at every reset, so episodes start from the same state and concurrent instances
never see each other's cart, comments or votes. A browser without the cookie (a person trying
the site) shares the world "default".
"""

import copy
import html
import socket
import threading
from collections import OrderedDict
from typing import Callable
from urllib.parse import parse_qs

import uvicorn
from fastapi import Request

COOKIE = "wa_world"


class Worlds:
    """world key -> a private deep copy of the site's seed data (bounded: oldest dropped first)."""

    def __init__(self, seed: Callable[[], dict], cap: int = 256):
        self.seed, self.cap = seed, cap
        self.data: OrderedDict[str, dict] = OrderedDict()
        self.lock = threading.Lock()

    def fresh(self, key: str, user: str | None = None) -> None:
        """Start `key` from the seed data, logged in as `user` (WebArena starts many tasks logged in)."""
        world = copy.deepcopy(self.seed())
        world["user"] = user
        with self.lock:
            self.data[key] = world
            self._bound()

    def drop(self, key: str) -> None:
        with self.lock:
            self.data.pop(key, None)

    def of(self, request: Request) -> dict:
        key = request.cookies.get(COOKIE, "default")
        with self.lock:
            if key not in self.data:
                self.data[key] = copy.deepcopy(self.seed())
                self.data[key]["user"] = None
                self._bound()
            self.data.move_to_end(key)
            return self.data[key]

    def _bound(self):
        while len(self.data) > self.cap:
            self.data.popitem(last=False)


async def form(request: Request) -> dict[str, str]:
    """An url-encoded form body as a dict (no python-multipart needed)."""
    body = (await request.body()).decode()
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


def esc(text) -> str:
    return html.escape(str(text))


def page(title: str, nav: str, body: str) -> str:
    """The common layout: a header with the site's navigation, then the page's main content."""
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
            "<style>body{font-family:sans-serif;max-width:900px;margin:auto}nav a{margin-right:1em}"
            "li{margin:.2em 0}</style></head>"
            f"<body><header>{nav}</header><main><h1>{esc(title)}</h1>{body}</main></body></html>")


def start_site(app, host: str = "127.0.0.1") -> str:
    """Serve `app` on a free loopback port from a daemon thread; returns its base URL."""
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen(128)  # connections made before uvicorn starts wait in the backlog
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                     name=f"site-{port}").start()
    return f"http://{host}:{port}"
