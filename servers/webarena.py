"""WebArena in a real browser: Playwright driving Chromium, served with the AgentGym protocol.

Where it sits: `envs/process.py` starts this file as a subprocess (`python -m servers.webarena --port P`)
and talks to it over HTTP; nothing here knows about models or torch. WebArena (Zhou et al., 2023):
an agent completes tasks on real websites by reading the page's accessibility tree and issuing
browser actions; each task's config file says how to score the end state.

Protocol facts: AgentGym's WebArena client posts /create with no body and reads `env_idx` from the
answer, names the instance `env_idx` everywhere, resets with `{env_idx, seed, idx}` and ends an
episode on the /step answer's `terminated` (`servers/common.py` serves that dialect beside this
project's). As on AgentGym's server, `idx` names a task config, `idx`.json in the task directory
(WebArena's task_id), while this project's `data_idx` indexes the task list sorted by task_id; the
two agree whenever the task ids are 0..n-1, as in the offline tasks and WebArena's 812. The reset
answer carries `category` (the task's site), `eval_types`, `intent` and `available_actions`. A
string names a task of the configured task folder only (its file name, with or without `.json`,
or its task_id), never a path.

Confinement: the browser stays inside the current task's sites (the origins of its `sites` and
`start_url`). Every request of the instance's browser context passes a route that aborts any other
origin and any scheme but http(s) (`file:`, `chrome:`, `data:`, `javascript:`, ...); a `goto` to
such a URL is refused before it reaches the browser; a tab that still ends up elsewhere (a blocked
navigation's error page) is sent back to `about:blank` before its tree is read; downloads are not
accepted. Each refusal is said in the next observation. Sizes are capped (typed text
MAX_TYPE_CHARS, keys and URLs shorter still), an action's browser work is cancelled after
ACTION_SECONDS and a whole call's after BROWSER_SECONDS (a 504 that the instance survives).

    observation   OBSERVATION: the tabs, then the accessibility tree of the active tab as
                  `[id] role 'name'` lines (Chrome's tree from the CDP Accessibility domain; the
                  ids number the lines in order, 1, 2, ..., so that the same page reads the same
                  at every load), then URL, OBJECTIVE and PREVIOUS ACTION.
    action        the first ``` fenced block of the reply, one of WebArena's: click [id],
                  type [id] [text] [0|1] (1 presses Enter after typing; the field is cleared
                  first), hover [id], press [keys], scroll [up|down], new_tab, tab_focus [n],
                  close_tab, goto [url], go_back, go_forward, stop [answer].
    reward        on `stop`: 0/1 from the task's evaluator (`servers/webarena_eval.py`); the
                  episode then ends. Other actions give 0; a reply that cannot be parsed, or an
                  id that is not on the page, changes nothing and says why.

Tasks are WebArena config files (`intent`, `start_url`, `sites`, `eval`) with site placeholders
(`__SHOPPING__`, `__REDDIT__`, ...), read from $WEBARENA_TASKS (default: the 35 offline tasks in
`servers/webarena_tasks/`). A placeholder `__X__` takes its URL from the environment variable X as
WebArena does (SHOPPING, SHOPPING_ADMIN, REDDIT, GITLAB, MAP, WIKIPEDIA, HOMEPAGE); SHOPPING and
REDDIT default to the local shop and forum of `servers/websites/`, started on loopback ports inside
this process; the agent sees them at WebArena's usual addresses (SHOWN_AS: http://localhost:7770 and
:9999, translated back for `goto`), since their real ports change at every launch and an episode
must read the same at every launch to replay (DAgger's relabelling, sft.py). Each instance gets a
fresh copy of the local sites' state at every reset (a cookie names it), so episodes are repeatable
and concurrent instances never see each other's changes.

The expert (`POST /expert`, servers/common.py; the trainer's, never the agent's): a task config
may hold a `reference_solution` (every offline task does; tests/test_webarena.py checks that each
scores 1 with the task's own evaluator): a list of steps, each `["click"|"hover", role, name]`,
`["type", role, name, text, enter]` (the element found by role and name on the current page) or
a literal action (`"stop [6]"`). The server notes at every executed action whether it was the next
reference step; the expert answers that next step. Once the agent left the path by one click or
`goto` that led to another page, the expert answers `go_back`, which brings it back onto the path
where it left; after any other detour, `goto [start_url]`, which puts the reference solution back
at its first step (docs/experts.md). A task without a reference solution has no expert (404).

One Chromium process is shared by all instances (headless, no sandbox, no background networking);
each instance owns one browser context, closed on /close; a crashed browser is launched again at
the next reset. Playwright's async API runs on one dedicated thread and event loop, and the
server's request threads hand it coroutines, so instances are served concurrently and safely.
Configuration: $WEBARENA_CHROMIUM (default /usr/bin/chromium when present, else Playwright's own
build), $WEBARENA_JUDGE for fuzzy_match (see webarena_eval.py), or the flags --chromium, --tasks.
"""

