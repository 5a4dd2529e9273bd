"""GiGPO's claims on hand-made trajectories: anchor-state step groups, discounted step returns,
A = A^E + omega * A^S per turn, singletons and equal returns, and the advantages landing on each
turn's agent tokens in both batch layouts."""

import math

import torch

import gigpo
import grpo
from algorithm import returns_to_go
from algos import ALGOS
from batch import Batch
from train import Config

O, A = 0, 1  # loss mask: observation/template token, agent token


def batch_of(masks, traj, turn, rewards, groups, anchors) -> Batch:
    B, T = len(masks), max(len(m) for m in masks)
    pad = lambda rows: torch.tensor([list(r) + [0] * (T - len(r)) for r in rows], dtype=torch.float)
    return Batch(
        input_ids=torch.zeros((B, T), dtype=torch.long),
        attention_mask=pad([[1] * len(m) for m in masks]).long(),
        loss_mask=pad(masks),
        old_logprobs=torch.zeros((B, T)),
        allowed=None,
        traj=torch.tensor(traj),
        turn=torch.tensor(turn),
        rewards=torch.tensor(rewards, dtype=torch.float),
        groups=torch.tensor(groups),
        anchors=anchors,
    )


# Group 0 is one task rolled out three times; group 1 another task whose first observation happens
# to read the same as group 0's (it must NOT join group 0's step group).
REWARDS = [1.0, 0.0, 1.0, 0.0]
GROUPS = [0, 0, 0, 1]
ANCHORS = [
    ["s0", "s1"],  # a: s0 -> s1 -> success at its 2nd turn
    ["s0", "s1", "s2"],  # b: s0 -> s1 -> s2 -> fails
    ["s0"],  # c: success at its 1st turn
    ["s0"],
]  # d: the other task, fails


def test_step_groups_are_anchor_states_within_an_episode_group():
    keys = gigpo.step_group_ids(GROUPS, ANCHORS)
    assert keys[0][0] == keys[1][0] == keys[2][0]  # every rollout of a task starts from one state
    assert keys[0][1] == keys[1][1] != keys[0][0]  # s1, reached by a and b
    assert keys[3][0] != keys[0][0]  # same text, other task: another group
    assert len({k for ks in keys for k in ks}) == 4  # (0,s0) (0,s1) (0,s2) (1,s0)


def test_discounted_returns_per_turn():
    g = lambda r, gamma: returns_to_go(torch.tensor(r, dtype=torch.float64), gamma).tolist()
    assert g([0.0, 0.0, 1.0], 0.5) == [0.25, 0.5, 1.0]
    assert g([0.2, 0.0, 1.0], 0.9) == [0.2 + 0.81, 0.9, 1.0]


def test_mean_norm_drops_the_std_at_both_levels():
    """verl-agent's mean-norm: A^E = R - mean, A^S = R_t - mean (no std). Rewards [1, 0, 0, 0],
    one turn each from one start state: A^E = 0.75 for the first, A^S = 0.75 too (gamma^0 R)."""
    anchors = [["s0"]] * 4
    got = gigpo.gigpo_advantages([1.0, 0.0, 0.0, 0.0], [0] * 4, anchors, omega=0.0, step_norm="mean")
    assert [a[0] for a in got] == [0.75, -0.25, -0.25, -0.25]
    got = gigpo.gigpo_advantages([1.0, 0.0, 0.0, 0.0], [0] * 4, anchors, omega=1.0, step_norm="mean")
    assert [a[0] for a in got] == [1.5, -0.5, -0.5, -0.5]
    std = gigpo.gigpo_advantages([1.0, 0.0, 0.0, 0.0], [0] * 4, anchors, omega=0.0, step_norm="std")
    assert abs(std[0][0] - 1.5) < 1e-5  # (1 - 0.25) / 0.5
    # the step level alone: two rollouts meet at s1 with returns 1 and 0 -> +-0.5, not +-0.707
    got = gigpo.gigpo_advantages(
        [1.0, 0.0], [0, 0], [["s0", "s1"], ["s0", "s1"]], omega=1.0, gamma=1.0, step_norm="mean"
    )
    assert got == [[1.0, 1.0], [-1.0, -1.0]]  # A^E +-0.5, A^S +-0.5 at both shared states


