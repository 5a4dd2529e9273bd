"""The mission-binding probe: does the policy act on the object the mission names?

Where it sits: `train.py --probe-every N` calls `binding()` every N steps and logs its figures in
metrics.jsonl and curves.png; `benchmarks/binding_probe.py` is its command line, and
`benchmarks/gigpo_compare.py` calls it on the starting policy and on each trained checkpoint. It
reads the policy and a list of observations; it never steps an environment after the states are
collected.

On held-out BabyAI GoToLocal states (the first observation of test tasks: the mission names one of
eight objects, most of them in view), the probe computes the exact probability the policy gives to
each available action (the product of its token probabilities under the same action mask that
sampling uses, so they sum to 1 over the actions) and splits the mass into

    p_mission  actions on an object the mission describes  (`go to red ball 1` for "go to the red ball")
    p_other    actions on any other object
    the rest   turning, moving forward, checking

`share = p_mission / (p_mission + p_other)` against `chance`, the share a policy blind to the
mission would give (the fraction of object actions that are about the mission's object). A policy
that learned "act on some object" raises p_mission + p_other and keeps share near chance; one that
binds the mission raises share above it (docs/tiny-demo.md: outcome-only GRPO on the tiny policy
did not, in 200 steps).
"""

import re
from dataclasses import dataclass

import torch

from agent import Policy, Trajectory, action_trie, chat_ids
from batch import Row, make_batch, token_logprobs

GOTOLOCAL = 5  # AgentGym's BabyAI level number of BabyAI-GoToLocalS8N7-v0 (servers/babyai.py LEVELS)
OBJECT_ACTION = re.compile(r"^(?:go to|pickup) (\w+) (\w+) \d+$")  # -> colour, type
MISSION = re.compile(r"Goal: (?:go to|pick up) (?:the|a) (?:(\w+) )?(\w+)\.\s*$")


def probe_tasks(n: int, first_seed: int = 10000, level: int = GOTOLOCAL) -> list[int]:
    """data_idx of n held-out tasks of one level (seeds from the test split's range)."""
    return [level - 1 + 40 * s for s in range(first_seed, first_seed + n)]


def mission_object(observation: str) -> tuple[str | None, str] | None:
    """'... Goal: go to the red ball.' -> ('red', 'ball'); a type-only mission gives (None, 'ball')."""
    m = MISSION.search(observation)
    if not m:
        return None
    colour, kind = m.group(1), m.group(2)
    if kind in ("red", "green", "blue", "purple", "yellow", "grey"):  # "go to a red" never occurs; be safe
        return None
    return colour, kind


def about_mission(action: str, target: tuple[str | None, str]) -> bool | None:
    """True / False for an action on an object that is / is not the mission's; None otherwise."""
    m = OBJECT_ACTION.match(action)
    if not m:
        return None
    colour, kind = m.groups()
    return kind == target[1] and (target[0] is None or colour == target[0])


def action_rows(policy: Policy, observation: str, actions: list[str]) -> list[Row]:
    """One row per available action: the prompt the policy sees, then the action's tokens and the
    end-of-turn token, with the sampler's mask (the prefix tree's children) at each of them."""
    ctx = chat_ids(policy.tokenizer, [{"role": "user", "content": observation}])
    trie = action_trie(policy, actions)
    rows = []
    for a in actions:
        ids = policy.tokenizer(a, add_special_tokens=False)["input_ids"] + [policy.end_of_turn]
        node, allowed = trie, {}
        for p, t in enumerate(ids):
            allowed[len(ctx) + p] = [k for k in node if k is not None]
            node = node[t]
        rows.append(
            Row(
                ids=ctx + ids,
                mask=[0] * len(ctx) + [1] * len(ids),
                logprobs=[0.0] * (len(ctx) + len(ids)),
                allowed=allowed,
            )
        )
    return rows


@torch.no_grad()
def action_probs(policy: Policy, rows: list[Row], chunk: int = 64) -> list[float]:
    """Probability of each row's action: exp of the summed masked log-probs of its tokens."""
    out = []
    for s in range(0, len(rows), chunk):
        trajs = [Trajectory(task=0, group=0, rows=[r]) for r in rows[s : s + chunk]]
        batch = make_batch(trajs, policy.tokenizer.pad_token_id)
        logp, _ = token_logprobs(policy.model, batch, policy.temperature)  # (B, T)
        out += (logp * batch.loss_mask).sum(-1).exp().tolist()  # (B,)
    return out


@dataclass
class Binding:
    p_mission: float  # mean over states of the probability on actions about the mission's object
    p_other: float  # ... on actions about other objects
    share: float  # mean of p_mission / (p_mission + p_other)
    chance: float  # mean share of a policy that ignores the mission (uniform over object actions)
    n_states: int


def binding(policy: Policy, states: list[tuple[str, list[str]]]) -> Binding:
    """states: (observation, available actions). Only states where the mission's object has an
    action (it is in view and reachable) and some other object too are counted."""
    was_training = policy.model.training
    policy.model.eval()
    kept, rows = [], []
    for obs, actions in states:
        target = mission_object(obs)
        kinds = [about_mission(a, target) for a in actions] if target else []
        if True in kinds and False in kinds:
            kept.append(kinds)
            rows += action_rows(policy, obs, actions)
    probs = action_probs(policy, rows)
    pm, po, share, chance, i = [], [], [], [], 0
    for kinds in kept:
        p, i = probs[i : i + len(kinds)], i + len(kinds)
        m = sum(q for q, k in zip(p, kinds) if k is True)
        o = sum(q for q, k in zip(p, kinds) if k is False)
        pm.append(m)
        po.append(o)
        share.append(m / max(m + o, 1e-12))
        chance.append(kinds.count(True) / (kinds.count(True) + kinds.count(False)))
    policy.model.train(was_training)
    mean = lambda xs: sum(xs) / max(len(xs), 1)
    return Binding(mean(pm), mean(po), mean(share), mean(chance), len(pm))


def collect_states(pool, tasks: list[int]) -> list[tuple[str, list[str]]]:
    """The first observation and available actions of each task, through an envs.EnvPool."""
    out = []
    for s in range(0, len(tasks), len(pool)):
        chunk = tasks[s : s + len(pool)]
        for r in pool.reset(list(range(len(chunk))), chunk):
            if not r.get("error"):
                out.append((r["observation"], list(r.get("available_actions") or [])))
    return out
