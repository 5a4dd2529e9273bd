"""WebArena in a real browser (Playwright + Chromium): evaluators, actions, isolation, lifetime.

Every test drives `servers/webarena.py` over HTTP, as the agent does, on the offline shop and forum.
"""

import http.server
import json
import os
import re
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from envs import ENVS, EnvServer
from servers import webarena_eval

pytestmark = pytest.mark.skipif(
    not (shutil.which("chromium") or os.environ.get("WEBARENA_CHROMIUM")),
    reason="needs Chromium (apt-get install -y chromium)",
)

TASK_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "servers", "webarena_tasks"
)

# A scripted solution of every offline task: ("click"|"hover", role, name), ("type", role, name, text,
# enter) with the element found by role and name on the current page, or a literal action string.
SOLUTIONS = {
    0: ["stop [$34.99]"],
    1: [("click", "link", "Books"), "stop [6]"],
    2: [("click", "link", "Outdoor"), "stop [Summit Trekking Poles]"],
    3: [("click", "link", "Electronics"), "stop [Volt USB-C Charger]"],
    4: [("click", "link", "Kitchen"), ("click", "link", "Cast Iron Skillet"), "stop [SKU-KIT-010]"],
    5: [("click", "link", "Books"), ("click", "link", "Python for Gardeners"), "stop [Chloe]"],
    6: [("click", "link", "My Account"), "stop [$78.50]"],
    7: [("click", "link", "My Account"), "stop [3]"],
    8: ["stop [N/A]"],
    9: [("click", "link", "My Account"), "stop [Springfield]"],
    10: [("click", "link", "Electronics"), ("click", "link", "Nimbus Webcam"), "stop []"],
    11: [("type", "textbox", "Search products", "kettle", 1), "stop []"],
    12: [("click", "link", "Kitchen"), "stop []"],
    13: [("click", "link", "Electronics"), ("click", "link", "Price: low to high"), "stop []"],
    14: [("click", "link", "My Account"), ("click", "link", "Order #1002"), "stop []"],
    15: [
        ("click", "link", "Kitchen"),
        ("click", "link", "Copper Kettle"),
        ("click", "button", "Add to Cart"),
        "stop []",
    ],
    16: [
        ("click", "link", "Kitchen"),
        ("click", "link", "Bamboo Cutting Board"),
        ("type", "textbox", "Quantity", "2", 0),
        ("click", "button", "Add to Cart"),
        "stop []",
    ],
    17: [
        ("click", "link", "Books"),
        ("click", "link", "Learning to Sail"),
        ("type", "textbox", "Rating (1 to 5)", "5", 0),
        ("type", "textbox", "Review", "Perfect for beginners", 0),
        ("click", "button", "Submit Review"),
        "stop []",
    ],
    18: [
        ("click", "link", "Outdoor"),
        ("click", "link", "Ember Camp Stove"),
        ("click", "button", "Add to Wishlist"),
        "stop []",
    ],
    19: [("click", "link", "My Account"), ("type", "textbox", "City", "Pittsburgh", 1), "stop []"],
    20: [
        ("click", "link", "Sign In"),
        ("type", "textbox", "Username", "emma", 0),
        ("type", "textbox", "Password", "emma2024", 1),
        "stop []",
    ],
    21: [("click", "link", "travel"), "stop [dave]"],
    22: [("click", "link", "cooking"), "stop [2]"],
    23: [("click", "link", "cooking"), ("click", "link", "Top"), "stop [Cast iron seasoning tips]"],
    24: ["stop [technology]"],
    25: [
        ("click", "link", "technology"),
        ("click", "link", "Is a mechanical keyboard worth it?"),
        "stop [Mine did wonders for my typing speed.]",
    ],
    26: [("click", "link", "cooking"), "stop []"],
    27: [("type", "textbox", "Search posts", "sourdough", 1), "stop []"],
    28: [
        ("click", "link", "travel"),
        ("click", "link", "Packing light for a hiking trip"),
        ("click", "link", "erin"),
        "stop []",
    ],
    29: [("click", "link", "technology"), ("click", "link", "Top"), "stop []"],
    30: [
        ("click", "link", "cooking"),
        ("click", "link", "Sourdough starter died again"),
        ("type", "textbox", "Comment", "Try a warmer spot.", 0),
        ("click", "button", "Post comment"),
        "stop []",
    ],
    31: [
        ("click", "link", "books"),
        ("click", "link", "Submit a new post"),
        ("type", "textbox", "Title", "Favourite poetry collections", 0),
        ("click", "button", "Create post"),
        "stop []",
    ],
    32: [
        ("click", "link", "technology"),
        ("click", "link", "Linux on an old laptop"),
        ("click", "button", "Upvote"),
        "stop []",
    ],
    33: [
        ("click", "link", "Log in"),
        ("type", "textbox", "Username", "alex", 0),
        ("type", "textbox", "Password", "forum123", 1),
        "stop []",
    ],
    34: [
        ("click", "link", "technology"),
        ("click", "link", "Is a mechanical keyboard worth it?"),
        ("click", "button", "Upvote"),
        "stop []",
    ],
}