import argparse
import asyncio
import concurrent.futures
import contextlib
import glob
import json
import os
import re
import threading
import time
import uuid
from urllib.parse import urlsplit

from playwright.async_api import async_playwright

from servers import webarena_eval
from servers.common import EnvError, build_app, descendants, serve
from servers.openenv import add_openenv
from servers.websites import COOKIE, forum, shop, start_site

HERE = os.path.dirname(os.path.abspath(__file__))
TASK_DIR = os.environ.get("WEBARENA_TASKS") or os.path.join(HERE, "webarena_tasks")
CHROMIUM = os.environ.get("WEBARENA_CHROMIUM") or (
    "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
)
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-extensions",
    "--mute-audio",
]
VIEWPORT = {"width": 1280, "height": 720}  # WebArena's
SITE_VARS = ["SHOPPING_ADMIN", "SHOPPING", "REDDIT", "GITLAB", "MAP", "WIKIPEDIA", "HOMEPAGE"]
LOCAL_SITES = {"SHOPPING": shop, "REDDIT": forum}  # placeholder -> offline stand-in
SHOWN_AS = {"SHOPPING": "http://localhost:7770", "REDDIT": "http://localhost:9999"}  # the agent's view
MAX_TREE_CHARS = 12000
MAX_AVAILABLE = 64
MAX_TYPE_CHARS = 2000  # text one `type` may enter (typing runs ~3,000 characters a second)
MAX_ARG_CHARS = 2048  # a URL for `goto`, the keys for `press`
LEAVING = ("click", "goto")  # off the expert's path, the actions whose new page `go_back` undoes
ACTION_SECONDS = float(os.environ.get("WEBARENA_ACTION_SECONDS", 20))  # one action's browser work
BROWSER_SECONDS = 40.0  # a whole reset or step on the browser thread (below servers/common.py's limit)


# ---------------------------------------------------------------------------------------------
# The browser: one Playwright + Chromium on a dedicated thread with its own event loop
# ---------------------------------------------------------------------------------------------


