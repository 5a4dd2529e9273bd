"""Hostile input on OpenEnv's endpoints (servers/openenv.py), on every server, as tests/test_hostile.py
does for the other dialects: a malformed, ill-typed or oversized WebSocket message gets a small
error message (never a 5xx, nothing of it echoed, keys included) and the session goes on, while
other sessions' round trips stay fast; an unknown session, task or split is a clear error; the
instance cap answers CAPACITY_REACHED and closes with 1013; a session that closes, goes silent, or
whose client goes away mid-episode frees its instance; no HTTP call reaches a session's instance;
an environment's own exception is an EXECUTION_ERROR, logged once."""

import json
import logging
import shutil
import threading
import time

import pytest
import requests
from fastapi.testclient import TestClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from servers.common import MAX_ERROR_CHARS, MAX_WS_BYTES, build_app
from servers.openenv import add_openenv
from tests.test_hostile import SERVERS, assert_4xx_json

CODES = {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR", "SESSION_ERROR"}
SMALL = MAX_ERROR_CHARS + 200  # bytes of an error reply, at most: its message and a few fields
MARK = "zq"  # in the hostile messages' keys, never in a server's own words
MANY_KEYS = {f"{MARK}{i}": 0 for i in range(70_000)}  # ~1 MB of small keys, under the frame limit
LONG_KEY = MARK * 100_000  # one key of 200,000 characters


@pytest.fixture(scope="module", params=list(SERVERS))
def target(request, start_server):
    module, action, _, needs = SERVERS[request.param]
    if needs and not shutil.which(needs):
        pytest.skip(f"needs {needs}")
    return request.param, start_server(module).url, action


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def session(url: str):
    """A socket held open across the test's steps (websockets wants `legacy=True` outside a `with`)."""
    return connect(ws_url(url), legacy=True)


def ask(ws, message) -> dict:
    ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(ws.recv(timeout=60))


def assert_error(reply: dict, *codes: str) -> None:
    assert reply["type"] == "error", reply
    data = reply["data"]
    assert (
        data["code"] in (codes or CODES) and 400 <= data["status"] < 500 and isinstance(data["message"], str)
    ), data


def plays(url: str, action: str) -> None:
    """A fresh session resets and steps."""
    with connect(ws_url(url)) as ws:
        assert ask(ws, {"type": "reset", "data": {}})["type"] == "observation"
        assert ask(ws, {"type": "step", "data": {"action": action}})["type"] == "observation"


def test_malformed_and_ill_typed_messages_get_an_error_and_the_session_goes_on(target):
    name, url, action = target
    bad = [
        "not json",
        "",
        "[]",
        '"text"',
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 50_000 + "1" + "}" * 50_000,
        b"\xff\xfe\x00",
        '{"type": NaN}',
        '{"type": "fly"}',
        {"type": "step"},
        {"type": "step", "data": {"action": 5}},
        {"type": "step", "data": {"action": None}},
        {"type": "step", "data": {"action": "x", "extra": 1}},
        '{"type": "step", "data": {"action": "\\ud800"}}',
        {"type": "reset", "data": {"index": -1, "split": "test"}},
        {"type": "reset", "data": {"index": 3}},
        {"type": "reset", "data": {"split": "nope"}},
        {"type": "reset", "data": {"split": "test", "index": 10**9}},
        {"type": "reset", "data": {"split": "x" * 10_000}},
        {"type": "reset", "data": {"data_idx": True}},
        {"type": "reset", "data": {"data_idx": "no such task"}},
        {"type": "reset", "data": {"seed": 1.5}},
        {"type": "reset", "data": {"episode_id": "e" * 1000}},
        {"type": "reset", "data": [1, 2]},
        {"type": "reset", "data": {}, "more": 1},
        {"type": "step", "data": {"action": action, LONG_KEY: 1}},  # keys are not echoed either
        {"type": "reset", "data": {LONG_KEY: 1}},
        {"type": "state", LONG_KEY: 1},
        {"type": "step", "data": {"action": action, **MANY_KEYS}},
        {"type": "reset", "data": MANY_KEYS},
        {"type": "reset", **MANY_KEYS},
        {"type": "step", "data": {"action": {LONG_KEY: 1}}},
    ]
    with connect(ws_url(url), max_size=None) as ws:
        assert_error(ask(ws, {"type": "step", "data": {"action": action}}), "EXECUTION_ERROR")  # before reset
        for message in bad:
            ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
            raw = ws.recv(timeout=60)
            assert_error(json.loads(raw))
            assert len(raw) <= SMALL and "x" * 100 not in raw and MARK not in raw, raw[:300]  # no echo
        assert ask(ws, {"type": "reset", "data": {"split": "test", "index": 0}})["type"] == "observation"
        assert ask(ws, {"type": "step", "data": {"action": action}})["type"] == "observation"
        assert ask(ws, {"type": "state"})["data"]["step_count"] == 1


def test_oversized_messages(target):
    name, url, action = target
    with connect(ws_url(url)) as ws:
        assert_error(ask(ws, {"type": "step", "data": {"action": "a" * 200_000}}), "VALIDATION_ERROR")
        ask(ws, {"type": "reset", "data": {}})
        odd = ask(ws, {"type": "step", "data": {"action": "\U0001f600 \u0000 \u2028" * 1000}})
        assert odd["type"] == "observation" and isinstance(odd["data"]["observation"]["text"], str)
        ws.send("x" * (MAX_WS_BYTES + 1))  # past the frame limit: the server closes this socket
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    plays(url, action)


def test_unknown_sessions_tasks_and_environments_are_clear_errors(target):
    name, url, action = target
    with connect(ws_url(url) + "?session_id=no-such-session") as ws:
        assert_error(json.loads(ws.recv(timeout=30)), "SESSION_ERROR")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
        assert closed.value.rcvd.code == 1008
    post = lambda path, body: requests.post(url + path, json=body, timeout=60)  # noqa: E731
    assert_4xx_json(requests.get(url + "/nosuchenv/splits", timeout=10), 404)
    assert_4xx_json(post(f"/{name}/num_tasks", {"split": "nope"}), 400)
    assert_4xx_json(post(f"/{name}/task", {"split": "test", "index": 10**6}), 400)
    for body in ({}, {"split": 3}, {"split": "test", "index": -1}, {"split": "test", "index": "1"}, [1]):
        assert_4xx_json(post(f"/{name}/task", body), 422)
    assert_4xx_json(post(f"/{name}/tasks", {"split": "test", "more": 1}), 422)
    assert_4xx_json(post(f"/{name}/task_range", {"split": "test", "start": 10**20}), 422)
    for body, status in (
        ({"split": "nope"}, 400),
        ({"index": 3}, 422),
        ({"seed": -1}, 422),
        ({"x": 1}, 422),
        ({"idx": 3}, 422),
    ):
        assert_4xx_json(post("/reset", body), status)  # OpenEnv's one-off reset
    for body in (MANY_KEYS, {LONG_KEY: 1}, {"split": "test", LONG_KEY: 1}, {"split": MARK * 50}):
        r = post("/reset", body)
        assert_4xx_json(r, 400, 422)
        assert len(r.content) <= SMALL and MARK not in r.text, r.text[:300]
    assert_4xx_json(post("/step", {"action": {"action": action}}), 422)  # no instance: OpenEnv steps over /ws
    plays(url, action)


def test_the_instance_cap_and_every_way_a_session_frees_its_instance(start_server):
    """BabyAI with room for two instances: a third session is refused (the WebSocket's 503), and a
    session that sends `close`, one whose client vanishes mid-episode, and one closed for an
    oversized message each give their instance back."""
    url = start_server("servers.babyai", args=["--max-instances", "2"]).url
    first, second = session(url), session(url)
    for ws in (first, second):
        assert ask(ws, {"type": "reset", "data": {"split": "test", "index": 0}})["type"] == "observation"
    with connect(ws_url(url)) as third:
        refused = json.loads(third.recv(timeout=30))
        assert refused["data"]["code"] == "CAPACITY_REACHED" and refused["data"]["retry_after"] > 0
        with pytest.raises(ConnectionClosed) as closed:
            third.recv(timeout=30)
        assert closed.value.rcvd.code == 1013
    create = requests.post(url + "/create", json={}, timeout=10)
    assert create.status_code == 503 and "Retry-After" in create.headers
    assert requests.post(url + "/reset", json={}, timeout=10).status_code == 503  # one-off reset, too

    first.send(json.dumps({"type": "close"}))  # 1. closed by the client
    first.close()
    replacement = opens_within(url, 5)
    second.socket.close()  # 2. the client vanishes mid-episode: no close frame at all
    vanished = opens_within(url, 5)
    replacement.send("x" * (MAX_WS_BYTES + 1))  # 3. closed by the server for an oversized message
    with pytest.raises(ConnectionClosed) as closed:
        replacement.recv(timeout=30)
    assert closed.value.rcvd.code == 1009
    opens_within(url, 5).close()  # room for one, while `vanished` still holds the other instance
    vanished.close()
    replacement.close()


def opens_within(url: str, seconds: float):
    """A session that reset, as soon as the server has room for one."""
    deadline = time.time() + seconds
    while True:
        ws = session(url)
        try:
            reply = ask(ws, {"type": "reset", "data": {}})
        except ConnectionClosed as e:  # refused: its CAPACITY_REACHED came first, then the close
            reply = {"closed": str(e)}
        if reply.get("type") == "observation":
            return ws
        ws.close()
        assert time.time() < deadline, reply
        time.sleep(0.1)


def test_a_hostile_message_does_not_stall_other_sessions(start_server):
    """Validating a message of 70,000 unknown keys (over WebSocket, or at the one-off HTTP /reset)
    costs the shared event loop little: another session's round trips stay fast meanwhile."""
    url = start_server("servers.babyai").url
    hostile = [json.dumps({"type": "step", "data": {"action": "x", **MANY_KEYS}}), json.dumps(MANY_KEYS)]
    assert 0.9 * MAX_WS_BYTES < len(hostile[0]) < MAX_WS_BYTES
    done, slowest = threading.Event(), []

    def attack():
        try:
            with connect(ws_url(url), max_size=None) as ws:
                for _ in range(5):
                    ws.send(hostile[0])
                    ws.recv(timeout=60)
                    requests.post(url + "/reset", data=hostile[1], timeout=60)
        finally:
            done.set()

    with connect(ws_url(url)) as ws:
        ask(ws, {"type": "reset", "data": {}})
        attacker = threading.Thread(target=attack)
        attacker.start()
        while not done.is_set():
            start = time.perf_counter()
            ask(ws, {"type": "state"})
            slowest.append(time.perf_counter() - start)
        attacker.join()
    assert len(slowest) > 5 and max(slowest) < 0.3, (len(slowest), max(slowest))


def test_no_http_call_reaches_a_websocket_sessions_instance(start_server):
    """A session's instance belongs to its socket: it has no number, so no HTTP client can step,
    reset, observe or close it; its key (from `state`) gets the expert's advice, and nothing else."""
    url = start_server("servers.babyai").url
    post = lambda path, body: requests.post(url + path, json=body, timeout=10)  # noqa: E731
    with connect(ws_url(url)) as ws:
        ask(ws, {"type": "reset", "data": {"split": "test", "index": 0}})
        state = ask(ws, {"type": "state"})["data"]
        assert "instance" not in state and len(state["session"]) >= 20
        for i in range(64):  # every id the table could have handed out
            assert_4xx_json(post("/step", {"id": i, "action": "turn left"}), 404)
            assert_4xx_json(post("/reset", {"id": i, "data_idx": 0}), 404)
            assert_4xx_json(post("/close", {"id": i}), 404)
            assert_4xx_json(requests.get(url + "/observation", params={"id": i}, timeout=10), 404)
        assert_4xx_json(post("/step", {"id": state["session"], "action": "turn left"}), 422)
        assert_4xx_json(post("/close", {"session": state["session"]}), 422)
        assert ask(ws, {"type": "step", "data": {"action": "turn left"}})["type"] == "observation"
        advice = post("/expert", {"session": state["session"]})
        assert advice.status_code == 200 and advice.json()["action"], advice.text
        wrong = post("/expert", {"session": MARK * 10})
        assert_4xx_json(wrong, 404)
        assert MARK not in wrong.text
        assert ask(ws, {"type": "state"})["data"]["step_count"] == 1


def test_a_silent_session_is_closed_after_the_idle_limit_and_frees_its_instance(start_server):
    """A client that keeps its socket alive (pings) but sends no message holds its instance only
    for --idle-limit seconds; then the server says so, closes it (1008) and frees the instance."""
    url = start_server("servers.babyai", args=["--idle-limit", "2", "--max-instances", "1"]).url
    with connect(ws_url(url)) as silent:
        ask(silent, {"type": "reset", "data": {}})
        start = time.time()
        while time.time() - start < 1.5:  # alive (a ping answered), and silent
            assert silent.ping().wait(5)
            time.sleep(0.2)
        said = json.loads(silent.recv(timeout=10))
        assert said["data"]["code"] == "SESSION_ERROR" and "idle-limit" in said["data"]["message"]
        with pytest.raises(ConnectionClosed) as closed:
            silent.recv(timeout=10)
        assert closed.value.rcvd.code == 1008
    with connect(ws_url(url)) as ws:  # the one instance is free again, and a busy session keeps it
        for _ in range(8):
            assert ask(ws, {"type": "reset", "data": {}})["type"] == "observation"
            time.sleep(0.4)


class FaultyEnv:
    """An environment whose step raises its own ValueError, quoting the action."""

    def reset(self, data_idx):
        return {"observation": "start", "reward": 0.0, "done": False}

    def step(self, action):
        raise ValueError(f"cannot read {action!r}")

    def observation(self):
        return "start"

    def close(self):
        pass


def test_an_environments_own_error_is_an_execution_error_logged_once(caplog):
    """Not the client's VALIDATION_ERROR: the environment's fault, a 500 in both dialects, its
    traceback in the server's log once, nothing of the action in the answer."""
    app = add_openenv(build_app("Faulty", FaultyEnv), "faulty")
    action = f"{MARK} the secret action"
    with TestClient(app) as client, caplog.at_level(logging.ERROR, logger="servers"):
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {}})
            assert ws.receive_json()["type"] == "observation"
            ws.send_json({"type": "step", "data": {"action": action}})
            reply = ws.receive_json()["data"]
            assert reply["code"] == "EXECUTION_ERROR" and reply["status"] == 500, reply
            assert MARK not in reply["message"] and "ValueError" in reply["message"]
            ws.send_json({"type": "state"})  # the session goes on
            assert ws.receive_json()["data"]["step_count"] == 0
        faults = [r for r in caplog.records if r.exc_info]
        assert len(faults) == 1 and faults[0].exc_info[0] is ValueError
        iid = client.post("/create", json={}).json()["id"]
        client.post("/reset", json={"id": iid})
        r = client.post("/step", json={"id": iid, "action": action})
        assert r.status_code == 500 and MARK not in r.text and "ValueError" in r.json()["error"]
        assert len([r for r in caplog.records if r.exc_info]) == 2