class Agent:
    """One instance on the server, driven with fenced replies."""

    def __init__(self, url: str):
        self.url, self.http = url, requests.Session()
        self.id = self.http.post(url + "/create", json={}).json()["id"]
        self.last: dict = {}

    def reset(self, idx) -> dict:
        self.last = self.post("/reset", {"env_idx": self.id, "seed": 0, "idx": idx})
        return self.last

    def post(self, path: str, body: dict) -> dict:
        r = self.http.post(self.url + path, json=body, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()

    def id_of(self, role: str, name: str) -> int:
        m = re.search(rf"\[(\d+)\] {role} {re.escape(repr(name))}", self.last["observation"])
        assert m, f"no {role} {name!r} in\n{self.last['observation']}"
        return int(m.group(1))

    def do(self, step) -> dict:
        if isinstance(step, tuple):
            kind, role, name, *rest = step
            step = f"{kind} [{self.id_of(role, name)}]" + "".join(f" [{x}]" for x in rest)
        reply = step if step.startswith("```") else f"I will do this.\n```{step}```"
        self.last = self.post("/step", {"env_idx": self.id, "action": reply})
        return self.last

    def solve(self, task: int) -> dict:
        self.reset(task)
        for step in SOLUTIONS[task]:
            out = self.do(step)
        return out

    def close(self):
        self.post("/close", {"env_idx": self.id})


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("servers.webarena")


@pytest.fixture(scope="module")
def agents(server):
    pool = [Agent(server.url) for _ in range(8)]
    yield pool
    for a in pool:
        a.close()


def test_every_offline_task_has_a_solution_that_scores_1_on_8_concurrent_instances(agents):
    """Also: 8 instances work at once, each on its own state (task 15 and 16 both fill a cart,
    30-34 all change the forum, and each instance's evaluation sees only its own changes)."""
    n = len(os.listdir(TASK_DIR))
    assert n >= 30 and sorted(SOLUTIONS) == list(range(n))
    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda k: [(t, agents[k].solve(t)) for t in range(k, n, 8)], range(8)))
    scores = {t: out["reward"] for chunk in results for t, out in chunk}
    assert scores == {t: 1.0 for t in range(n)}, {t: s for t, s in scores.items() if s != 1.0}
    assert all(out["done"] for chunk in results for _, out in chunk)


def test_concurrent_instances_do_not_see_each_others_state(agents):
    products = [
        "Copper Kettle",
        "Aurora Desk Lamp",
        "Volt USB-C Charger",
        "Nimbus Webcam",
        "Orbit Bluetooth Speaker",
        "Pulse Wireless Earbuds",
        "Cast Iron Skillet",
        "Chef Pro Knife Set",
    ]

    def add_to_cart(k):
        a = agents[k]
        a.reset(0)
        a.do(("type", "textbox", "Search products", products[k], 1))
        a.do(("click", "link", products[k]))
        a.do(("click", "button", "Add to Cart"))
        return a.last["observation"].split("\nURL: ")[0]  # the page only (the objective names a product)

    with ThreadPoolExecutor(8) as ex:
        carts = list(ex.map(add_to_cart, range(8)))
    for k, cart in enumerate(carts):
        assert "Cart (1)" in cart and products[k] in cart
        assert not any(p in cart for p in products if p != products[k]), cart
    assert "Cart (0)" in agents[0].reset(0)["observation"]  # and a reset starts from the seed state


