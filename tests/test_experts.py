"""Every environment's expert (POST /expert) over real HTTP: it solves a known task of its
environment, refuses bad input as every endpoint does, and its episodes (eval.py --expert) are
demonstrations in eval.py's trajectory format, whose replies parse back to the actions sent."""

import os
import shutil

import pytest
import requests

import eval as evaluation
import view
from envs import ENVS, EnvPool


def play(url: str, spec, task, horizon: int) -> tuple[dict, list[str]]:
    """The expert's actions sent as /step replies until the episode ends: (last answer, actions)."""
    key = spec.instance_key
    created = requests.post(url + "/create", json=spec.extra_create, timeout=60).json()
    iid = created if isinstance(created, int) else created["id"]
    r = requests.post(url + "/reset", json={key: iid, spec.task_key: task, **spec.reset_extra}, timeout=60)
    assert r.status_code == 200, r.text
    actions, answer = [], r.json()
    for _ in range(horizon):
        advice = requests.post(url + "/expert", json={key: iid}, timeout=60)
        assert advice.status_code == 200, advice.text
        actions.append(advice.json()["action"])
        answer = requests.post(url + "/step", json={key: iid, "action": actions[-1]}, timeout=60).json()
        if answer["done"]:
            break
    requests.post(url + "/close", json={key: iid}, timeout=60)
    return answer, actions


# ---------------------------------------------------------------------------------------------
# Each expert solves a known task of its environment
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def babyai(start_server):
    return start_server("servers.babyai").url


@pytest.fixture(scope="module")
def textcraft(start_server):
    return start_server("servers.textcraft").url


# GoToRedBall, GoToLocalS8N7, Open, OpenDoorsOrderN4Debug (seed 10000)
@pytest.mark.parametrize("task", [400001, 400004, 400011, 400015])
def test_babyai_expert_solves_test_levels(babyai, task):
    answer, actions = play(babyai, ENVS["babyai"], task, horizon=20)
    assert answer["done"] and answer["score"] > 0, actions


def test_babyai_expert_uses_high_level_actions(babyai):
    """GoToRedBall seed 10000: one `go to` action, not a walk of primitive moves."""
    answer, actions = play(babyai, ENVS["babyai"], 400001, horizon=20)
    assert answer["score"] > 0 and actions[-1].startswith("go to red ball")


def test_babyai_expert_never_goes_round_in_circles_on_a_long_level(babyai):
    """Unlock, seed 10000 (a key three rooms away): a shortcut the bot did not plan (it opened a door
    the bot was not heading for) once made the bot close it again, and the shortcut open it, forever.
    Each answer now shrinks the bot's plan: the level is solved, in about 44 turns."""
    answer, actions = play(babyai, ENVS["babyai"], 400023, horizon=60)
    assert answer["done"] and answer["score"] > 0, actions


def test_babyai_expert_answers_where_the_bot_would_replan_without_end(babyai):
    """UnlockToUnlock, seed 10000: checking a shortcut leads BabyAIBot into a state where it pushes
    and pops subgoals forever (every /expert call was a 504); its replanning is now bounded, that
    shortcut is refused, and the level is solved within the 20-turn horizon."""
    answer, actions = play(babyai, ENVS["babyai"], 400028, horizon=20)
    assert answer["done"] and answer["score"] > 0, actions


def test_asking_the_babyai_expert_changes_nothing_the_agent_sees(babyai):
    """The expert plans on its own copies: the episode is where it was, and steps the same way."""

    def episode(ask: bool) -> list[str]:
        iid = requests.post(babyai + "/create", json={}).json()["id"]
        requests.post(babyai + "/reset", json={"id": iid, "data_idx": 400021})  # PutNextLocal
        seen = []
        for a in ["turn left", "move forward", "turn right"]:
            before = requests.get(babyai + "/observation", params={"id": iid}).json()
            if ask:
                requests.post(babyai + "/expert", json={"id": iid})
                assert requests.get(babyai + "/observation", params={"id": iid}).json() == before
            seen.append(requests.post(babyai + "/step", json={"id": iid, "action": a}).json()["observation"])
        return seen

    assert episode(ask=True) == episode(ask=False)


