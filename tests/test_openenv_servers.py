"""OpenEnv's own client drives these servers (servers/openenv.py).

`openenv.core.GenericEnvClient`, the client class of the `openenv` package from PyPI
(requirements-openenv.txt, installed with --no-deps), plays whole episodes on all five servers over
its WebSocket session: the task picked through OpenEnv's task API (split, index), each action the
server's expert's (POST /expert with the session's key), to success. The same task gives the same
observations, rewards and done flags in OpenEnv's dialect, this project's and AgentGym's; a bad
action gets the server's message, the same in each."""

import os
import re
import shutil

import pytest
import requests

from envs import ENVS

pytest.importorskip(
    "openenv.core", reason="OpenEnv's client: pip install --no-deps -r requirements-openenv.txt"
)
from openenv.core import GenericEnvClient  # noqa: E402

# name -> (module, test split index, a bad action, what the server needs)
SERVERS = {
    "babyai": ("servers.babyai", 0, "fly to the moon", None),
    "textcraft": ("servers.textcraft", 0, "craft 1 diamond using 1 dirt", None),
    "searchqa": ("servers.searchqa", 2, "<answer>certainly not this</answer>", None),
    "sciworld": ("servers.sciworld", 36, "fly to the moon", "java"),  # test/36: task 525, 4-1 (find)
    "webarena": ("servers.webarena", 0, "```click [999999]```", "chromium"),
}
SUCCESS = {
    "babyai": 1e-6,
    "textcraft": 1.0,
    "searchqa": 1.0,
    "sciworld": 100.0,
    "webarena": 1.0,
}  # final score


@pytest.fixture(scope="module", params=list(SERVERS))
def served(request, start_server, tmp_path_factory):
    module, _, _, needs = SERVERS[request.param]
    if needs and not (shutil.which(needs) or os.environ.get("WEBARENA_CHROMIUM")):
        pytest.skip(f"needs {needs}")
    os.environ["SEARCHQA_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return request.param, start_server(module).url
    finally:
        del os.environ["SEARCHQA_CACHE"]


def openenv_episode(url: str, split: str, index: int, horizon: int = 60) -> tuple[list, list, dict]:
    """OpenEnv's client through one episode, each action the expert's: (actions, [(text, reward,
    done)] from the reset on, the last step's observation)."""
    actions, seen = [], []
    with GenericEnvClient(base_url=url).sync() as env:
        result = env.reset(split=split, index=index)
        seen.append((result.observation["text"], result.reward, result.done))
        session = env.state()["session"]  # the one HTTP call a session's instance answers
        for _ in range(horizon):
            advice = requests.post(url + "/expert", json={"session": session}, timeout=60)
            assert advice.status_code == 200, advice.text
            actions.append(advice.json()["action"])
            result = env.step({"action": actions[-1]})
            seen.append((result.observation["text"], result.reward, result.done))
            if result.done:
                break
        assert env.state()["step_count"] == len(actions)
    return actions, seen, result.observation


def replay(
    url: str, task: int, actions: list[str], instance_key: str = "id", task_key: str = "data_idx"
) -> list:
    """The same actions in this project's dialect (or, with AgentGym's keys, AgentGym's)."""
    created = requests.post(url + "/create", json={}, timeout=60).json()
    iid = created if isinstance(created, int) else created["id"]
    answers = [requests.post(url + "/reset", json={instance_key: iid, task_key: task}, timeout=60).json()]
    for action in actions:
        answers.append(
            requests.post(url + "/step", json={instance_key: iid, "action": action}, timeout=60).json()
        )
    requests.post(url + "/close", json={instance_key: iid}, timeout=60)
    return [(a["observation"], a["reward"], a["done"]) for a in answers]


def steady(episode: list) -> list:
    """An episode with its temperature readings blanked: two fresh ScienceWorld simulators given the
    same actions can read different temperatures (a thermometer read 52 degrees in one and 49 in
    the other, at the same step), so readings are not compared; everything else is."""
    return [(re.sub(r"-?\d+(\.\d+)? degrees", "<n> degrees", o), r, d) for o, r, d in episode]


def test_openenvs_client_plays_whole_episodes_to_success_with_the_experts_actions(served):
    name, url = served
    _, index, _, _ = SERVERS[name]
    actions, seen, last = openenv_episode(url, "test", index)
    assert seen[-1][2] is True and last["score"] >= SUCCESS[name], (name, actions, seen[-1])
    task = ENVS[name].splits["test"][index]
    assert steady(replay(url, task, actions)) == steady(seen)  # this project's dialect: the same episode
    spec = ENVS[name]  # AgentGym's: its client's keys (`env_idx`; the task as `id` or `idx`)
    if spec.task_key != "idx":
        assert steady(replay(url, task, actions, spec.instance_key, spec.task_key)) == steady(seen)


def test_a_bad_action_gets_the_servers_message_in_every_dialect(served):
    name, url = served
    _, index, bad, _ = SERVERS[name]
    with GenericEnvClient(base_url=url).sync() as env:
        env.reset(split="test", index=index)
        result = env.step({"action": bad})
    ours = replay(url, ENVS[name].splits["test"][index], [bad])[-1]
    assert result.done is False and isinstance(result.observation["text"], str)
    assert (result.observation["text"], result.reward, result.done) == ours


def test_the_task_api_lists_the_projects_splits(served):
    name, url = served
    splits = ENVS[name].splits
    assert requests.get(url + "/list_environments", timeout=10).json() == [name]
    listed = requests.get(f"{url}/{name}/splits", timeout=10).json()
    assert [s["name"] for s in listed] == list(splits)
    assert {s["name"]: s["type"] for s in listed}["val"] == "validation"
    n = requests.post(f"{url}/{name}/num_tasks", json={"split": "test"}, timeout=10).json()["num_tasks"]
    assert n == len(splits["test"])
    task = requests.post(f"{url}/{name}/task", json={"split": "test", "index": n - 1}, timeout=10).json()[
        "task"
    ]
    assert task["data_idx"] == splits["test"][-1] and task["index"] == n - 1
    tasks = requests.post(
        f"{url}/{name}/task_range", json={"split": "train", "start": 1, "stop": 4}, timeout=10
    )
    assert [t["data_idx"] for t in tasks.json()["tasks"]] == splits["train"][1:4]
    assert requests.get(url + "/health", timeout=10).json() == {"status": "healthy"}
    assert requests.get(url + "/metadata", timeout=10).json()["description"] == ENVS[name].instruction
    schema = requests.get(url + "/schema", timeout=10).json()
    assert schema["action"]["required"] == ["action"] and "text" in schema["observation"]["properties"]
    assert requests.get(url + "/state", timeout=10).json() == {"episode_id": None, "step_count": 0}


def test_openenvs_stateless_http_reset_answers_the_tasks_first_observation(served):
    """POST /reset naming no instance: OpenEnv's one-off reset (an instance made, reset, closed)."""
    name, url = served
    _, index, _, _ = SERVERS[name]
    r = requests.post(url + "/reset", json={"split": "test", "index": index}, timeout=60)
    assert r.status_code == 200, r.text
    first = replay(url, ENVS[name].splits["test"][index], [])[0]
    assert (r.json()["observation"]["text"], r.json()["reward"], r.json()["done"]) == first
    same = requests.post(url + "/reset", json={"data_idx": ENVS[name].splits["test"][index]}, timeout=60)
    assert same.json()["done"] is False
