"""SciWorld server over real HTTP, against the real ScienceWorld jar: gold paths score 100, invalid
actions get ScienceWorld's answer, splits are ScienceWorld's own and disjoint, a killed JVM is a
clear error that the server survives, and the server's memory stays flat over 1,000 episodes."""

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from scienceworld import ScienceWorldEnv

from envs import ENVS
from servers.sciworld import EXCLUDED, GAMES, TASKS


def data_idx(task: str, variation: int) -> int:
    return next(i for i, (name, v, _) in enumerate(GAMES) if (name, v) == (task, variation))


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("servers.sciworld").url


@pytest.fixture(scope="module")
def reference():
    """ScienceWorld's own Python API, in this process: gold paths and variation lists."""
    env = ScienceWorldEnv()
    yield env
    env.close()


def post(url, path, **body):
    r = requests.post(url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def test_task_table_is_scienceworlds(reference):
    """TASKS (and so GAMES and envs/tasks.py's splits) match the jar: AgentGym's task order and
    exclusions, each task's variation count, and its train/dev/test variation lists."""
    included = [(tid, name) for tid, name in reference.tasks.items() if tid not in EXCLUDED]
    assert [(tid, name) for tid, name, *_ in TASKS] == included
    for _, name, n, n_train, n_dev in TASKS:
        assert reference.get_max_variations(name) == n
        reference.load(name, 0, "")
        assert reference.get_variations_train() == list(range(n_train)), name
        assert reference.get_variations_dev() == list(range(n_train, n_train + n_dev)), name
        assert reference.get_variations_test() == list(range(n_train + n_dev, n)), name


def test_splits_are_disjoint_and_follow_scienceworld():
    splits = ENVS["sciworld"].splits
    train, val, test = set(splits["train"]), set(splits["val"]), set(splits["test"])
    assert not train & test and not train & val and not val & test
    assert train | val | test == set(range(len(GAMES))) == set(range(4639))
    ours = {"train": "train", "val": "dev", "test": "test"}  # our val is ScienceWorld's dev
    for name, ids in splits.items():  # ScienceWorld's own split of each (find-test: within test)
        assert all(GAMES[i][2] == ours[name.removeprefix("find-")] for i in ids), name
    for split in (
        "find-train",
        "find-val",
        "find-test",
    ):  # the easier slice: the four find-* tasks, interleaved
        assert {GAMES[i][0] for i in splits[split]} == {n for _, n, *_ in TASKS if n.startswith("find-")}
        assert len({GAMES[i][0] for i in splits[split][:4]}) == 4
    assert {GAMES[i][0] for i in test} == {name for _, name, *_ in TASKS}  # every task is tested


@pytest.mark.parametrize("task,variation", [("find-non-living-thing", 230), ("boil", 0)])
def test_gold_path_scores_100(server, reference, task, variation):
    """Replaying ScienceWorld's gold action sequence over HTTP reaches score 100 and done."""
    reference.load(task, variation, "", generateGoldPath=True)
    gold = reference.get_gold_action_sequence()
    iid = post(server, "/create")["id"]
    first = post(server, "/reset", id=iid, data_idx=data_idx(task, variation))
    assert first["category"] == task and first["var_num"] == variation and first["score"] == 0
    assert first["task_description"] == reference.get_task_description()
    assert first["observation"].startswith("This room is called")  # the answer to `look around`
    total, out = 0.0, first
    for action in gold:  # the gold path may go on a few actions past the winning one
        out = post(server, "/step", id=iid, action=action)
        total += out["reward"]
        if out["done"]:
            break
    assert out["score"] == 100 and out["done"] and not out["failed"]
    assert total == pytest.approx(1.0)  # rewards are score changes / 100
    assert requests.get(server + "/observation", params={"id": iid}).json() == out["observation"]
    post(server, "/close", id=iid)


def test_invalid_action_gets_scienceworlds_message(server):
    iid = post(server, "/create")["id"]
    post(server, "/reset", id=iid, data_idx=data_idx("boil", 21))
    out = post(server, "/step", id=iid, action="fly to the moon")
    assert out["observation"] == "No known action matches that input."
    assert out["score"] == 0 and out["reward"] == 0 and not out["done"]
    assert "This room is called" in post(server, "/step", id=iid, action="look around")["observation"]
    # the extras, computed only when asked
    valid = post(server, "/step", id=iid, action="check valid actions")["observation"]
    assert valid.startswith("Valid actions") and "look around" in valid
    hint = requests.get(server + "/action_hint", params={"id": iid}).json()
    assert "focus on OBJ" in hint["possible_actions"] and "look around" in hint["valid_actions"]
    assert "Sequential Subgoals" in requests.get(server + "/goals", params={"id": iid}).json()["goals"]
    desc = requests.get(server + "/task_description", params={"id": iid}).json()["task_description"]
    assert desc.startswith("Your task is to boil")
    post(server, "/close", id=iid)


def test_wrong_focus_fails_with_score_zero(server):
    iid = post(server, "/create")["id"]
    post(server, "/reset", id=iid, data_idx=data_idx("lifespan-longest-lived", 0))
    out = post(server, "/step", id=iid, action="focus on air")  # not the animal: task failed
    assert out["done"] and out["failed"] and out["score"] == 0
    post(server, "/close", id=iid)


def test_bad_requests_are_json_errors(server):
    assert requests.post(server + "/step", json={"id": 9999, "action": "look around"}).status_code == 404
    iid = post(server, "/create")["id"]
    r = requests.post(server + "/step", json={"id": iid, "action": "look around"})
    assert r.status_code == 400 and "reset" in r.json()["error"]  # stepping before any reset
    for bad, status in ((-1, 422), (len(GAMES), 400)):  # negative fails validation; too large, the env
        r = requests.post(server + "/reset", json={"id": iid, "data_idx": bad})
        assert r.status_code == status and "data_idx" in r.json()["error"]
    assert requests.post(server + "/step", json={"id": iid}).status_code == 422  # no action
    assert requests.get(server + "/goals", params={"id": iid}).status_code == 400
    post(server, "/close", id=iid)
    assert requests.post(server + "/close", json={"id": iid}).status_code == 404


def test_killed_jvm_is_a_clear_error_and_others_keep_serving(server):
    a, b = post(server, "/create")["id"], post(server, "/create")["id"]
    for iid in (a, b):
        post(server, "/reset", id=iid, data_idx=data_idx("find-plant", 0))
    pid = requests.get(server + "/detail", params={"id": a}).json()["jvm_pid"]
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)
    r = requests.post(server + "/step", json={"id": a, "action": "look around"}, timeout=30)
    assert r.status_code == 503 and "JVM" in r.json()["error"] and "not running" in r.json()["error"]
    assert "This room" in post(server, "/step", id=b, action="look around")["observation"]
    again = post(server, "/reset", id=a, data_idx=data_idx("find-plant", 1))  # a fresh JVM
    assert again["category"] == "find-plant"
    assert requests.get(server + "/detail", params={"id": a}).json()["jvm_pid"] != pid
    c = post(server, "/create")["id"]
    post(server, "/reset", id=c, data_idx=0)
    for iid in (a, b, c):
        post(server, "/close", id=iid)