def test_combined_advantage_matches_a_hand_computed_example():
    # gamma = 0.5, omega = 1. Step returns: a [0.5, 1], b [0, 0, 0], c [1], d [0].
    # Episode level, group 0 rewards [1, 0, 1]: mean 2/3, std sqrt(1/3)
    #   -> A^E = [1/sqrt3, -2/sqrt3, 1/sqrt3]; d: 0.
    # Step group (0, s0): returns [0.5, 0, 1], mean 0.5, std 0.5 -> a 0, b -1, c 1.
    # Step group (0, s1): returns [1, 0], mean 0.5, std 1/sqrt2 -> a 1/sqrt2, b -1/sqrt2.
    # (0, s2) and (1, s0) are singletons -> 0.
    r3, r2 = 1 / math.sqrt(3), 1 / math.sqrt(2)
    got = gigpo.gigpo_advantages(REWARDS, GROUPS, ANCHORS, omega=1.0, gamma=0.5)
    expect = [[r3 + 0.0, r3 + r2], [-2 * r3 - 1.0, -2 * r3 - r2, -2 * r3], [r3 + 1.0], [0.0]]
    for g, e in zip(got, expect):
        torch.testing.assert_close(torch.tensor(g), torch.tensor(e), atol=1e-5, rtol=0)
    # omega scales only the step term: omega = 2 doubles (A - A^E)
    got2 = gigpo.gigpo_advantages(REWARDS, GROUPS, ANCHORS, omega=2.0, gamma=0.5)
    torch.testing.assert_close(
        torch.tensor(got2[1]), torch.tensor([-2 * r3 - 2.0, -2 * r3 - 2 * r2, -2 * r3]), atol=1e-5, rtol=0
    )


def test_a_turn_from_a_singleton_state_gets_only_the_episode_term():
    anchors = [["start", "x1", "x2"], ["start", "y1"], ["start", "z1", "z2", "z3"]]
    rewards = [1.0, 0.0, 0.5]
    got = gigpo.gigpo_advantages(rewards, [0, 0, 0], anchors, omega=3.0)
    a_ep = grpo.group_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor([0, 0, 0])).tolist()
    for n in range(3):
        for t in range(1, len(anchors[n])):  # every turn after the shared start is a singleton
            assert abs(got[n][t] - a_ep[n]) < 1e-6
    assert abs(got[0][0] - a_ep[0]) > 0.1  # the shared start does get a step term


def test_equal_returns_give_zero_step_advantage():
    # Eight rollouts of one task, all succeeding in one turn with the same reward (not a power of
    # two: in float32 their mean is off by one ulp and (R - mean) / (std + eps) is ~0.06, not 0).
    r = 0.9437500238418579
    got = gigpo.gigpo_advantages([r] * 8, [0] * 8, [["s0"]] * 8)
    assert all(abs(a[0]) < 1e-9 for a in got)
    # the same returns after different first states: still zero at the shared second state
    got = gigpo.gigpo_advantages([r, r, 0.0], [0, 0, 0], [["s0", "s1"], ["s0", "s1"], ["s0"]], gamma=0.9)
    a_ep = grpo.group_advantages(torch.tensor([r, r, 0.0]), torch.tensor([0, 0, 0])).tolist()
    assert abs(got[0][1] - a_ep[0]) < 1e-6 and abs(got[1][1] - a_ep[1]) < 1e-6


def test_the_babyai_normaliser_ignores_the_servers_notes_but_exact_match_does_not():
    state = "You see red ball 1 2 steps ahead. In front of you: nothing.\nGoal: go to the red ball."
    noted = "You can take the following actions: turn left, turn right\n" + state
    keys = gigpo.step_group_ids([0, 0], [[state], [noted]], "exact")
    assert keys[0][0] != keys[1][0]
    keys = gigpo.step_group_ids([0, 0], [[state], [noted]], "babyai")
    assert keys[0][0] == keys[1][0]