def test_babyai_expert_finishes_after_the_agent_wandered_off(babyai):
    """Off the bot's path (the agent turned around and walked), the bot replans from where the agent is."""
    iid = requests.post(babyai + "/create", json={}).json()["id"]
    requests.post(babyai + "/reset", json={"id": iid, "data_idx": 400004})
    for a in ["turn left", "turn left", "move forward", "turn right"]:
        requests.post(babyai + "/step", json={"id": iid, "action": a})
    for _ in range(20):
        a = requests.post(babyai + "/expert", json={"id": iid}).json()["action"]
        r = requests.post(babyai + "/step", json={"id": iid, "action": a}).json()
        if r["done"]:
            break
    assert r["done"] and r["score"] > 0


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_textcraft_expert_crafts_a_goal_of_each_depth(textcraft, depth):
    import servers.textcraft as T

    task = next(i for i, g in enumerate(T.GOALS) if T.DEPTH[g] == depth)
    answer, actions = play(textcraft, ENVS["textcraft"], task, horizon=30)
    assert answer["done"] and answer["reward"] == 1.0, actions
    assert actions[-1].startswith(f"craft 1 {T.GOALS[task]} using") or actions[-1].startswith("craft")


def test_textcraft_expert_finishes_from_a_state_the_agent_left(textcraft):
    """Off its own path (the agent made oak planks; the expert would have used bamboo), the expert
    plans from the inventory the agent has: one craft is left."""
    iid = requests.post(textcraft + "/create", json={}).json()["id"]
    requests.post(textcraft + "/reset", json={"id": iid, "data_idx": "stick"})
    assert requests.post(textcraft + "/expert", json={"id": iid}).json()["action"] == "get 2 bamboo"
    for a in ["get 1 oak logs", "craft 4 oak planks using 1 oak logs"]:
        requests.post(textcraft + "/step", json={"id": iid, "action": a})
    advice = requests.post(textcraft + "/expert", json={"id": iid}).json()
    assert advice["action"] == "craft 4 stick using 2 oak planks"
    assert requests.post(textcraft + "/step", json={"id": iid, "action": advice["action"]}).json()["done"]