@pytest.mark.parametrize(
    "task,solved,unsolved",
    [
        (1, "stop [6]", "stop [5]"),  # string_match, exact_match
        (0, "stop [It costs $34.99.]", "stop [$28.00]"),  # string_match, must_include
        (8, "stop [N/A]", "stop [$12]"),  # string_match, fuzzy_match "N/A" (checked exactly first)
        (12, ("click", "link", "Kitchen"), ("click", "link", "Books")),  # url_match
        (15, ("click", "button", "Add to Cart"), ("click", "link", "Cart (0)")),  # program_html
    ],
)
def test_each_evaluator_scores_a_solved_task_1_and_an_unsolved_task_0(agents, task, solved, unsolved):
    a = agents[0]
    for step, want in ((solved, 1.0), (unsolved, 0.0)):
        a.reset(task)
        if task == 15:
            a.do(("click", "link", "Copper Kettle"))
        out = a.do(step) if isinstance(step, str) else (a.do(step), a.do("stop []"))[1]
        assert out["done"] and out["reward"] == want and out["score"] == want, (step, out)


def test_fuzzy_match_is_skipped_with_a_note_without_a_judge_and_uses_a_pluggable_judge(agents, tmp_path):
    config = json.load(open(os.path.join(TASK_DIR, "21.json")))
    config["eval"]["reference_answers"] = {"fuzzy_match": ["the user dave"]}
    notes = []
    assert webarena_eval.string_match(config, "dave", None, notes) == 1.0  # left out of the product
    assert any("no judge configured" in n for n in notes)
    judge = webarena_eval.similarity_judge
    assert webarena_eval.string_match(config, "It was the user dave", judge, []) == 1.0
    assert webarena_eval.string_match(config, "bob", judge, []) == 0.0
    assert webarena_eval.string_match(config, "anything", lambda p, r, i: 0.0, []) == 0.0


def test_every_action_type(agents, server):
    a = agents[2]
    obs = a.reset(0)["observation"]
    assert obs.startswith("OBSERVATION:\nTab 0 (current): One Stop Shop")
    assert (
        "URL: http://localhost:7770/" in obs  # the local shop, at WebArena's usual address
        and "OBJECTIVE: What is the price" in obs
        and "PREVIOUS ACTION: None" in obs
    )
    assert re.search(r"\[\d+\] link 'Kitchen'", obs)
    home = re.search(r"URL: (\S+)", obs).group(1)
    assert "/category/kitchen" in a.do(("click", "link", "Kitchen"))["observation"]
    assert "PREVIOUS ACTION: click [" in a.last["observation"]
    assert "URL: " + home + "\n" in a.do("go_back")["observation"]
    assert "/category/kitchen" in a.do("go_forward")["observation"]
    assert "Bamboo Cutting Board" in a.do(("hover", "link", "Bamboo Cutting Board"))["observation"]
    a.do(("type", "textbox", "Search products", "lamp", 0))
    assert "value: 'lamp'" in a.last["observation"] and "/search" not in a.last["observation"]
    assert "/search?q=lamp" in a.do("press [Enter]")["observation"]
    a.do(("type", "textbox", "Search products", "kettle", 1))  # replaces the old text, presses Enter
    assert "/search?q=kettle" in a.last["observation"] and "1 results for 'kettle'" in a.last["observation"]
    assert "scroll [down]" in a.do("scroll [down]")["observation"]
    assert "scroll [up]" in a.do("scroll [up]")["observation"]
    obs = a.do("new_tab")["observation"]
    assert "Tab 1 (current): New Tab" in obs and "URL: about:blank" in obs
    assert "/user/bob" not in a.do(f"goto [{home}category/books]")["observation"]
    assert "URL: " + home + "category/books" in a.last["observation"]
    obs = a.do("tab_focus [0]")["observation"]
    assert "Tab 0 (current)" in obs and "/search?q=kettle" in obs
    assert "there is no tab 5" in a.do("tab_focus [5]")["observation"]
    obs = a.do("close_tab")["observation"]
    assert "Tab 1" not in obs and "/category/books" in obs
    out = a.do("stop [$34.99]")
    assert out["done"] and out["reward"] == 1.0 and out["available_actions"] == []
    assert "episode is over" in a.do("go_back")["observation"]