def test_advantages_land_on_each_turns_agent_tokens_in_both_layouts():
    cfg = Config(step_gamma=0.5)
    per_turn = gigpo.gigpo_advantages(REWARDS, GROUPS, ANCHORS, gamma=0.5)
    # a: ONE row, whole conversation (two runs of agent tokens = two turns, ends on an observation)
    # b: one row per turn, stored out of turn order; c, d: one row each
    masks = [[O, A, A, O, O, A, O], [O, O, A, A], [O, A, O], [O, A], [O, A], [O, O, A]]
    traj, turn = [0, 1, 1, 1, 2, 3], [0, 2, 0, 1, 0, 0]
    b = batch_of(masks, traj, turn, REWARDS, GROUPS, ANCHORS)
    gigpo.advantages(b, cfg)
    expect = torch.zeros(b.loss_mask.shape)
    expect[0, 1] = expect[0, 2] = per_turn[0][0]
    expect[0, 5] = per_turn[0][1]
    expect[1, 2] = expect[1, 3] = per_turn[1][2]
    expect[2, 1] = per_turn[1][0]
    expect[3, 1] = per_turn[1][1]
    expect[4, 1] = per_turn[2][0]
    expect[5, 2] = per_turn[3][0]
    torch.testing.assert_close(b.advantages, expect)


def test_gigpo_is_one_line_in_the_algorithm_table():
    assert ALGOS["gigpo"] is gigpo.GIGPO and gigpo.GIGPO.loss is grpo.loss and gigpo.GIGPO.init is None


def test_with_omega_zero_gigpo_is_grpo():
    masks = [[O, A, A], [O, A], [O, O, A], [O, A]]
    b = batch_of(masks, [0, 0, 1, 2], [0, 1, 0, 0], [1.0, 0.0, 0.3], [0, 0, 0], [["s", "t"], ["s"], ["s"]])
    gigpo.advantages(b, Config(step_weight=0.0))
    got = b.advantages.clone()
    grpo.advantages(b, Config())
    torch.testing.assert_close(got, b.advantages)


def test_gigpo_trains_end_to_end_on_babyai_and_logs_the_binding_probe(tmp_path, monkeypatch):
    """On real BabyAI rollouts the step-level term reaches the loss: the advantages differ from
    GRPO's on the same batch (by omega * A^S: the rollouts of a task share at least their start
    state), and the loss reads them; the probe is logged."""
    import json

    from algorithm import Algorithm
    from train import train

    seen = []

    def advantages(batch, cfg, state=None):
        gigpo.advantages(batch, cfg, state)
        a_gigpo = batch.advantages.clone()
        grpo.advantages(batch, cfg, state)
        a_grpo, batch.advantages = batch.advantages, a_gigpo
        seen.append((a_gigpo - a_grpo)[batch.loss_mask == 1])

    losses = []

    def loss(logp, entropy, mb, cfg, state=None):
        losses.append(mb.advantages.clone())
        return grpo.loss(logp, entropy, mb, cfg, state)

    monkeypatch.setitem(ALGOS, "gigpo", Algorithm(advantages, loss))
    train(
        Config(
            algo="gigpo",
            steps=2,
            tasks_per_step=2,
            group_size=3,
            minibatch_size=3,
            eval_episodes=0,
            rounds="2,3",
            steps_per_stage=1,
            out=str(tmp_path),
            probe_every=2,
            probe_states=12,
        )
    )
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["losses/loss"] == r["losses/loss"] for r in rows)  # not NaN
    assert len(seen) == 2 and max(d.abs().max().item() for d in seen) > 0.05  # the step term is there
    assert any((a != 0).any() for a in losses)  # and the loss read the advantages
    p = rows[-1]
    assert 0 < p["probe/p_mission"] + p["probe/p_other"] <= 1 + 1e-6 and 0 < p["probe/chance"] < 1
