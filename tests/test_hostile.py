"""Hostile input over real HTTP, on every server: each kind of bad request gets a 4xx JSON answer
(or, for an odd but valid action, a well-formed observation), and the server then still serves a
normal create/reset/step. The expensive servers (SciWorld's JVMs, WebArena's browser) share one
instance per module where they can."""

import json
import os
import shutil
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

SERVERS = {  # name -> (module, a valid action, whether /create is cheap, what the server needs)
    "babyai": ("servers.babyai", "turn left", True, None),
    "textcraft": ("servers.textcraft", "inventory", True, None),
    "searchqa": ("servers.searchqa", "<search>river</search>", True, None),
    "sciworld": ("servers.sciworld", "look around", False, "java"),
    "webarena": ("servers.webarena", "```scroll [down]```", False, "chromium"),
}


class Target:
    def __init__(self, name, server):
        self.name, self.url, self.port = name, server.url, server.port
        self.module, self.action, self.cheap, _ = SERVERS[name]
        self.id = self.create()  # the shared instance
        assert self.post("/reset", {"id": self.id, "data_idx": 0}).status_code == 200

    def create(self) -> int:
        out = self.post("/create", {}).json()
        return out if isinstance(out, int) else out["id"]  # Deep Search answers a bare int

    def post(self, path, body, **kw):
        if isinstance(body, (bytes, str)):
            return requests.post(
                self.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=60, **kw
            )
        return requests.post(self.url + path, json=body, timeout=60, **kw)

    def still_serves(self):
        """A normal reset and step on the shared instance, and (cheap servers) a create/close."""
        assert requests.get(self.url + "/", timeout=10).status_code == 200
        r = self.post("/reset", {"id": self.id, "data_idx": 0})
        assert r.status_code == 200 and isinstance(r.json()["observation"], str), r.text[:300]
        r = self.post("/step", {"id": self.id, "action": self.action})
        assert r.status_code == 200 and isinstance(r.json()["observation"], str), r.text[:300]
        if self.cheap:
            iid = self.create()
            assert self.post("/close", {"id": iid}).status_code == 200


@pytest.fixture(scope="module", params=list(SERVERS))
def target(request, start_server):
    module, _, _, needs = SERVERS[request.param]
    if needs and not (shutil.which(needs) or shutil.which("chromium" if needs == "chromium" else "java")):
        pytest.skip(f"needs {needs}")
    return Target(request.param, start_server(module))


def assert_4xx_json(r, *statuses):
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert not statuses or r.status_code in statuses, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json") and isinstance(r.json()["error"], str)


def test_malformed_and_deeply_nested_json(target):
    t = target
    bodies = [
        b"not json",
        b"{",
        b"",
        b"[]",
        b'"text"',
        b"\xff\xfe\x00",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        b"{" + b'"k":1,' * 100_000 + b'"x":0}',
    ]
    for path in ("/reset", "/step", "/close"):
        for body in bodies:
            assert_4xx_json(t.post(path, body))
    for body in bodies[:2] + bodies[3:]:  # (an empty /create body is a normal create)
        assert_4xx_json(t.post("/create", body))
    t.still_serves()


def test_nan_infinity_and_lone_surrogates(target):
    t = target
    reset = [
        '{"id": NaN, "data_idx": 0}',
        f'{{"id": {t.id}, "data_idx": NaN}}',
        f'{{"id": {t.id}, "data_idx": Infinity}}',
        f'{{"id": {t.id}, "data_idx": -Infinity}}',
        f'{{"id": {t.id}, "data_idx": 0, "\\ud800": 1}}',
        '{"id": "\\ud800"}',
        f'{{"id": {t.id}, "idx": "\\udc00"}}',
    ]
    step = [
        '{"id": NaN, "action": "x"}',
        f'{{"id": {t.id}, "action": NaN}}',
        f'{{"id": {t.id}, "action": "\\ud800"}}',
        f'{{"id": {t.id}, "action": "go \\udfff now"}}',
        f'{{"id": {t.id}, "action": "x", "\\ud800": "\\ud800"}}',
    ]
    for path, bodies in (("/reset", reset), ("/step", step)):
        for body in bodies:
            r = t.post(path, body.encode())
            assert_4xx_json(r, 422)
            if "ud8" in body or "udc" in body or "udf" in body:
                assert "surrogate" in r.json()["error"], r.json()
    assert_4xx_json(t.post("/create", '{"\\ud800": "\\udc00"}'.encode()), 422)
    t.still_serves()


def test_wrong_types_and_out_of_range_ids(target):
    t = target
    for bad in (True, False, 1.0, "1", None, -1, 2**31, 10**18, [0], {"a": 0}):
        assert_4xx_json(t.post("/step", {"id": bad, "action": t.action}), 422)
        assert_4xx_json(t.post("/reset", {"id": bad, "data_idx": 0}), 422)
        assert_4xx_json(t.post("/close", {"id": bad}), 422)
    for bad in (True, 1.0, None, -1, 10**18, [1], "x" * 1001):
        assert_4xx_json(t.post("/reset", {"id": t.id, "data_idx": bad}), 422)
    for name in ("3", "no such task", "../../etc/passwd"):  # a string is a task's name, never a number
        r = t.post("/reset", {"id": t.id, "data_idx": name})
        if t.name == "webarena" and name == "3":
            assert r.status_code == 200 and r.json()["task_id"] == 3  # its config file 3.json
        else:
            assert_4xx_json(r, 400, 404)
    r = t.post("/reset", {"id": t.id, "data_idx": 2**31 - 1})  # the largest id: a task (BabyAI) or a 400
    assert r.status_code == 200 or r.status_code == 400 and "error" in r.json(), r.text[:300]
    for bad in ("abc", "1.5", "-1", str(10**18), ""):
        assert_4xx_json(requests.get(t.url + "/observation", params={"id": bad}, timeout=10), 422)
    assert_4xx_json(t.post("/step", {"id": t.id, "action": 5}), 422)
    assert_4xx_json(t.post("/step", {"id": t.id, "action": None}), 422)
    assert_4xx_json(t.post("/step", {"id": t.id}), 422)  # missing field
    t.still_serves()