@pytest.fixture(scope="module")
def searchqa(start_server, tmp_path_factory):
    """The generated encyclopedia, cached in a temp folder (EnvServer passes only --port)."""
    old = os.environ.get("SEARCHQA_CACHE")
    os.environ["SEARCHQA_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return start_server("servers.searchqa").url
    finally:
        os.environ.pop("SEARCHQA_CACHE") if old is None else os.environ.__setitem__("SEARCHQA_CACHE", old)


def test_searchqa_expert_searches_each_hop_then_answers(searchqa):
    """Test question 2402 has 3 hops: three searches, each finding its hop's passage, then the answer."""
    from servers.searchqa_data import generate

    q = generate(0)[1][2402]
    answer, actions = play(searchqa, ENVS["searchqa"], 2402, horizon=10)
    searches = [f"<search>{h}</search>" for h in q["path"]]
    assert actions == searches + [f"<answer>{q['golden_answers'][0]}</answer>"]
    assert answer["done"] and answer["reward"] == 1.0


@pytest.fixture(scope="module")
def sciworld(start_server):
    return start_server("servers.sciworld").url


def test_sciworld_expert_follows_the_gold_path_to_score_100(sciworld):
    """data_idx 525: a test variation of use-thermometer (a 14-action gold path)."""
    answer, actions = play(sciworld, ENVS["sciworld"], 525, horizon=40)
    assert answer["done"] and answer["score"] == 100, actions


def test_sciworld_expert_says_when_the_agent_left_the_gold_path(sciworld):
    """data_idx 525 starts in the hallway; its gold path begins with `open door to kitchen`."""
    iid = requests.post(sciworld + "/create", json={}).json()["id"]
    expert = lambda: requests.post(sciworld + "/expert", json={"id": iid}).json()  # noqa: E731
    step = lambda a: requests.post(sciworld + "/step", json={"id": iid, "action": a}).json()  # noqa: E731
    requests.post(sciworld + "/reset", json={"id": iid, "data_idx": 525})
    first = expert()
    assert first == {**first, "action": "open door to kitchen", "on_path": True}
    step("look around")  # an observation: on the path
    assert expert() == first
    assert "No known action matches" in step("fly to the moon")["observation"]  # not carried out
    assert expert() == first
    step("open door to bedroom")  # opening a door leaves nothing in the path's way
    step("go to bedroom")  # a walk elsewhere: the expert walks back first
    assert expert()["action"] == "go to hallway" and not expert()["on_path"]
    assert step("go to hallway")["observation"] == "You move to the hallway."
    assert expert() == first
    requests.post(sciworld + "/step", json={"id": iid, "action": first["action"]})
    second = requests.post(sciworld + "/expert", json={"id": iid}).json()
    assert second["on_path"] is True and second["action"] != first["action"]
    assert "stale" not in first and "stale" not in second
    requests.post(sciworld + "/step", json={"id": iid, "action": "wait1"})  # changes the world: off the path
    lost = requests.post(sciworld + "/expert", json={"id": iid}).json()
    assert lost["on_path"] is False and lost["stale"] is True
    requests.post(sciworld + "/close", json={"id": iid})


def test_dagger_relabelling_stops_where_the_sciworld_expert_only_guesses(sciworld):
    """sft.relabel labels the states the expert has a plan for and stops at its first `stale`
    answer: after `wait1` (off the gold path for good) nothing more of the episode is labelled."""
    import sft
    from envs import close_pool, open_pool

    actions = ["look around", "wait1", "look around"]
    pool = open_pool("sciworld", size=1, url=sciworld)
    try:
        observations = [pool.reset([0], [525])[0]["observation"]]
        observations += [pool.step([0], [a])[0]["observation"] for a in actions]
    finally:
        close_pool(pool)
    (out,), diverged = sft.relabel(
        [dict(task=525, actions=actions, observations=observations)], "sciworld", sciworld
    )
    assert diverged == 0
    assert [ENVS["sciworld"].parse_action(r) for r in out["expert"]] == ["open door to kitchen"] * 2


needs_chromium = pytest.mark.skipif(
    not (shutil.which("chromium") or os.environ.get("WEBARENA_CHROMIUM")),
    reason="needs Chromium (apt-get install -y chromium)",
)


@pytest.fixture(scope="module")
def webarena(start_server):
    return start_server("servers.webarena").url


@needs_chromium
@pytest.mark.parametrize("task", [4, 16, 34])  # string match, a form (program_html), a vote (program_html)
def test_webarena_expert_reference_solution_passes_the_tasks_evaluator(webarena, task):
    answer, actions = play(webarena, ENVS["webarena"], task, horizon=15)
    assert answer["done"] and answer["reward"] == 1.0, actions


@needs_chromium
def test_webarena_expert_starts_again_after_the_agent_left_its_path(webarena):
    iid = requests.post(webarena + "/create", json={}).json()["id"]
    obs = requests.post(webarena + "/reset", json={"env_idx": iid, "idx": 4})
    assert obs.status_code == 200
    advice = requests.post(webarena + "/expert", json={"env_idx": iid}).json()
    assert advice["on_path"] and advice["action"].startswith("```click [")
    requests.post(webarena + "/step", json={"env_idx": iid, "action": "```scroll [down]```"})
    back = requests.post(webarena + "/expert", json={"env_idx": iid}).json()
    assert not back["on_path"] and back["action"].startswith("```goto [http")
    for _ in range(10):
        r = requests.post(webarena + "/step", json={"env_idx": iid, "action": back["action"]}).json()
        if r["done"]:
            break
        back = requests.post(webarena + "/expert", json={"env_idx": iid}).json()
    assert r["done"] and r["reward"] == 1.0
    requests.post(webarena + "/close", json={"env_idx": iid})


@needs_chromium
def test_webarena_expert_goes_back_one_page_after_a_wrong_link(webarena):
    """Task 4's reference clicks the link Kitchen first; after the link Books the expert answers
    `go_back`, and once back on the start page its reference step again, then solves the task."""
    import re

    iid = requests.post(webarena + "/create", json={}).json()["id"]
    expert = lambda: requests.post(webarena + "/expert", json={"env_idx": iid}).json()  # noqa: E731
    step = lambda a: requests.post(webarena + "/step", json={"env_idx": iid, "action": a}).json()  # noqa: E731
    obs = requests.post(webarena + "/reset", json={"env_idx": iid, "idx": 4}).json()["observation"]
    first = expert()
    assert first["on_path"] and first["action"].startswith("```click [")
    books = next(i for i, name in re.findall(r"\[(\d+)\] link '([^']*)'", obs) if name == "Books")
    url = lambda o: re.search(r"URL: (\S+)", o).group(1)  # noqa: E731
    assert url(step(f"```click [{books}]```")["observation"]) != url(obs)  # another page
    back = expert()
    assert back == {**back, "action": "```go_back```", "on_path": False}
    step(back["action"])
    assert expert() == first
    for _ in range(5):
        r = step(expert()["action"])
        if r["done"]:
            break
    assert r["done"] and r["reward"] == 1.0
    requests.post(webarena + "/close", json={"env_idx": iid})


# ---------------------------------------------------------------------------------------------
# Bad input: the same answers as every other endpoint
# ---------------------------------------------------------------------------------------------


def test_expert_refuses_bad_input_with_4xx_json(textcraft):
    def status(body):
        r = requests.post(textcraft + "/expert", json=body, timeout=10)
        assert r.status_code == 200 or "error" in r.json()
        return r.status_code

    assert status({"id": 987654}) == 404  # unknown instance
    assert status({}) == 422  # no instance
    assert status({"id": "3"}) == 422 and status({"id": -1}) == 422 and status({"id": True}) == 422
    assert status([1, 2]) == 422
    r = requests.post(textcraft + "/expert", data=b"{not json", headers={"content-type": "application/json"})
    assert 400 <= r.status_code < 500 and "error" in r.json()
    iid = requests.post(textcraft + "/create", json={}).json()["id"]
    assert status({"id": iid}) == 400  # before a reset: nothing to advise on
    requests.post(textcraft + "/reset", json={"id": iid, "data_idx": 0})
    assert status({"id": iid}) == 200
    for _ in range(30):
        a = requests.post(textcraft + "/expert", json={"id": iid}).json()["action"]
        if requests.post(textcraft + "/step", json={"id": iid, "action": a}).json()["done"]:
            break
    assert status({"id": iid}) == 400  # the episode is over
    requests.post(textcraft + "/close", json={"id": iid})
    assert status({"id": iid}) == 404  # closed


def test_expert_uses_the_instance_name_of_agentgyms_dialect(textcraft):
    iid = requests.post(textcraft + "/create", json={}).json()["id"]
    requests.post(textcraft + "/reset", json={"id": iid, "data_idx": 0})
    r = requests.post(textcraft + "/expert", json={"env_idx": iid})
    assert r.status_code == 200 and r.json()["action"]


# ---------------------------------------------------------------------------------------------
# Demonstrations: eval.py's format, replies that parse back to the actions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["babyai", "textcraft", "sciworld"])
def test_expert_reply_parses_back_to_its_action(env):
    spec = ENVS[env]
    for action in ["turn left", "go to red ball 1", "craft 4 oak planks using 1 oak log", "look around"]:
        reply = spec.write_reply("I need it, so I do it.", action)
        assert reply.startswith("Thought: ") and "\nAction: " in reply
        assert spec.parse_action(reply) == action


def test_search_reply_is_read_by_the_server_as_its_action():
    from servers.searchqa import parse_reply

    reply = ENVS["searchqa"].write_reply("I search the person.", "<search>Dora Kelm</search>")
    assert parse_reply(reply) == ("search", "Dora Kelm") and reply.startswith("<think>")


def test_webarena_reply_is_read_by_the_server_as_its_action():
    from servers.webarena import parse_action

    reply = ENVS["webarena"].write_reply("The lamp's page shows its price.", "```stop [34.99]```")
    assert parse_action(reply) == parse_action("```stop [34.99]```") == ("stop", ("34.99",))


def test_expert_episodes_are_eval_trajectories_that_view_reads(tmp_path, textcraft):
    out = str(tmp_path / "demos")
    summary = evaluation.main(
        ["--env", "textcraft", "--expert", "true", "--task-ids", "4,9", "--url", textcraft, "--out", out]
    )
    assert summary["model"] == "expert" and summary["success_rate"] == 1.0
    rows, problems = view.read_jsonl(os.path.join(out, "trajectories.jsonl"))
    assert not problems and [r["task"] for r in rows] == [4, 9]
    spec = ENVS["textcraft"]
    for r in rows:
        conv = r["conversation"]
        assert conv[0] == {"role": "system", "content": spec.instruction}
        assert conv[1]["content"] == r["observations"][0]
        assert conv[1]["content"].startswith("Crafting commands:")
        replies = [m["content"] for m in conv if m["role"] == "assistant"]
        assert [spec.parse_action(x) for x in replies] == r["actions"] and len(replies) == r["turns"]
        assert r["success"] and r["done"] and sum(r["rewards"]) == 1.0
        _, turns = view.turns_of(r)
        assert [t["status"] for t in turns] == ["ok"] * len(turns)
    loaded = view.load(out)
    assert not loaded["problems"] and len(loaded["sets"][0]["episodes"]) == 2


def test_pool_asks_the_expert_for_every_slot(textcraft):
    pool = EnvPool(url=textcraft, size=2, spec=ENVS["textcraft"])
    try:
        pool.reset([0, 1], [0, 200])
        advice = pool.expert([0, 1])
        assert all(a["action"] and a["thought"] for a in advice)
        assert pool.expert([0])[0] == advice[0]  # asking changes nothing
    finally:
        pool.close()
