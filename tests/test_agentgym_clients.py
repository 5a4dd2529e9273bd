"""AgentGym's own clients drive these servers.

Each test replays, request for request, what one of AgentGym's client classes sends
(`agentenv/agentenv/envs/<env>.py` in WooooDyy/AgentGym: the constructor's /create, `reset`,
`observe`, several `step`s, `close`) and asserts what that client reads from each answer: its
`_post` asserts a 200 and indexes the JSON, so a missing key is a KeyError there and a 422 or 500 an
AssertionError. The bodies are built as those classes build them (their `_post` adds the instance
under `id` or `env_idx`; BabyAI's and TextCraft's `step` cut the action out of the reply with the
same regular expressions)."""

import os
import re
import shutil

import pytest
import requests

from servers.searchqa_data import generate

TIMEOUT = 300  # the clients' default


class AgentGymHTTP:
    """BaseEnvClient's `_post` / `_get` as AgentGym's env clients write them."""

    def __init__(self, url: str, key: str, env_id):
        self.url, self.key, self.env_id = url, key, env_id

    def post(self, path: str, data: dict):
        data[self.key] = self.env_id
        res = requests.post(f"{self.url}/{path}", json=data, timeout=TIMEOUT)
        assert res.status_code == 200, (path, res.status_code, res.text)
        return res.json()

    def get(self, path: str):
        res = requests.get(f"{self.url}/{path}?{self.key}={self.env_id}", timeout=TIMEOUT)
        assert res.status_code == 200, (path, res.status_code, res.text)
        return res.json()


def react_action(reply: str) -> str:
    """BabyAIEnvClient.step / TextCraftEnvClient.step: the last `Action:` line, cleaned."""
    matches = re.findall(r"Action:\s*(.*?)(?=\n|$)", reply, re.DOTALL)
    action = re.sub(r"[^A-Za-z0-9, ]+", "", matches[-1] if matches else "")
    return " ".join(action.split()).strip()


def listed_actions(observation: str) -> list[str]:
    line = [ln for ln in observation.splitlines() if ln.startswith("Available actions:")][-1]
    return [a.strip() for a in line.split(":", 1)[1].strip().rstrip(".").split(",")]


def test_agentgym_babyai_client(start_server):
    url = start_server("servers.babyai").url
    ok = requests.post(f"{url}/create", timeout=TIMEOUT)  # no body at all
    assert ok.status_code == 200
    http = AgentGymHTTP(url, "id", ok.json()["id"])

    response = http.post("reset", {"data_idx": 1})  # level 2, GoToRedBall, seed 0
    info = {k: response[k] for k in ("observation", "reward", "score", "done")}
    assert "Goal: go to the red ball" in info["observation"] and info["done"] is False
    go = next(a for a in listed_actions(info["observation"]) if a.startswith("go to red ball"))

    for reply in [
        "Thought:\nLook around first.\n\nAction:\nturn left",
        "Thought:\nWhat can I do?\n\nAction:\ncheck available actions",
        f"Thought:\nThe red ball is in view.\n\nAction:\n{go}",
    ]:
        if go not in listed_actions(info["observation"]):  # turned away: face it again
            reply = "Action:\nturn right"
        response = http.post("step", {"action": react_action(reply)})
        info = {k: response[k] for k in ("observation", "reward", "score", "done")}
        # BabyAIEnvClient.step returns StepOutput(state=observation, reward=score, done=done)
        assert isinstance(info["observation"], str) and isinstance(info["score"], float)
    assert info["done"] is True and info["score"] > 0  # the red ball was reached
    assert http.get("observation") in info["observation"]
    http.post("close", {})


def test_agentgym_textcraft_client(start_server):
    url = start_server("servers.textcraft").url
    dir_info = {"minecraft_dir": "agentenv_textcraft/", "commands": None, "goal": None}
    ok = requests.post(f"{url}/create", timeout=TIMEOUT, json=dir_info)
    assert ok.status_code == 200, ok.text
    ok = ok.json()
    http = AgentGymHTTP(url, "id", ok["id"])
    info = {"observation": ok["observation"], "reward": 0, "done": False}  # read at once
    assert isinstance(info["observation"], str)

    response = http.post("reset", {"data_idx": 0})
    info.update({"observation": response["observation"], "reward": 0, "done": False})
    assert info["observation"].startswith("Crafting commands:\n")
    assert info["observation"].endswith("\n\nGoal: craft acacia planks.")
    assert "craft 4 acacia planks using 1 acacia logs" in info["observation"]

    replies = [
        "Thought:\nI need logs.\n\nAction:\nget 1 acacia logs",
        "Thought:\nCheck.\n\nAction:\ninventory",
        "Thought:\nNow craft.\n\nAction:\ncraft 4 acacia planks using 1 acacia logs",
    ]
    seen = []
    for reply in replies:
        response = http.post("step", {"action": react_action(reply)})
        info = {k: response[k] for k in ("observation", "reward", "done")}
        seen.append((info["observation"], info["reward"], info["done"]))
    assert seen[0] == ("Got 1 acacia logs.", 0.0, False)
    assert seen[1] == ("Inventory: [acacia logs] (1)", 0.0, False)
    assert seen[2] == ("Crafted 4 acacia planks.", 1.0, True)
    assert http.get("observation") == "Crafted 4 acacia planks."  # its `_get` names the instance `id`
    http.post("close", {})