def test_create_with_unknown_or_ill_typed_keys(target):
    t = target
    assert_4xx_json(t.post("/create", {"no_such_key": 1}), 422)
    if t.name == "textcraft":
        for body in ({"goal": 123}, {"commands": 5}, {"goal": ["stick"]}, {"goal": "minecraft:unobtainium"}):
            assert_4xx_json(t.post("/create", body))
    t.still_serves()


def test_huge_and_odd_actions(target):
    t = target
    assert_4xx_json(t.post("/step", {"id": t.id, "action": "a" * 1_000_001}), 422)
    odd = [
        "",
        " ",
        "\x00",
        "\x00" * 100,
        "\u202e\u200b",
        "😀" * 100,
        "\r\n\t",
        "%s%n%x",
        "'; DROP TABLE x; --",
        "../../etc/passwd",
        "\\",
        "a" * 50_000,
        "Action: " + "x" * 5000,
        "<search>" + "y " * 2000 + "</search>",
        "```type [1] [" + "z" * 90_000 + "] [1]```",
        "```goto [file:///etc/passwd]```",
        "```" + "click [" + "9" * 5000 + "]```",
        "```press [" + "Control+" * 500 + "a]```",
    ]
    for action in odd:
        t.post("/reset", {"id": t.id, "data_idx": 0})
        r = t.post("/step", {"id": t.id, "action": action})
        assert r.status_code == 200, (repr(action[:50]), r.status_code, r.text[:300])
        out = r.json()
        assert isinstance(out["observation"], str) and isinstance(out["done"], bool), repr(action[:50])
        assert "root:x:0" not in out["observation"]
    t.still_serves()


def test_lifecycle_misuse(target):
    t = target
    iid = t.create()
    assert_4xx_json(t.post("/step", {"id": iid, "action": t.action}), 400)  # before any reset
    assert t.post("/close", {"id": iid}).status_code == 200
    assert_4xx_json(t.post("/close", {"id": iid}), 404)  # twice
    assert_4xx_json(t.post("/step", {"id": iid, "action": t.action}), 404)  # after close
    assert_4xx_json(t.post("/reset", {"id": iid, "data_idx": 0}), 404)
    assert_4xx_json(requests.get(t.url + "/observation", params={"id": iid}, timeout=10), 404)
    assert_4xx_json(requests.get(t.url + "/nowhere", timeout=10), 404)
    assert_4xx_json(requests.get(t.url + "/step", timeout=10), 405)
    t.still_serves()


def test_concurrent_creates_and_step_close_races(target):
    t = target
    n = 64 if t.cheap else 2
    with ThreadPoolExecutor(16) as ex:
        ids = list(ex.map(lambda _: t.create(), range(n)))
        assert len(set(ids)) == n
        list(ex.map(lambda i: t.post("/reset", {"id": i, "data_idx": 1}), ids))
        calls = [ex.submit(t.post, "/step", {"id": i, "action": t.action}) for i in ids for _ in range(2)]
        calls += [ex.submit(t.post, "/close", {"id": i}) for i in ids]
        codes = [c.result().status_code for c in calls]
    assert set(codes) <= {200, 404}, codes
    for i in ids:  # every instance is closed by now
        assert t.post("/close", {"id": i}).status_code == 404
    t.still_serves()


def test_garbage_http_and_half_open_sockets(target):
    t = target
    idle = []
    for junk in (
        b"GARBAGE\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64),
        b'POST /step HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"id": 0',
        b"GET / HTTP/1.1\r\nHost: x\r\n",
        b"POST /reset HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n",
        b"",
    ):
        s = socket.create_connection(("127.0.0.1", t.port), timeout=5)
        s.sendall(junk)
        idle.append(s)  # left open, half-written
    for _ in range(20):  # sockets that never send anything
        idle.append(socket.create_connection(("127.0.0.1", t.port), timeout=5))
    start = time.time()
    t.still_serves()
    assert time.time() - start < 30
    for s in idle:
        s.close()
    t.still_serves()


def test_error_answers_echo_no_key_and_stay_small(target):
    """Nothing of a bad request comes back, its keys included, and no error answer is large: a
    200,000-character key, 70,000 unknown keys, a batch whose 1,024 items are all wrong."""
    t, mark = target, "zq"  # (never in a server's own words)
    bodies = [
        ("/create", {mark * 100_000: 1}),
        ("/create", {f"{mark}{i}": 0 for i in range(70_000)}),
        ("/step_batch", [{"id": mark, "action": 5}] * 1024),
        ("/reset", {"id": t.id, "data_idx": {mark * 100_000: 1}}),
        ("/expert", {"session": mark * 1000}),
    ]
    for path, body in bodies:
        r = t.post(path, body)
        assert_4xx_json(r, 422)
        assert len(r.content) < 1200 and mark not in r.text, (path, len(r.content), r.text[:300])
    t.still_serves()


def test_answers_are_always_valid_json(target):
    """An action with unusual Unicode comes back in the observation (e.g. echoed) as valid JSON."""
    t = target
    t.post("/reset", {"id": t.id, "data_idx": 0})
    r = t.post("/step", {"id": t.id, "action": "\U0001f600 \u0000 \uffff \u2028"})
    assert r.status_code == 200 and json.loads(r.content.decode("utf-8"))
    t.still_serves()
