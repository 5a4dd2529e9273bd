"""One HTTP round trip per turn for a whole batch: `/reset_batch` and `/step_batch` (servers/common.py)
and the pool that uses them (envs/__init__.py). Batched and per-instance requests give the same episodes;
the pool falls back to per-instance requests on a server without the endpoints (an AgentGym-style
stand-in); bad batch bodies are 4xx; one failing item does not fail the batch."""

import requests

import tests.agentgym_standins as standins
from envs import ENVS, EnvPool

SCRIPT = [
    "turn left",
    "move forward",
    "turn right",
    "move forward",
    "go to red ball 1",
    "toggle",
    "turn left",
]


def play(pool: EnvPool, tasks: list[int]) -> list[list[tuple]]:
    """Reset every slot, then step them all together through SCRIPT (an action the level does not
    offer is still a valid request); per slot, what each answer said."""
    slots = list(range(len(tasks)))
    seen = [[] for _ in slots]
    for s, r in zip(slots, pool.reset(slots, tasks)):
        seen[s].append((r["observation"], r["reward"], r["done"], r.get("available_actions")))
    for action in SCRIPT:
        for s, r in zip(slots, pool.step(slots, [action] * len(slots))):
            assert "error" not in r, r
            seen[s].append((r["observation"], r["reward"], r["done"], r.get("available_actions")))
    return seen


def test_batched_and_per_instance_requests_give_the_same_episodes(start_server):
    server = start_server("servers.babyai")
    tasks = ENVS["babyai"].splits["test"][:12]
    pools = [EnvPool(url=server.url, size=len(tasks), spec=ENVS["babyai"], batched=b) for b in (None, False)]
    try:
        assert pools[0].has_batch_endpoints()  # detected, not told
        batched, single = (play(p, tasks) for p in pools)
    finally:
        for p in pools:
            p.close()
    assert batched == single
    assert (
        any(done for ep in batched for _, _, done, _ in ep)
        or any(r for ep in batched for _, r, _, _ in ep)
        or len({obs for ep in batched for obs, *_ in ep}) > len(tasks)
    )  # the script did something


def test_the_pool_falls_back_to_per_instance_requests_on_an_agentgym_server():
    with standins.Served(standins.babyai()) as served:
        pool = EnvPool(url=served.url, size=3, spec=ENVS["babyai"])
        try:
            first = pool.reset([0, 1, 2], [1, 2, 3])
            assert pool.batched is False  # its 404 to the probe
            after = pool.step([0, 1, 2], ["turn left"] * 3)
        finally:
            pool.close()
        paths = [e[0] for e in served.app.state.log]
    assert all("error" not in r and r["available_actions"] for r in first + after)
    assert paths.count("/reset") == 3 and paths.count("/step") == 3


def test_bad_batch_bodies_are_4xx_and_a_failing_item_fails_only_itself(start_server):
    url = start_server("servers.babyai").url
    ids = [requests.post(url + "/create", json={}, timeout=10).json()["id"] for _ in range(3)]
    for path, good in (
        ("/reset_batch", {"id": ids[0], "data_idx": 0}),
        ("/step_batch", {"id": ids[0], "action": "x"}),
    ):
        for body in (
            b"not json",
            b"{}",
            b'"x"',
            b"[1]",
            b"[[]]",
            b"[null]",
            b'[{"id": true}]',
            b"[" * 10_000,
            b'[{"id": 0, "data_idx": NaN, "action": "\\ud800"}]',
        ):
            r = requests.post(url + path, data=body, headers={"Content-Type": "application/json"}, timeout=30)
            assert 400 <= r.status_code < 500 and "error" in r.json(), (
                path,
                body[:30],
                r.status_code,
                r.text[:200],
            )
        r = requests.post(url + path, json=[good] * 2, timeout=10)  # one instance twice
        assert r.status_code == 400 and "more than once" in r.json()["error"]
        r = requests.post(url + path, json=[good] * 1025, timeout=30)  # more than MAX_BATCH
        assert r.status_code == 422
    # A step before any reset (400) and an unknown instance (404) answer in their places.
    r = requests.post(
        url + "/reset_batch",
        json=[
            {"id": ids[0], "data_idx": 0},
            {"id": 10**6, "data_idx": 0},
            {"id": ids[1], "data_idx": "no such task"},
        ],
        timeout=10,
    )
    assert r.status_code == 200
    ok, unknown, bad_task = r.json()
    assert isinstance(ok["observation"], str) and unknown["status"] == 404 and bad_task["status"] == 400
    r = requests.post(url + "/step_batch", json=[{"id": i, "action": "turn left"} for i in ids], timeout=10)
    assert r.status_code == 200
    assert [("observation" in a, a.get("status")) for a in r.json()] == [
        (True, None),
        (False, 400),
        (False, 400),
    ]


def test_an_item_that_times_out_is_a_504_in_its_place(start_server):
    url = start_server("tests.hang_server", args=["--time-limit", "1.5"]).url
    ids = [requests.post(url + "/create", json={}, timeout=10).json()["id"] for _ in range(3)]
    r = requests.post(url + "/reset_batch", json=[{"id": i, "data_idx": i} for i in ids], timeout=10)
    assert [a["observation"] for a in r.json()] == [f"task {i}" for i in ids]
    r = requests.post(
        url + "/step_batch",
        json=[
            {"id": ids[0], "action": "a"},
            {"id": ids[1], "action": "spin"},
            {"id": ids[2], "action": "crash"},
        ],
        timeout=10,
    )
    assert r.status_code == 200
    a, spin, crash = r.json()
    assert a["observation"] == "a" and spin["status"] == 504 and crash["status"] == 500


def test_the_pool_ends_only_the_failing_episodes_of_a_batch(start_server):
    url = start_server("tests.hang_server", args=["--time-limit", "1.5"]).url
    pool = EnvPool(url=url, size=3)
    try:
        pool.reset([0, 1, 2], [0, 1, 2])
        assert pool.batched is True
        count = lambda: requests.get(url + "/instances", timeout=5).json()  # noqa: E731
        assert count() == 3
        out = pool.step([0, 1, 2], ["a", "crash", "b"])
        assert [r.get("error") is None for r in out] == [True, False, True]
        assert out[1]["done"] and pool.ids[1] is None and count() == 2  # dropped and closed
        pool.reset([1], [1])
        out = pool.step([0, 1, 2], ["c", "d", "sleep"])  # stuck past the server's limit: its 504
        assert [r.get("error") is None for r in out] == [True, True, False] and "504" in out[2]["error"]
        assert pool.ids[2] is None and count() == 2
        again = pool.reset([0, 1, 2], [5, 6, 7])
        assert [r["observation"] for r in again] == ["task 5", "task 6", "task 7"]
    finally:
        pool.close()