def test_agentgym_sciworld_client(start_server):
    url = start_server("servers.sciworld").url
    ok = requests.post(f"{url}/create", timeout=TIMEOUT)
    assert ok.status_code == 200
    http = AgentGymHTTP(url, "id", ok.json()["id"])

    response = http.post("reset", {"data_idx": 0})
    # SciworldEnvClient.reset: the first observation is task_description + "\n" + observation
    first = response["task_description"] + "\n" + response["observation"]
    assert first.startswith("Your task is to") and first.count(response["task_description"]) == 1
    assert "This room is called" in response["observation"]

    for action in ["look around", "inventory", "open door to kitchen"]:  # its adapter's output
        response = http.post("step", {"action": action})
        info = {k: response[k] for k in ("observation", "reward", "score", "done")}
        assert isinstance(info["observation"], str) and info["done"] is False
    assert info["score"] >= 0
    assert http.get("observation") == info["observation"]
    http.post("close", {})


@pytest.fixture(scope="module")
def searchqa_url(start_server, tmp_path_factory):
    os.environ["SEARCHQA_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return start_server("servers.searchqa").url
    finally:
        del os.environ["SEARCHQA_CACHE"]


def test_agentgym_searchqa_client(searchqa_url):
    url, questions = searchqa_url, generate(0)[1]  # the world the server generated
    ok = requests.post(f"{url}/create", json={"id": 0}, timeout=TIMEOUT)
    assert ok.status_code == 200
    env_id = ok.json()  # the whole answer is the instance
    assert isinstance(env_id, int)
    http = AgentGymHTTP(url, "env_idx", env_id)

    task = 7  # a task index distinct from the instance: `id` at reset is the question
    http.post("reset", {"id": task})
    question = http.get("observation")  # SearchQAEnvClient.observe
    assert isinstance(question, str) and questions[task]["question"] in question

    gold = questions[task]["golden_answers"][0]
    search = f"<think>Look it up.</think><search>{questions[task]['question']}</search>"
    for reply, done in [
        (search, False),
        ("<answer>certainly not this</answer>", False),
        (f"<answer>{gold}</answer>", True),
    ]:
        response = http.post("step", {"action": reply})
        out = (response["observation"], response["reward"], response["done"])
        assert isinstance(out[0], str) and out[2] is done
    assert out[1] == 1.0
    http.post("close", {})


@pytest.mark.skipif(
    not (shutil.which("chromium") or os.environ.get("WEBARENA_CHROMIUM")), reason="WebArena needs Chromium"
)
def test_agentgym_webarena_client(start_server):
    url = start_server("servers.webarena").url
    ok = requests.post(f"{url}/create", timeout=TIMEOUT)  # no body
    assert ok.status_code == 200
    http = AgentGymHTTP(url, "env_idx", ok.json()["env_idx"])

    response = http.post("reset", {"seed": 0, "idx": 26})  # config_files/26.json: a forum task
    assert response["observation"] != "TimeoutError" and "OBJECTIVE:" in response["observation"]
    page = http.get("observation")  # WebarenaEnvClient.observe
    link = re.search(r"\[(\d+)\] link 'cooking'", page)
    assert link, page

    for reply in [
        f"Let's open the forum.\n```click [{link.group(1)}]```",
        "Done: the answer is found.\n```stop []```",
    ]:
        assert re.findall(r"```(.*?)```", reply, re.DOTALL)  # the client posts only parseable replies
        response = http.post("step", {"action": reply})
        reward = response["reward"] if response["terminated"] else 0
        assert isinstance(response["observation"], str)
    assert response["terminated"] is True and reward == 1.0
    http.post("close", {})
