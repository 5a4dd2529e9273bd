"""What servers/common.py guarantees every server, shown on a server whose environment misbehaves
on request (tests/hang_server.py): time limits, a table that cannot fill up, no blocked server."""

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from envs import EnvServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def hang(start_server):
    return start_server("tests.hang_server", args=["--time-limit", "1.5", "--max-instances", "40"])


def new(url: str) -> int:
    iid = requests.post(url + "/create", json={}, timeout=10).json()["id"]
    assert requests.post(url + "/reset", json={"id": iid, "data_idx": 0}, timeout=10).status_code == 200
    return iid


def step(url: str, iid: int, action: str, timeout: float = 10):
    return requests.post(url + "/step", json={"id": iid, "action": action}, timeout=timeout)


def test_a_call_that_never_returns_gets_a_clear_error_and_frees_its_instance(hang):
    url = hang.url
    for action in ("spin", "sleep"):  # a Python loop (interrupted) and a blocking C call
        iid = new(url)
        start = time.time()
        r = step(url, iid, action)
        assert r.status_code == 504 and "did not finish within 1.5 s" in r.json()["error"]
        assert "closed" in r.json()["error"] and time.time() - start < 5
        assert step(url, iid, "hello").status_code == 404  # the instance is gone
        assert step(url, new(url), "hello").json()["observation"] == "hello"  # the server is fine
    deadline = time.time() + 5  # the spinning thread was stopped (the sleeping one still sleeps)
    while requests.get(url + "/threads", timeout=5).json() > 1 and time.time() < deadline:
        time.sleep(0.1)
    assert requests.get(url + "/threads", timeout=5).json() <= 1


def test_an_inline_step_that_spins_is_interrupted_and_the_server_goes_on(start_server):
    """BabyAI and TextCraft step on the event loop's thread (inline_calls): a step stuck in a
    Python loop is still interrupted at the time limit, alone or inside a batch."""
    url = start_server("tests.hang_server", args=["--time-limit", "1.5", "--inline"]).url
    iid, start = new(url), time.time()
    r = step(url, iid, "spin")
    assert (
        r.status_code == 504
        and "did not finish within 1.5 s" in r.json()["error"]
        and time.time() - start < 5
    )
    assert step(url, iid, "x").status_code == 404  # dropped
    a, b = new(url), new(url)
    assert step(url, a, "crash").status_code == 500
    r = requests.post(
        url + "/step_batch", json=[{"id": a, "action": "spin"}, {"id": b, "action": "hello"}], timeout=10
    )
    assert [x.get("status") for x in r.json()] == [504, None] and r.json()[1]["observation"] == "hello"
    assert step(url, b, "still here").json()["observation"] == "still here"


def test_requests_queued_on_one_stuck_instance_block_nothing_else(hang):
    url = hang.url
    stuck, other = new(url), new(url)
    with ThreadPoolExecutor(48) as ex:
        queued = [ex.submit(step, url, stuck, "sleep" if k == 0 else "x") for k in range(45)]
        time.sleep(0.3)
        start = time.time()
        assert requests.get(url + "/", timeout=5).status_code == 200
        assert step(url, other, "still here", timeout=5).json()["observation"] == "still here"
        assert new(url) >= 0
        assert time.time() - start < 1.0  # answered at once, while 45 requests wait on `stuck`
        codes = sorted(f.result().status_code for f in queued)
    # one times out (504); the rest ran before it (200), found the instance gone (404) or waited
    # for it as long as the time limit (503, busy)
    assert set(codes) <= {200, 404, 503, 504} and codes.count(504) == 1, codes


def test_an_environment_that_raises_is_a_500_and_the_connection_stays_open(hang):
    iid = new(hang.url)
    conn = http.client.HTTPConnection("127.0.0.1", hang.port, timeout=10)
    sock = None
    for body, want in (
        ({"id": iid, "action": "crash"}, 500),
        ({"id": iid}, 422),
        (b"{", 422),
        ({"id": 10**6, "action": "x"}, 404),
        ({"id": iid, "action": "ok"}, 200),
    ):
        conn.request(
            "POST",
            "/step",
            body if isinstance(body, bytes) else json.dumps(body),
            {"Content-Type": "application/json"},
        )
        r = conn.getresponse()
        answer = json.loads(r.read())
        assert r.status == want and (want == 200 or "error" in answer), (body, r.status, answer)
        assert r.getheader("connection", "") != "close"
        assert sock is None or conn.sock is sock  # the same connection all along
        sock = conn.sock
    conn.close()


def test_a_step_after_the_end_says_the_episode_is_over(hang):
    iid = new(hang.url)
    assert step(hang.url, iid, "finish").json()["done"] is True
    out = step(hang.url, iid, "anything").json()
    assert out["done"] is True and out["reward"] == 0.0 and "episode is over" in out["observation"]
    r = step(hang.url, new(hang.url) + 1000, "x")
    assert r.status_code == 404
    fresh = requests.post(hang.url + "/create", json={}, timeout=10).json()["id"]
    r = step(hang.url, fresh, "x")
    assert r.status_code == 400 and "reset" in r.json()["error"]


def test_max_instances_answers_503_with_retry_after_and_frees_on_close(start_server):
    server = start_server("tests.hang_server", args=["--max-instances", "2"])
    ids = [requests.post(server.url + "/create", json={}, timeout=10).json()["id"] for _ in range(2)]
    r = requests.post(server.url + "/create", json={}, timeout=10)
    assert r.status_code == 503 and r.headers["Retry-After"].isdigit() and "maximum of 2" in r.json()["error"]
    requests.post(server.url + "/close", json={"id": ids[0]}, timeout=10)
    assert requests.post(server.url + "/create", json={}, timeout=10).status_code == 200


def test_a_create_whose_client_gave_up_is_closed(hang):
    before = requests.get(hang.url + "/instances", timeout=5).json()
    with pytest.raises(requests.Timeout):
        requests.post(hang.url + "/create", json={"slow": True}, timeout=1)
    time.sleep(3)
    assert requests.get(hang.url + "/instances", timeout=5).json() == before
    r = requests.post(hang.url + "/create", json={"slow": "yes"}, timeout=10)  # the constructor's type
    assert r.status_code == 422 and "slow" in r.json()["error"]
    r = requests.post(hang.url + "/create", json={"fast": True}, timeout=10)  # a key it does not take
    assert r.status_code == 422 and "slow" in r.json()["error"]  # what it takes; the key not echoed
    assert "fast" not in r.json()["error"]


def test_sigterm_stops_a_server_whose_request_is_stuck():
    """The parent can always stop a server: a request stuck in C code does not hold up shutdown."""
    server = EnvServer("tests.hang_server", args=["--time-limit", "600"]).start()
    try:
        iid = new(server.url)
        with ThreadPoolExecutor(1) as ex:
            ex.submit(lambda: step(server.url, iid, "sleep", timeout=30))
            time.sleep(0.5)
            start = time.time()
            server.proc.send_signal(signal.SIGTERM)
            server.proc.wait(timeout=20)
            assert time.time() - start < 12
    finally:
        server.stop()


def test_a_server_dies_with_its_parent():
    code = (
        "import sys, time; sys.path.insert(0, %r); from envs import EnvServer; "
        "s = EnvServer('tests.hang_server').start(); print(s.proc.pid, flush=True); time.sleep(60)" % ROOT
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.time() + 15
    while (
        time.time() < deadline
        and os.path.exists(f"/proc/{child}")
        and open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    ):
        time.sleep(0.2)
    assert (
        not os.path.exists(f"/proc/{child}")
        or open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    )
