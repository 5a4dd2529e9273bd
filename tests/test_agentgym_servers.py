"""This project's client drives AgentGym's servers: `EnvPool` and a rollout of the tiny policy,
with its action masking on, against stand-ins that speak only AgentGym's dialect and answer in its
shapes (`tests/agentgym_standins.py`): no `available_actions` field, so the actions come from the
observation text; Deep Search and WebArena name the instance `env_idx`."""

import pytest
import torch

import tests.agentgym_standins as standins
import tiny
from agent import rollout
from envs import ENVS, EnvPool, babyai_actions, textcraft_actions

CHECK = "check available actions"  # what masking falls back to when no actions are known


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A tiny policy (format warm-up only); its byte-level tokenizer encodes any action text."""
    path = str(tmp_path_factory.mktemp("tiny"))
    tiny.build_tiny_policy("babyai", path, warmup_steps=5, episodes=40)
    policy = tiny.load(path, "babyai")
    policy.mask_actions, policy.context_turns, policy.max_new_tokens = True, 1, 48
    return policy


def run(policy, served, env, tasks, horizon):
    spec = ENVS[env]
    pool = EnvPool(url=served.url, size=len(tasks), spec=spec)
    try:
        torch.manual_seed(0)
        return rollout(policy, pool, spec, tasks, horizon=horizon, groups=list(range(len(tasks))))
    finally:
        pool.close()


def test_babyai_actions_are_read_from_either_servers_text():
    agentgym = (
        'Your goal: go to the red ball\nYou see a red ball.\nAvailable actions: ["turn left", '
        '"go to red ball 1", "check available actions"]'
    )
    ours = (
        "You see red ball 1 2 steps ahead.\nAvailable actions: turn left, go to red ball 1, "
        "check available actions.\nGoal: go to the red ball."
    )
    expected = ["turn left", "go to red ball 1", CHECK]
    assert babyai_actions(agentgym, None) == babyai_actions(ours, None) == expected
    assert babyai_actions("You can take the following actions: turn left", ["x"]) is None


def test_textcraft_actions_follow_the_crafting_commands():
    first = (
        "Crafting commands:\ncraft 4 stick using 2 planks\ncraft 4 oak planks using 1 oak logs\n"
        "craft 1 crafting table using 4 planks\ncraft 1 lead using 4 string, 1 slime ball\n\n"
        "Goal: craft stick."
    )
    acts = textcraft_actions(first, None)
    assert acts == [
        "get 1 oak logs",
        "get 4 string",
        "get 1 slime ball",
        "craft 4 stick using 2 oak planks",  # the kind `planks` filled by a shown item
        "craft 4 oak planks using 1 oak logs",
        "craft 1 crafting table using 4 oak planks",
        "craft 1 lead using 4 string, 1 slime ball",
        "inventory",
    ]
    assert textcraft_actions("Got 1 oak logs", acts) is acts  # later observations keep the list


def test_our_client_and_masking_on_an_agentgym_babyai_server(policy):
    spec = ENVS["babyai"]
    with standins.Served(standins.babyai()) as served:
        log = served.app.state.log
        pool = EnvPool(url=served.url, size=1, spec=spec)
        first = pool.reset([0], [1])[0]
        assert "available_actions" not in served.app.state.log[0]  # (the stand-in sends none)
        assert first["available_actions"] == log[-1][1]  # read from `Available actions: [...]`
        pool.close()

        trajs = run(policy, served, "babyai", spec.splits["test"][:4], horizon=3)
    steps = [entry for entry in log if entry[0] == "/step"]
    assert not any(t.error for t in trajs) and steps
    assert all(action in offered for _, action, offered, _ in steps)  # masking kept to the list
    # Without the list, masking allows only `check available actions`; with it the policy moves.
    assert sum(action != CHECK for _, action, _, _ in steps) >= len(steps) // 2


def test_our_client_and_masking_on_an_agentgym_textcraft_server(policy):
    spec = ENVS["textcraft"]
    with standins.Served(standins.textcraft()) as served:
        log = served.app.state.log
        pool = EnvPool(url=served.url, size=1, spec=spec)
        first = pool.reset([0], [0])[0]  # acacia planks
        assert first["available_actions"] == textcraft_actions(log[-1][2], None)
        acts = first["available_actions"]
        assert {"get 1 acacia logs", "craft 4 acacia planks using 1 acacia logs"} <= set(acts)
        after = pool.step([0], ["get 1 acacia logs"])[0]  # `Got 1 acacia logs.`: no commands shown
        assert after["observation"] == "Got 1 acacia logs." and after["available_actions"] == acts
        assert pool.step([0], ["craft 4 acacia planks using 1 acacia logs"])[0]["done"] is True
        pool.close()

        log.clear()
        trajs = run(policy, served, "textcraft", spec.splits["depth1-train"][:3], horizon=3)
    lists, replies = {}, []
    for entry in log:  # the list each instance's commands define, then every action sent to it
        if entry[0] == "/reset":
            lists[entry[1]] = set(textcraft_actions(entry[2], None))
        else:
            assert entry[2] in lists[entry[1]], entry
            replies.append(entry[3])
    assert not any(t.error for t in trajs) and replies
    assert not any(t.actions.count(CHECK) for t in trajs)  # never the fallback
    assert any(reply.startswith("Got ") for reply in replies)  # the gets name real items


def test_our_client_on_an_agentgym_sciworld_server(policy):
    with standins.Served(standins.sciworld()) as served:
        trajs = run(policy, served, "sciworld", [3, 8], horizon=5)
        resets = sorted(e[1] for e in served.app.state.log if e[0] == "/reset")
    assert resets == [3, 8]
    for t in trajs:
        # the first observation as AgentGym's client builds it: task_description + "\n" + observation
        assert t.observations[0] == standins.SCIWORLD_TASK + "\n" + standins.SCIWORLD_LOOK
        assert t.done and t.turns == 2 and t.score == 100 and t.reward == 1.0 and not t.error


def test_our_client_on_an_agentgym_searchqa_server(policy):
    with standins.Served(standins.searchqa()) as served:
        trajs = run(policy, served, "searchqa", [5, 9], horizon=5)
        resets = sorted(e[1] for e in served.app.state.log if e[0] == "/reset")
    assert resets == [5, 9]  # at /reset `id` is the question, the instance is `env_idx`
    for t in trajs:
        assert standins.searchqa_question(t.task) in t.observations[0]  # /reset answered a bare string
        assert t.done and t.turns == 2 and t.reward == 1.0 and not t.error


def test_our_client_on_an_agentgym_webarena_server(policy):
    with standins.Served(standins.webarena()) as served:
        trajs = run(policy, served, "webarena", [3, 4], horizon=5)
        resets = sorted(e[1] for e in served.app.state.log if e[0] == "/reset")
    assert resets == [3, 4]  # sent as `idx`, with `env_idx` and `seed`
    for t in trajs:
        assert f"OBJECTIVE: task {t.task}" in t.observations[0]
        assert t.done and t.turns == 2 and t.reward == 1.0 and not t.error  # ended on `terminated`