def test_a_task_reads_the_same_at_every_reset_and_every_launch(agents):
    """Element ids number the tree's lines (Chrome's backend ids change from load to load) and the
    local sites show fixed addresses (their ports change at every launch): the same actions give
    the same observations, so a recorded episode replays (sft.relabel)."""

    def episode(a) -> list[str]:
        steps = [("click", "link", "Kitchen"), ("click", "link", "Cast Iron Skillet"), "go_back"]
        return [a.reset(4)["observation"]] + [a.do(step)["observation"] for step in steps]

    first = episode(agents[5])
    assert "[1] RootWebArea 'One Stop Shop'" in first[0] and "/category/kitchen" in first[1]
    for _ in range(3):
        assert episode(agents[5]) == first
    other = EnvServer("servers.webarena").start()  # a second launch: its sites on other ports
    try:
        assert episode(Agent(other.url)) == first
    finally:
        other.stop()


def test_a_bad_element_id_and_a_malformed_reply_change_nothing_and_say_why(agents):
    a = agents[3]
    before = a.reset(0)["observation"]
    out = a.do("click [999999]")
    assert out["observation"].startswith("Invalid action: there is no element [999999]") and not out["done"]
    out = a.post("/step", {"env_idx": a.id, "action": "I would click the lamp"})
    assert out["observation"].startswith("Invalid action: no action found") and out["reward"] == 0
    out = a.post("/step", {"env_idx": a.id, "action": "```fly [3]```"})
    assert "unknown action" in out["observation"]
    out = a.post("/step", {"env_idx": a.id, "action": "```scroll [sideways]```"})
    assert "cannot parse" in out["observation"]
    assert out["observation"].split("\n\n", 1)[1] == before  # the page is where it was
    r = requests.post(a.url + "/reset", json={"env_idx": a.id, "idx": 10**6})
    assert r.status_code == 400 and "no task named '1000000'" in r.json()["error"]  # idx names a config


def test_the_browser_stays_inside_the_tasks_sites(agents, server, tmp_path):
    """goto and links to file:, data:, chrome:, javascript: and other hosts are refused with a
    message; a request the action parser does not see (a link on the page) is stopped by the
    browser context's route; the host's files never reach the observation."""
    a = agents[6]
    a.reset(0)  # a shopping task: the shop's origin only
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    forum_home = re.search(r"URL: (http://localhost:9999/)", a.reset(21)["observation"]).group(1)
    a.reset(0)
    for url in (
        f"file://{secret}",
        "file:///etc/passwd",
        "data:text/html,<h1>hello</h1>",
        "chrome://version",
        "javascript:alert(1)",
        "view-source:file:///etc/passwd",
        "http://example.com/",
        forum_home,
    ):
        out = a.do(f"goto [{url}]")
        assert out["observation"].startswith("Invalid action: Refused:"), (url, out["observation"][:300])
        assert "TOP-SECRET" not in out["observation"] and "root:x:0" not in out["observation"]
        assert not out["done"] and "URL: about:blank" not in out["observation"]
    # A task config outside the task folder is never opened, and a path is not a task name.
    r = requests.post(
        server.url + "/reset", json={"env_idx": a.id, "idx": str(TASK_DIR + "/0.json")}, timeout=60
    )
    assert r.status_code == 400 and "task folder" in r.json()["error"]
    r = requests.post(server.url + "/reset", json={"env_idx": a.id, "idx": "../../etc/passwd"}, timeout=60)
    assert r.status_code == 400
    assert a.reset(0)["done"] is False  # still serves


LINKS_PAGE = (
    b"<html><head><title>Links</title></head><body><h1>Links</h1>"
    b"<a href='file:///etc/passwd'>to a file</a> <a href='data:text/html,<h1>inline</h1>'>to data</a> "
    b"<a href='http://localhost:1/elsewhere'>to another host</a> <a href='/get.bin'>a download</a> "
    b"<a href='/second'>a page of this site</a><a href='/slow'>a slow page</a>"
    b"<img src='file:///etc/hostname'></body></html>"
)


class _Site(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/get.bin":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Disposition", "attachment; filename=get.bin")
            body = b"x" * 1000
        else:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            if self.path == "/slow":
                time.sleep(8)  # a page that takes longer than the action's time limit
            body = (
                LINKS_PAGE
                if self.path != "/second"
                else b"<html><title>Second</title><p>second page</p></html>"
            )
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except BrokenPipeError:  # the browser stopped loading it
            pass

    def log_message(self, *args):
        pass