def test_close_ends_the_jvm(server):
    iid = post(server, "/create")["id"]
    pid = requests.get(server + "/detail", params={"id": iid}).json()["jvm_pid"]
    assert os.path.exists(f"/proc/{pid}")
    post(server, "/close", id=iid)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


@pytest.mark.slow  # over 30 s on 2 cores (pyproject.toml)
def test_rss_stays_flat_over_1000_episodes(server):
    """1,000 short episodes (reset + 2 steps) on two reused instances: the server's own memory
    stays flat, and so does each capped JVM's once warm."""
    ids = [post(server, "/create")["id"] for _ in range(2)]
    tasks = [data_idx("lifespan-longest-lived", v) for v in range(62)]

    def episodes(slot: int, n: int):
        session = requests.Session()
        for k in range(n):
            iid = ids[slot]
            session.post(server + "/reset", json={"id": iid, "data_idx": tasks[(k * 2 + slot) % 62]})
            session.post(server + "/step", json={"id": iid, "action": "look around"})
            session.post(server + "/step", json={"id": iid, "action": "go to outside"})

    pids = [requests.get(server + "/detail", params={"id": i}).json()["jvm_pid"] for i in ids]
    ppid = int(open(f"/proc/{pids[0]}/stat").read().split(")")[1].split()[1])  # the JVM's parent
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(episodes, [0, 1], [50, 50]))  # warm up
        before = rss_mb(ppid), [rss_mb(p) for p in pids]
        list(pool.map(episodes, [0, 1], [450, 450]))
        after = rss_mb(ppid), [rss_mb(p) for p in pids]
    print(f"server RSS {before[0]:.0f} -> {after[0]:.0f} MB; JVMs {before[1]} -> {after[1]} MB")
    assert after[0] - before[0] < 20
    assert all(b - a < 100 and b < 500 for a, b in zip(before[1], after[1]))  # -Xmx256m
    for iid in ids:
        post(server, "/close", id=iid)