class Browser:
    def __init__(self):
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.pw = self.chromium = None
        self._start_lock = threading.Lock()
        self._launch_lock: asyncio.Lock | None = None

    def run(self, coro, timeout: float = BROWSER_SECONDS):
        """Run `coro` on the browser thread and wait for its result (called from request threads).
        Past `timeout`, or when this thread is interrupted (servers/common.py's time limit), the
        browser task is cancelled: timed-out work never keeps the browser busy."""
        with self._start_lock:
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
                self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="browser")
                self.thread.start()
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        deadline = time.monotonic() + timeout
        try:
            while not future.done():  # short waits, so that an interrupt is delivered promptly
                if time.monotonic() >= deadline:
                    raise EnvError(
                        f"the browser did not finish within {timeout:g} s; the work was cancelled", 504
                    )
                concurrent.futures.wait([future], timeout=min(0.25, deadline - time.monotonic()))
            return future.result()
        finally:
            future.cancel()  # a no-op once done

    async def get(self):
        """The shared Chromium, launched on first use and again if it crashed or was closed."""
        if self._launch_lock is None:
            self._launch_lock = asyncio.Lock()
        async with self._launch_lock:
            if self.chromium is None or not self.chromium.is_connected():
                if self.pw is None:
                    self.pw = await async_playwright().start()
                self.chromium = await self.pw.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS
                )
            return self.chromium

    async def _stop(self):
        if self.chromium is not None:
            with contextlib.suppress(Exception):
                await self.chromium.close()
        if self.pw is not None:
            with contextlib.suppress(Exception):
                await self.pw.stop()
        self.chromium = self.pw = None

    def stop(self):
        if self.loop is None:
            return
        with contextlib.suppress(Exception):
            self.run(self._stop(), timeout=20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop = self.thread = None


BROWSER = Browser()


# ---------------------------------------------------------------------------------------------
# Tasks: WebArena config files with site placeholders
# ---------------------------------------------------------------------------------------------

_site_urls: dict[str, str] = {}
_local_urls: dict[str, str] = {}  # placeholder -> base URL of a local site this process started
_sites_lock = threading.Lock()


def site_urls() -> dict[str, str]:
    """placeholder name -> base URL: $SHOPPING etc. when set, else the local site (started once)."""
    with _sites_lock:
        if not _site_urls:
            for var in SITE_VARS:
                if os.environ.get(var):
                    _site_urls[var] = os.environ[var].rstrip("/")
                elif var in LOCAL_SITES:
                    _site_urls[var] = _local_urls[var] = start_site(LOCAL_SITES[var].app)
        return dict(_site_urls)


def _swap_origin(url: str, pairs) -> str:
    """`url` with the first matching `from` base URL of (from, to) pairs replaced by its `to`."""
    for old, new in pairs:
        if url.startswith(old) and url[len(old) : len(old) + 1] in ("", "/", "?", "#"):
            return new + url[len(old) :]
    return url


def shown(url: str) -> str:
    """A URL as the agent reads it: a local site's real address -> its fixed one (SHOWN_AS)."""
    site_urls()
    return _swap_origin(url, [(base, SHOWN_AS[var]) for var, base in _local_urls.items()])


def actual(url: str) -> str:
    """A URL the agent wrote -> the address the browser uses (shown's inverse)."""
    site_urls()
    return _swap_origin(url, [(SHOWN_AS[var], base) for var, base in _local_urls.items()])


def fill(config: dict) -> dict:
    """Replace `__SHOPPING__`-style placeholders with site URLs (as WebArena's generate_test_data)."""
    text = json.dumps(config)
    urls = site_urls()
    for var in SITE_VARS:  # SHOPPING_ADMIN before SHOPPING
        if f"__{var}__" in text:
            if var not in urls:
                raise EnvError(
                    f"task {config.get('task_id')} needs the site __{var}__: set the environment "
                    f"variable {var} to its URL (e.g. {var}=http://my-webarena-host:7770)"
                )
            text = text.replace(f"__{var}__", urls[var])
    return json.loads(text)


def load_tasks(task_dir: str) -> list[dict]:
    """Every task in `task_dir/*.json` (one task or a list of tasks per file), sorted by task_id."""
    tasks = []
    for path in sorted(glob.glob(os.path.join(task_dir, "*.json"))):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:  # one broken file does not take the others down
            print(f"webarena: skipping {path}: {e}")
            continue
        for t in data if isinstance(data, list) else [data]:
            if isinstance(t, dict):
                tasks.append(dict(t, _file=os.path.basename(path)))
    tasks.sort(key=lambda t: (t.get("task_id", 0) if isinstance(t.get("task_id", 0), int) else 0, t["_file"]))
    return tasks


_tasks: list[dict] | None = None


REQUIRED = {"intent": str, "start_url": str, "eval": dict}


def check_task(task: dict) -> dict:
    """A task config has the keys the environment reads, with the right types, or it is a 400."""
    bad = [k for k, t in REQUIRED.items() if not isinstance(task.get(k), t)]
    ev = task.get("eval") if isinstance(task.get("eval"), dict) else {}
    if not isinstance(ev.get("eval_types"), list) or not all(
        t in ("string_match", "url_match", "program_html") for t in ev.get("eval_types", [])
    ):
        bad.append("eval.eval_types")
    if bad:
        raise EnvError(
            f"task {task.get('_file', '?')} is not a valid WebArena task config: "
            f"{', '.join(bad)} missing or of the wrong type"
        )
    return task


def task_for(idx) -> dict:
    """`idx`: an index into the sorted task list, or the name of a task in the task folder (its
    file name, with or without .json, or its task_id). Nothing outside that folder is opened."""
    global _tasks
    if _tasks is None:
        _tasks = load_tasks(TASK_DIR)
    if isinstance(idx, int):
        if not 0 <= idx < len(_tasks):
            raise EnvError(f"task index {idx} is out of range: {len(_tasks)} tasks in {TASK_DIR}")
        return check_task(_tasks[idx])
    name = str(idx)
    for t in _tasks:
        if name in (t["_file"], t["_file"].removesuffix(".json"), str(t.get("task_id"))):
            return check_task(t)
    raise EnvError(
        f"no task named {name[:200]!r} in the task folder (give an index, a task_id, or the "
        "name of a config file there)"
    )


# ---------------------------------------------------------------------------------------------
# Observation: Chrome's accessibility tree as WebArena prints it
# ---------------------------------------------------------------------------------------------

SKIP_ROLES = {"generic", "none", "presentation", "InlineTextBox", "LineBreak", "ListMarker"}
PROPS = ("focused", "required", "checked", "selected", "expanded", "disabled", "hasPopup", "level")


async def accessibility_tree(cdp) -> tuple[str, dict[int, dict]]:
    """(`[id] role 'name'` lines indented by depth, id -> {role, name, backend}) of the page's tree:
    the ids number the kept lines 1, 2, ... (the DOM's backend ids differ from load to load)."""
    nodes = (await cdp.send("Accessibility.getFullAXTree"))["nodes"]
    by_id = {n["nodeId"]: n for n in nodes}
    lines, elements = [], {}

    def walk(node, depth, parent_name):
        role = node.get("role", {}).get("value", "")
        name = str(node.get("name", {}).get("value", "")).strip()
        bid = node.get("backendDOMNodeId")
        keep = (
            not node.get("ignored")
            and role not in SKIP_ROLES
            and bid is not None
            and not (role == "StaticText" and (not name or name == parent_name))
        )
        if keep:
            props = [
                f"{p['name']}: {p['value'].get('value')}"
                for p in node.get("properties", [])
                if p["name"] in PROPS
                and p["value"].get("value") not in (None, False, "false")
                and (p["name"] != "level" or role == "heading")
            ]
            if role in ("textbox", "searchbox", "combobox") and node.get("value", {}).get("value"):
                props.insert(0, f"value: {node['value']['value']!r}")
            eid = len(elements) + 1
            lines.append("\t" * depth + f"[{eid}] {role} {name!r}" + "".join(" " + p for p in props))
            elements[eid] = {"role": role, "name": name, "backend": bid}
        for child in node.get("childIds", []):
            if child in by_id:
                walk(by_id[child], depth + 1 if keep else depth, name if keep else parent_name)

    if nodes:
        walk(nodes[0], 0, "")
    text = "\n".join(lines)
    if len(text) > MAX_TREE_CHARS:
        text = text[:MAX_TREE_CHARS] + "\n[... the page is longer; scroll or search to see more ...]"
    return text, elements


# ---------------------------------------------------------------------------------------------
# Actions: WebArena's id-based action strings
# ---------------------------------------------------------------------------------------------

FENCE = re.compile(r"```(.*?)```", re.S)
ACTIONS = {  # name -> its pattern after the name (WebArena's browser_env/actions.py grammar)
    "click": re.compile(r"\[(\d+)\]$"),
    "hover": re.compile(r"\[(\d+)\]$"),
    "type": re.compile(r"\[(\d+)\] ?\[(.*)\] ?\[([01])\]$", re.S),
    "press": re.compile(r"\[(.+)\]$"),
    "scroll": re.compile(r"\[?(up|down)\]?$"),
    "new_tab": re.compile(r"$"),
    "tab_focus": re.compile(r"\[(\d+)\]$"),
    "close_tab": re.compile(r"$"),
    "goto": re.compile(r"\[(.+)\]$"),
    "go_back": re.compile(r"$"),
    "go_forward": re.compile(r"$"),
    "stop": re.compile(r"(?:\[(.*)\])?$", re.S),
}
USAGE = (
    "click [id], type [id] [text] [0|1], hover [id], press [keys], scroll [up|down], new_tab, "
    "tab_focus [n], close_tab, goto [url], go_back, go_forward, stop [answer]"
)
KEYS = {
    "ctrl": "Control",
    "control": "Control",
    "cmd": "Meta",
    "meta": "Meta",
    "alt": "Alt",
    "shift": "Shift",
    "enter": "Enter",
    "return": "Enter",
    "tab": "Tab",
    "esc": "Escape",
    "escape": "Escape",
    "backspace": "Backspace",
    "delete": "Delete",
    "space": "Space",
    "pageup": "PageUp",
    "pagedown": "PageDown",
    "home": "Home",
    "end": "End",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "arrowup": "ArrowUp",
    "arrowdown": "ArrowDown",
    "arrowleft": "ArrowLeft",
    "arrowright": "ArrowRight",
}


class ActionError(Exception):
    """The reply is not a valid action here; the message tells the agent why."""


def parse_action(reply: str) -> tuple[str, tuple]:
    """The first fenced block of the reply as (name, arguments)."""
    m = FENCE.search(reply)
    if m is None:
        raise ActionError(
            "no action found: put exactly one action inside a ``` fenced block, e.g. ```click [12]```"
        )
    text = m.group(1).strip()
    name, rest = re.match(r"(\w*)\s*(.*)$", text, re.S).groups()
    if name not in ACTIONS:
        raise ActionError(f"unknown action {text[:200]!r}; the actions are: {USAGE}")
    if name == "type" and not re.search(r"\[[01]\]$", rest):
        rest += " [1]"  # WebArena: Enter is pressed after typing unless [0] is given
    args = ACTIONS[name].match(rest)
    if args is None:
        raise ActionError(f"cannot parse {text[:200]!r}; the actions are: {USAGE}")
    if name == "type" and len(args.group(2)) > MAX_TYPE_CHARS:
        raise ActionError(
            f"the text to type is {len(args.group(2))} characters long; at most {MAX_TYPE_CHARS}"
        )
    if name in ("goto", "press") and len(args.group(1)) > MAX_ARG_CHARS:
        raise ActionError(f"the argument of {name} is longer than {MAX_ARG_CHARS} characters")
    return name, args.groups()


def origin(url: str) -> str | None:
    """scheme://host:port of an http(s) URL, else None (file:, data:, chrome:, javascript:, ...)."""
    try:
        u = urlsplit(url.strip())
        port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    except ValueError:
        return None
    if u.scheme not in ("http", "https") or not u.hostname:
        return None
    return f"{u.scheme}://{u.hostname.lower()}:{port}"


def task_origins(config: dict) -> set[str]:
    """The origins a task may visit: its start URLs' and its sites' (`shopping` -> $SHOPPING)."""
    urls = site_urls()
    allowed = [u for u in config["start_url"].split(" |AND| ")]
    allowed += [
        urls[s.upper()] for s in config.get("sites") or [] if isinstance(s, str) and s.upper() in urls
    ]
    return {o for o in map(origin, allowed) if o}


def playwright_keys(keys: str) -> str:
    return "+".join(KEYS.get(k.strip().lower(), k.strip()) for k in keys.split("+"))


# ---------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------


class WebArenaEnv:
    """One browser context (its tabs, cookies and site state) playing one task at a time."""

    def __init__(self):
        self.context = None
        self.pages: list = []
        self.active = 0
        self.cdp: dict = {}  # page -> its CDP session
        self.world: str | None = None
        self.task: dict | None = None
        self.elements: dict[int, dict] = {}
        self.tree, self.previous, self.done, self.score = "", "None", False, 0.0
        self.origins: set[str] = set()  # where this task's browser may go
        self.refused: list[str] = []  # what the browser was kept from since the last answer
        self.judge = webarena_eval.load_judge()
        self.ref_pos, self.off_path = 0, False  # the expert's place in the task's reference solution
        # off the path: the URL where the agent left it, and the actions it took since
        self.detour: tuple[str, list[str]] = ("", [])

    # --- the protocol (request threads) ----------------------------------------------------

    def reset(self, idx) -> dict:
        task = task_for(idx)
        return BROWSER.run(self._reset(task))

    def allowed(self, url: str) -> bool:
        return url == "about:blank" or origin(url) in self.origins

    def step(self, reply: str) -> dict:  # (servers/common.py answers a step before reset or after the end)
        return BROWSER.run(self._step(reply))

    def observation(self) -> str:
        return self._observation()

    def close(self) -> None:
        BROWSER.run(self._close_context())
        self._drop_world()

    # --- on the browser thread -------------------------------------------------------------

    async def _reset(self, raw: dict) -> dict:
        config = fill(raw)
        await self._close_context()
        self._drop_world()
        chromium = await BROWSER.get()
        self.origins, self.refused = task_origins(config), []
        self.context = await chromium.new_context(viewport=VIEWPORT, accept_downloads=False)
        self.context.set_default_timeout(15000)
        await self.context.route("**/*", self._route)  # the browser's own gate: nothing else gets out
        self.context.on("page", lambda p: p.on("download", self._download))
        storage = config.get("storage_state")
        if storage and os.path.isfile(storage):  # a real WebArena task's login cookies
            await self.context.add_cookies(json.load(open(storage)).get("cookies", []))
        self.world = uuid.uuid4().hex
        urls = site_urls()
        for var, site in LOCAL_SITES.items():
            if urls.get(var, "").startswith("http://127.0.0.1"):
                logged_in = config.get("require_login") and var.lower() in config.get("sites", [])
                site.WORLDS.fresh(self.world, user=site.DEFAULT_USER if logged_in else None)
                await self.context.add_cookies([{"name": COOKIE, "value": self.world, "url": urls[var]}])
        page = await self.context.new_page()
        self.pages, self.active, self.cdp = [page], 0, {}
        start = config["start_url"].split(" |AND| ")  # WebArena opens one tab per start URL
        await page.goto(start[0])
        for url in start[1:]:
            page = await self.context.new_page()
            self.pages.append(page)
            await page.goto(url)
            self.active = len(self.pages) - 1
        self.task, self.previous, self.done, self.score = config, "None", False, 0.0
        self.ref_pos, self.off_path, self.detour = 0, False, ("", [])
        await self._observe()
        self.refused = []
        return self._answer(
            0.0,
            category=(config.get("sites") or ["unknown"])[0],
            task_id=config.get("task_id"),
            intent=config["intent"],
            eval_types=config["eval"]["eval_types"],
        )

    async def _route(self, route) -> None:
        url = route.request.url
        if self.allowed(url):
            await route.continue_()
        else:
            if route.request.is_navigation_request():
                self.refused.append(url)
            await route.abort("blockedbyclient")

    def _download(self, download) -> None:
        self.refused.append(f"a download of {shown(download.url)}")

    def _refusals(self) -> str:
        """A note for the observation: what the browser was kept from, and why."""
        if not self.refused:
            return ""
        what = ", ".join(dict.fromkeys(shown(u)[:200] for u in self.refused))
        self.refused, sites = [], ", ".join(sorted(map(shown, self.origins)))
        return (
            f"Refused: {what}. This task stays on its own sites ({sites}); "
            "other hosts, file:, data:, chrome: and javascript: URLs, and downloads are not allowed."
        )

    async def _step(self, reply: str) -> dict:
        if self.context is None or not self.context.browser or not self.context.browser.is_connected():
            self.done = True
            return self._answer(0.0, note="The browser crashed; reset the instance to start again.")
        try:
            name, args = parse_action(reply)
            if name == "goto":
                args = (actual(args[0]),)
            if name in ("click", "hover", "type") and int(args[0]) not in self.elements:
                raise ActionError(
                    f"there is no element [{args[0]}] on this page; use an id from the "
                    "accessibility tree above"
                )
            if name == "goto" and not self.allowed(args[0]):
                self.refused.append(args[0])
                raise ActionError(self._refusals())
            self._track(name, args)
            if name == "stop":
                answer = args[0] or ""
                self.previous = f"stop [{answer}]"
                self.score, notes = await webarena_eval.evaluate(self.task, answer, self.page, self.judge)
                self.done = True
                await self._observe()
                return self._answer(self.score, eval_notes=notes)
            self.previous = FENCE.search(reply).group(1).strip()[:MAX_ARG_CHARS]
            await asyncio.wait_for(self._act(name, args), ACTION_SECONDS)  # cancelled past it
        except ActionError as e:
            return self._answer(0.0, note=f"Invalid action: {e}")
        except Exception as e:  # a Playwright error (timeout, bad key, bad URL): the page is as it was
            failed = (
                f"did not finish within {ACTION_SECONDS:g} s and was cancelled"
                if isinstance(e, asyncio.TimeoutError)
                else f"failed: {(str(e).splitlines() or [''])[0]}"
            )
            if isinstance(e, asyncio.TimeoutError):  # stop the page loading what the action started
                with contextlib.suppress(Exception):
                    await asyncio.wait_for((await self._cdp(self.page)).send("Page.stopLoading"), 5)
            await self._observe()
            return self._answer(0.0, note="\n".join(filter(None, [f"The action {failed}", self._refusals()])))
        await self._observe()
        return self._answer(0.0, note=self._refusals())

    @property
    def page(self):
        return self.pages[self.active]

    async def _act(self, name: str, args: tuple) -> None:
        page = self.page
        if name == "new_tab":
            self.pages.append(await self.context.new_page())
            self.active = len(self.pages) - 1
        elif name == "tab_focus":
            n = int(args[0])
            if not 0 <= n < len(self.pages):
                raise ActionError(f"there is no tab {n}; the tabs are 0..{len(self.pages) - 1}")
            self.active = n
            await self.page.bring_to_front()
        elif name == "close_tab":
            await self.pages.pop(self.active).close()
            if not self.pages:
                self.pages.append(await self.context.new_page())
            self.active = len(self.pages) - 1
            await self.page.bring_to_front()
        elif name == "goto":
            await page.goto(args[0])
        elif name == "go_back":
            await page.go_back()
        elif name == "go_forward":
            await page.go_forward()
        else:
            await self._on_page(page, name, args)

    async def _on_page(self, page, name: str, args: tuple) -> None:
        """click, hover, type, press, scroll: real mouse and keyboard input; then wait for any
        navigation the input started (a link, a submitted form) to finish loading."""
        started, loaded = asyncio.Event(), asyncio.Event()

        def on_request(request):
            if request.is_navigation_request() and request.frame == page.main_frame:
                started.set()

        def on_load(*_):  # also a navigation that ended without a page: refused, or a download
            loaded.set()

        def on_failed(request):
            if request.is_navigation_request() and request.frame == page.main_frame:
                loaded.set()

        page.on("request", on_request)
        page.on("load", on_load)
        page.on("requestfailed", on_failed)
        page.on("download", on_load)
        try:
            if name in ("click", "hover", "type"):
                x, y = await self._centre(page, int(args[0]))
                if name == "hover":
                    await page.mouse.move(x, y)
                else:
                    await page.mouse.click(x, y)
                if name == "type":
                    await page.keyboard.press("Control+A")  # replace what the field holds
                    await page.keyboard.type(args[1])
                    if args[2] == "1":
                        await page.keyboard.press("Enter")
            elif name == "press":
                await page.keyboard.press(playwright_keys(args[0]))
            elif name == "scroll":
                sign = "-" if args[0] == "up" else ""
                await page.evaluate(f"window.scrollBy(0, {sign}document.documentElement.clientHeight)")
            # Mouse and keyboard input returns before a navigation it causes is reported: wait a
            # moment for one (longer where one is likely: a link, a button, Enter), then for its load.
            likely = (
                name == "click"
                and self.elements[int(args[0])]["role"] in ("link", "button")
                or name == "type"
                and args[2] == "1"
                or name == "press"
                and "enter" in args[0].lower()
            )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(started.wait(), 3.0 if likely else 0.05)
            if started.is_set():
                await asyncio.wait_for(loaded.wait(), 15)
            await page.wait_for_load_state("load")
            if started.is_set() and not loaded.is_set():  # it started late, on a busy machine
                await asyncio.wait_for(loaded.wait(), 15)
                await page.wait_for_load_state("load")
        finally:
            page.remove_listener("request", on_request)
            page.remove_listener("load", on_load)
            page.remove_listener("requestfailed", on_failed)
            page.remove_listener("download", on_load)

    async def _centre(self, page, eid: int) -> tuple[float, float]:
        """Scroll element [eid] into view and return its centre in viewport pixels."""
        cdp = await self._cdp(page)
        backend_id = self.elements[eid]["backend"]
        obj = (await cdp.send("DOM.resolveNode", {"backendNodeId": backend_id}))["object"]
        box = await cdp.send(
            "Runtime.callFunctionOn",
            {
                "objectId": obj["objectId"],
                "returnByValue": True,
                "functionDeclaration": "function() {"
                " const e = this.nodeType === 1 ? this : this.parentElement;"
                " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                " return [r.x + r.width / 2, r.y + r.height / 2, r.width * r.height]; }",
            },
        )
        x, y, area = box["result"]["value"]
        if area == 0:
            raise ActionError(f"element [{eid}] is not visible")
        return x, y

    async def _cdp(self, page):
        if page not in self.cdp:
            self.cdp[page] = await self.context.new_cdp_session(page)
        return self.cdp[page]

    async def _observe(self) -> None:
        self.pages = [p for p in self.pages if not p.is_closed()] or [await self.context.new_page()]
        self.active = min(self.active, len(self.pages) - 1)
        for p in self.pages:  # a tab outside the task's sites (e.g. a blocked page's error page)
            if not self.allowed(p.url):
                self.refused.append(p.url)
                with contextlib.suppress(Exception):
                    await p.goto("about:blank")
        tabs = []
        for i, p in enumerate(self.pages):
            title = await p.title() if p.url != "about:blank" else "New Tab"
            tabs.append(f"Tab {i}{' (current)' if i == self.active else ''}: {title}")
        tree, self.elements = await accessibility_tree(await self._cdp(self.page))
        self.tree = " | ".join(tabs) + "\n\n" + tree

    async def _close_context(self) -> None:
        if self.context is not None:
            with contextlib.suppress(Exception):
                await self.context.close()
        self.context, self.pages, self.cdp, self.elements = None, [], {}, {}

    def _drop_world(self) -> None:
        if self.world is not None:
            for site in LOCAL_SITES.values():
                site.WORLDS.drop(self.world)
            self.world = None

    # --- the expert (POST /expert: the trainer's, never the agent's) ----------------------

    def _reference_step(self, k: int) -> str | None:
        """Reference step k as an action string on the current page (None: its element is not here)."""
        step = self.task["reference_solution"][k]
        if isinstance(step, str):
            return step
        kind, role, name, *rest = step
        bid = next((b for b, e in self.elements.items() if e["role"] == role and e["name"] == name), None)
        return None if bid is None else f"{kind} [{bid}]" + "".join(f" [{x}]" for x in rest)

    def _start_url(self) -> str:
        return self.task["start_url"].split(" |AND| ")[0]

    def _track(self, name: str, args: tuple) -> None:
        """Bookkeeping for the expert (nothing the agent sees): was this executed action the next
        reference step? A `goto` to the start page puts the reference back at its first step."""
        solution = self.task.get("reference_solution") or []
        if name == "goto" and args[0] == self._start_url():
            self.ref_pos, self.off_path, self.detour = 0, False, ("", [])
            return
        self._settle()
        if self.off_path:
            self.detour[1].append(name)
            return
        step = self._reference_step(self.ref_pos) if self.ref_pos < len(solution) else None
        if step is not None and parse_action(f"```{step}```") == (name, args):
            self.ref_pos += 1
        else:
            self.off_path, self.detour = True, (self.page.url, [name])

    def _settle(self) -> None:
        """Back on the path: the detour was one page away and `go_back` returned to where it began."""
        left, since = self.detour
        if self.off_path and since[1:] == ["go_back"] and since[0] in LEAVING and self.page.url == left:
            self.off_path, self.detour = False, ("", [])

    def expert(self) -> dict:
        """{"action", "thought", "on_path"}: the next step of the task's reference solution; once the
        agent left it, `go_back` where one step back returns to it, else `goto [start_url]`."""
        solution = self.task.get("reference_solution")
        if not solution:
            raise EnvError(f"task {self.task.get('task_id')} has no reference solution, so no expert", 404)
        self._settle()
        left, since = self.detour
        if self.off_path and len(since) == 1 and since[0] in LEAVING and self.page.url != left:
            return {
                "action": "```go_back```",
                "on_path": False,
                "thought": "This page is not on my way; I go back to the page before.",
            }
        step = None if self.off_path or self.ref_pos >= len(solution) else self._reference_step(self.ref_pos)
        if step is None:
            return {
                "action": f"```goto [{shown(self._start_url())}]```",
                "on_path": False,
                "thought": "This is not the way I planned; I start again from the start page.",
            }
        raw = solution[self.ref_pos]
        if isinstance(raw, str) and raw.startswith("stop"):
            answer = parse_action(f"```{raw}```")[1][0] or ""
            why = (
                f"The answer is {answer}, so I stop with it."
                if answer
                else "The objective is done, so I stop."
            )
        elif isinstance(raw, str):
            why = "That is the next step."
        else:
            verb = {"click": "click", "hover": "hover over", "type": "fill in"}[raw[0]]
            why = f"To reach the objective, I {verb} the {raw[1]} '{raw[2]}'" + (
                f" with '{raw[3]}'." if raw[0] == "type" else "."
            )
        return {"action": f"```{step}```", "thought": why, "on_path": True}

    # --- answers ---------------------------------------------------------------------------

    def _observation(self) -> str:
        if self.task is None:
            return "Reset the environment to start a task."
        url = self.page.url if self.pages else ""
        return (
            f"OBSERVATION:\n{self.tree}\nURL: {shown(url)}\nOBJECTIVE: {self.task['intent']}\n"
            f"PREVIOUS ACTION: {self.previous}"
        )

    def _answer(self, reward: float, note: str = "", **extra) -> dict:
        obs = self._observation()
        return {
            "observation": f"{note}\n\n{obs}" if note else obs,
            "reward": reward,
            "score": self.score,
            "done": self.done,
            "available_actions": [] if self.done else self.available_actions(),
            **extra,
        }

    def available_actions(self) -> list[str]:
        """A bounded list of complete, valid replies for this page (for a small policy's masked
        sampling): click each link and button, type phrases of the objective into each text field,
        navigation, and stop with each short text on the page as the answer."""
        acts, words = [], [w for w in re.findall(r"[\w'-]+", self.task["intent"]) if len(w) > 3][:4]
        phrases = re.findall(r"[\"“']([^\"”']{2,40})[\"”']", self.task["intent"]) + words
        for bid, e in self.elements.items():
            if e["role"] in ("link", "button", "checkbox", "radio", "tab", "menuitem"):
                acts.append(f"```click [{bid}]```")
            elif e["role"] in ("textbox", "searchbox", "combobox"):
                acts += [f"```type [{bid}] [{p}] [1]```" for p in phrases[:3]]
        acts += ["```scroll [down]```", "```go_back```", "```stop []```"]
        acts += [
            f"```stop [{e['name']}]```"
            for e in self.elements.values()
            if e["role"] == "StaticText" and len(e["name"]) <= 40
        ]
        return list(dict.fromkeys(acts))[:MAX_AVAILABLE]


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------