def test_the_browser_context_refuses_what_the_page_itself_links_to(tmp_path, monkeypatch):
    """Below the action parser: links on a task's own page to a file, a data: URL, another host and
    a download are stopped by the browser context (route, no downloads); its own pages still load."""
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    start = f"http://127.0.0.1:{site.server_address[1]}/"
    task = json.load(open(os.path.join(TASK_DIR, "0.json")))
    task.update(start_url=start, sites=["links"], task_id=0)
    (tmp_path / "links.json").write_text(json.dumps(task))
    monkeypatch.setenv("WEBARENA_TASKS", str(tmp_path))
    monkeypatch.setenv("WEBARENA_ACTION_SECONDS", "2")
    server = EnvServer("servers.webarena").start()
    try:
        a = Agent(server.url)
        assert "Links" in a.reset("links")["observation"]
        for name in ("to another host", "a download", "to a file", "to data"):
            out = a.do(("click", "link", name))
            obs = out["observation"]
            assert "root:x:0" not in obs and "inline" not in obs and not out["done"]
            if name in ("to another host", "a download"):
                assert obs.startswith("Refused:"), (name, obs[:400])
            else:  # Chromium itself keeps a web page from opening file: and data: URLs: it stays put
                assert f"URL: {start}\n" in obs, (name, obs[:400])
            a.reset("links")
        assert "second page" in a.do(("click", "link", "a page of this site"))["observation"]
        assert "Refused" not in a.last["observation"]
        a.reset("links")
        start_time = time.time()
        out = a.do(("click", "link", "a slow page"))  # cancelled after 2 s; the instance goes on
        assert out["observation"].startswith("The action did not finish within 2 s and was cancelled")
        assert time.time() - start_time < 8
        assert "Links" in a.reset("links")["observation"]
    finally:
        server.stop()
        site.shutdown()


def test_available_actions_are_complete_valid_replies(agents):
    a = agents[4]
    out = a.reset(15)
    assert out["category"] == "shopping" and out["eval_types"] == ["program_html"]
    acts = out["available_actions"]
    assert 0 < len(acts) <= 64 and all(x.startswith("```") and x.endswith("```") for x in acts)
    for act in (acts[0], acts[-1]):  # a click on the first link; a stop with a text of the page
        a.reset(15)
        assert not a.do(act)["observation"].startswith(("Invalid action", "The action failed"))


def test_memory_stays_flat_over_many_episodes(agents, server):
    a = agents[5]
    for _ in range(3):
        a.solve(15)
    start = requests.get(server.url + "/browser").json()["pss_mb"]
    for i in range(16):
        a.solve([15, 30, 11, 12][i % 4])
    end = requests.get(server.url + "/browser").json()["pss_mb"]
    assert end < start + 60, (start, end)


def test_a_crashed_browser_is_restarted_and_the_browser_is_gone_after_the_server_stops():
    server = EnvServer("servers.webarena").start()
    try:
        a = Agent(server.url)
        a.reset(0)
        pids = requests.get(server.url + "/browser").json()["pids"]
        chromium = [
            p
            for p in pids
            if "chrom" in open(f"/proc/{p}/cmdline").read().split("\0")[0]
            and "--type=" not in open(f"/proc/{p}/cmdline").read()
        ]
        os.kill(chromium[0], signal.SIGKILL)
        time.sleep(0.5)
        assert "crashed" in a.do("scroll [down]")["observation"]
        assert a.reset(1)["done"] is False and a.do("stop [6]")["reward"] == 1.0
        pids = requests.get(server.url + "/browser").json()["pids"]
        assert pids
    finally:
        server.stop()
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)]


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an exited child its parent has not reaped yet)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_env_spec_splits_are_disjoint_and_cover_the_offline_tasks():
    spec = ENVS["webarena"]
    n = len(os.listdir(TASK_DIR))
    train, val, test = (set(spec.splits[p]) for p in ("train", "val", "test"))
    assert len(train) + len(val) + len(test) == n and train | val | test == set(range(n))
    assert "```" in spec.instruction and "stop [answer]" in spec.instruction
