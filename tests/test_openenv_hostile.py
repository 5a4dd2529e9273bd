"""Hostile input on OpenEnv's endpoints (servers/openenv.py), on every server, as tests/test_hostile.py
does for the other dialects: a malformed, ill-typed or oversized WebSocket message gets an error
message (never a 5xx, never its input echoed) and the session goes on; an unknown session, task or
split is a clear error; the instance cap answers CAPACITY_REACHED and closes with 1013; a session
that closes, or a client that goes away mid-episode, frees its instance."""

import json
import shutil
import time

import pytest
import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from servers.common import MAX_WS_BYTES
from tests.test_hostile import SERVERS, assert_4xx_json

CODES = {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR", "SESSION_ERROR"}


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
    ]
    with connect(ws_url(url), max_size=None) as ws:
        assert_error(ask(ws, {"type": "step", "data": {"action": action}}), "EXECUTION_ERROR")  # before reset
        for message in bad:
            reply = ask(ws, message)
            assert_error(reply)
            assert "x" * 100 not in reply["data"]["message"]  # no echo of the input
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
    vanished.close()
    opens_within(url, 5).close()
    opens_within(url, 5).close()
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