def _memory_kb(pid: int, field: str) -> int:
    path = f"/proc/{pid}/smaps_rollup" if field == "Pss" else f"/proc/{pid}/status"
    with contextlib.suppress(OSError):
        for line in open(path):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# Each instance is a browser context (~10 MB and up per tab): at most 64 by default (--max-instances).
app = build_app("WebArena", WebArenaEnv, max_instances=64)
add_openenv(app, "webarena")  # and OpenEnv's WebSocket sessions, HTTP endpoints and task API


@app.get("/browser")
def browser_processes():
    """The browser's processes and their memory (PSS and RSS summed), for benchmarks and tests."""
    pids = descendants(os.getpid())
    return {
        "pids": pids,
        "instances": len(app.state.table.envs),
        "pss_mb": round(sum(_memory_kb(p, "Pss") for p in pids) / 1024, 1),
        "rss_mb": round(sum(_memory_kb(p, "VmRSS") for p in pids) / 1024, 1),
    }


_inner_lifespan = app.router.lifespan_context


@contextlib.asynccontextmanager
async def _lifespan(a):
    site_urls()  # start the local sites, and the browser, before the first request
    BROWSER.run(BROWSER.get())
    async with _inner_lifespan(a):  # on the way out: close every instance's context ...
        yield
    BROWSER.stop()  # ... then Chromium and Playwright's driver


app.router.lifespan_context = _lifespan

if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--chromium", help="Chromium executable (default $WEBARENA_CHROMIUM or /usr/bin/chromium)"
    )
    parser.add_argument(
        "--tasks", help="directory of WebArena task configs (default $WEBARENA_TASKS or the offline tasks)"
    )
    ours, rest = parser.parse_known_args()
    CHROMIUM = ours.chromium or CHROMIUM
    TASK_DIR = ours.tasks or TASK_DIR
    serve(app, argv=rest, description="WebArena environment server (AgentGym protocol)")
