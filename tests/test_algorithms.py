"""The algorithms' math on hand-made multi-turn batches (GAE, return-to-go, whitening, RLOO), and
each algorithm end to end with the tiny policy on BabyAI."""

import json

import pytest
import torch

import grpo
import ppo
import reinforce_pp
from agent import Batch
from train import Config, train

O, A = 0, 1  # loss mask: observation/template token, agent token


def batch_of(masks, traj, turn, rewards, groups=None, values=None, old=None, ref=None) -> Batch:
    """A right-padded Batch from per-row loss masks (the token ids do not matter here)."""
    B, T = len(masks), max(len(m) for m in masks)
    pad = lambda rows: torch.tensor([list(r) + [0] * (T - len(r)) for r in rows], dtype=torch.float)
    attn = pad([[1] * len(m) for m in masks]).long()
    return Batch(
        input_ids=torch.zeros((B, T), dtype=torch.long), attention_mask=attn, loss_mask=pad(masks),
        old_logprobs=pad(old) if old else torch.zeros((B, T)), allowed=None,
        traj=torch.tensor(traj), turn=torch.tensor(turn),
        rewards=torch.tensor(rewards, dtype=torch.float),
        groups=torch.tensor(groups if groups is not None else list(range(len(rewards)))),
        ref_logprobs=pad(ref) if ref else None, values=pad(values) if values else None,
    )


def two_turn_batch(values=None, reward=1.0, **kw):
    """One trajectory, two turns as two rows (context_turns=1), stored in the batch in REVERSE
    turn order; the second turn's row ends with observation tokens (as the reference code's did)."""
    masks = [[O, O, O, A, A, O],  # turn 1: agent tokens 2 and 3, then an observation token
             [O, O, A, O]]  # turn 0: agent token 0
    return batch_of(masks, traj=[0, 0], turn=[1, 0], rewards=[reward], values=values, **kw)


# --- PPO: GAE over the agent tokens ----------------------------------------------------------------

def test_gae_matches_a_hand_computed_multi_turn_example():
    # agent tokens in sampled order: (row 1, col 2), (row 0, col 3), (row 0, col 4)
    # V = 0.5, 0.2, 0.4; R = 1 on the last; gamma = 0.9, lam = 0.8, gamma * lam = 0.72
    # delta_2 = 1 - 0.4 = 0.6                  A_2 = 0.6
    # delta_1 = 0.9 * 0.4 - 0.2 = 0.16          A_1 = 0.16 + 0.72 * 0.6 = 0.592
    # delta_0 = 0.9 * 0.2 - 0.5 = -0.32         A_0 = -0.32 + 0.72 * 0.592 = 0.10624
    # returns G = A + V = 0.60624, 0.792, 1.0
    big = 100.0  # values at observation tokens: must not enter the recursion
    values = [[big, big, big, 0.2, 0.4, big], [big, big, 0.5, big]]
    b = two_turn_batch(values)
    ppo.advantages(b, ppo.PPOConfig(gamma=0.9, lam=0.8))
    expect_adv = torch.tensor([[0, 0, 0, 0.592, 0.6, 0], [0, 0, 0.10624, 0, 0, 0]])
    expect_ret = torch.tensor([[0, 0, 0, 0.792, 1.0, 0], [0, 0, 0.60624, 0, 0, 0]])
    torch.testing.assert_close(b.advantages, expect_adv)
    torch.testing.assert_close(b.returns, expect_ret)


def test_values_at_observation_tokens_do_not_leak_into_the_advantage():
    agent_v = {(0, 3): 0.2, (0, 4): 0.4, (1, 2): 0.5}
    out = []
    for obs_v in (0.0, -7.0, 123.0):
        values = [[agent_v.get((r, c), obs_v) for c in range(6)] for r in range(2)]
        values[1] = values[1][:4]
        b = two_turn_batch(values)
        ppo.advantages(b, ppo.PPOConfig(gamma=0.9, lam=0.8))
        out.append((b.advantages, b.returns))
    for adv, ret in out[1:]:
        torch.testing.assert_close(adv, out[0][0])
        torch.testing.assert_close(ret, out[0][1])


def test_with_gamma_lambda_1_and_a_zero_critic_every_agent_token_gets_the_final_reward():
    masks = [[O, A, A, O, O, A, O],  # trajectory 0, full context: 3 agent tokens over 2 turns
             [O, O, A, A],  # trajectory 1, turn 0
             [O, A, O],  # trajectory 1, turn 1 (ends on an observation token)
             [O, O, O, A]]  # trajectory 2
    b = batch_of(masks, traj=[0, 1, 1, 2], turn=[0, 0, 1, 0], rewards=[1.0, 0.0, 0.5])
    ppo.advantages(b, ppo.PPOConfig(gamma=1.0, lam=1.0))  # values None: a zero critic
    expect = b.rewards[b.traj].unsqueeze(-1) * b.loss_mask
    torch.testing.assert_close(b.advantages, expect)
    torch.testing.assert_close(b.returns, expect)


def test_critic_value_at_token_t_sees_only_the_tokens_before_it():
    from agent import load_policy
    policy = load_policy("tiny")
    critic = ppo.Critic(policy.model)
    torch.nn.init.normal_(critic.head.weight)  # a non-zero head, so values differ
    ids = torch.randint(4, policy.model.config.vocab_size, (1, 8))
    b = batch_of([[O] * 8], traj=[0], turn=[0], rewards=[0.0])
    b.input_ids = ids
    with torch.no_grad():
        v1 = critic(b)
        b.input_ids = ids.clone()
        b.input_ids[0, 5] = (ids[0, 5] + 1) % policy.model.config.vocab_size
        v2 = critic(b)
    torch.testing.assert_close(v1[:, :6], v2[:, :6])  # V_t for t <= 5 does not depend on token 5
    assert not torch.allclose(v1[:, 6:], v2[:, 6:])
    assert torch.all(ppo.Critic(policy.model)(b) == 0)  # the head starts at zero


def test_value_loss_trains_only_agent_token_values_and_reports_diagnostics():
    b = two_turn_batch([[0.1] * 6, [0.3] * 4])
    ppo.advantages(b)
    values = torch.zeros_like(b.loss_mask, requires_grad=True)
    logp = torch.zeros_like(b.loss_mask, requires_grad=True)
    loss, stats = ppo.loss(logp, None, b, ppo.PPOConfig(), values=values)
    loss.backward()
    assert torch.all(values.grad[b.loss_mask == 0] == 0) and torch.any(values.grad[b.loss_mask == 1] != 0)
    for k in ("losses/policy_loss", "losses/value_loss", "losses/approx_kl", "losses/clipfrac",
              "losses/explained_variance", "losses/vf_clipfrac"):
        assert k in stats


# --- REINFORCE++ ---------------------------------------------------------------------------------

def test_reinforce_pp_return_to_go_folds_the_kl_into_the_reward():
    # agent tokens in order: (1, 2), (0, 3), (0, 4); old - ref = 0.5, -0.2, 0.1; kl_coef 0.1
    # r = -0.05, 0.02, -0.01 + R(=1)                      gamma = 0.5
    # G_2 = 0.99, G_1 = 0.02 + 0.5 * 0.99 = 0.515, G_0 = -0.05 + 0.5 * 0.515 = 0.2075
    old = [[0, 0, 0, -1.2, -0.9, 0], [0, 0, -1.0, 0]]
    ref = [[9, 9, 9, -1.0, -1.0, 9], [9, 9, -1.5, 9]]  # 9 at observation tokens: ignored
    b = two_turn_batch(old=old, ref=ref)
    reinforce_pp.advantages(b, reinforce_pp.ReinforcePPConfig(kl_coef=0.1, gamma=0.5))
    expect = torch.tensor([[0, 0, 0, 0.515, 0.99, 0], [0, 0, 0.2075, 0, 0, 0]])
    torch.testing.assert_close(b.returns, expect)


def test_reinforce_pp_whitening_gives_zero_mean_unit_variance_over_the_batch_agent_tokens():
    g = torch.Generator().manual_seed(0)
    masks = [[O, A, A, O, A], [O, O, A, A, A], [O, A, O, O, A], [O, O, O, A, A]]
    old = (-torch.rand(4, 5, generator=g)).tolist()
    ref = (-torch.rand(4, 5, generator=g)).tolist()
    b = batch_of(masks, traj=[0, 1, 1, 2], turn=[0, 0, 1, 0], rewards=[1.0, 0.0, 0.3], old=old, ref=ref)
    reinforce_pp.advantages(b, reinforce_pp.ReinforcePPConfig(kl_coef=0.05, gamma=0.9))
    a = b.advantages[b.loss_mask == 1]
    assert abs(a.mean().item()) < 1e-5
    assert abs(a.var(unbiased=False).item() - 1.0) < 1e-4
    assert torch.all(b.advantages[b.loss_mask == 0] == 0)


# --- RLOO ----------------------------------------------------------------------------------------

def test_rloo_baseline_for_each_sample_is_the_mean_of_the_others_in_its_group():
    rewards = [1.0, 0.0, 0.0, 0.5, 0.2, 0.9]
    groups = [0, 0, 0, 0, 1, 1]
    masks = [[O, A, A]] * 6
    b = batch_of(masks, traj=list(range(6)), turn=[0] * 6, rewards=rewards, groups=groups)
    grpo.rloo_advantages_for(b)
    for i in range(6):
        others = [r for j, r in enumerate(rewards) if j != i and groups[j] == groups[i]]
        expect = rewards[i] - sum(others) / len(others)
        torch.testing.assert_close(b.advantages[i], torch.tensor([0, expect, expect]))


# --- the terminal reward reaches every algorithm's advantages --------------------------------------

@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo", "reinforce_pp"])
def test_terminal_reward_reaches_the_advantages_even_when_the_sequence_ends_on_an_observation(algo):
    """The reference code's bug: R on the last token of the sequence (an observation token),
    then rewards * agent mask, lost R; both trajectories then got advantage 0 everywhere."""
    masks = [[O, A, A, O, A, O, O], [O, A, A, O, A, O, O]]  # full context, ends on observations
    b = batch_of(masks, traj=[0, 1], turn=[0, 0], rewards=[1.0, 0.0], groups=[0, 0])
    advantages = {"grpo": grpo.advantages, "rloo": grpo.rloo_advantages_for,
                  "ppo": ppo.advantages, "reinforce_pp": reinforce_pp.advantages}[algo]
    advantages(b)
    on = b.loss_mask == 1
    assert torch.all(b.advantages[0][on[0]] > b.advantages[1][on[1]])
    assert torch.all(b.advantages[~on] == 0)


# --- end to end ----------------------------------------------------------------------------------

def small(tmp_path, **kw) -> Config:
    base = dict(steps=2, tasks_per_step=2, group_size=2, minibatch_size=2, eval_episodes=0,
                rounds="2,3", steps_per_stage=1, out=str(tmp_path), save_every=1)
    base.update(kw)
    return Config(**base)


@pytest.mark.parametrize("algo", ["ppo", "reinforce_pp", "rloo"])
def test_each_algorithm_trains_end_to_end_on_babyai(tmp_path, algo):
    train(small(tmp_path, algo=algo))
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]
    keys = {"losses/loss", "losses/policy_loss", "losses/approx_kl", "losses/clipfrac", "losses/entropy"}
    if algo == "ppo":
        keys |= {"losses/value_loss", "losses/explained_variance"}
        assert (tmp_path / "checkpoint" / "critic.pt").exists()
    assert keys <= set(rows[0])
    assert all(r["losses/loss"] == r["losses/loss"] for r in rows)  # not NaN


def test_ppo_resume_restores_the_critic(tmp_path):
    """3 steps straight == 2 steps, then resume for the third: the same critic weights."""
    a, b = tmp_path / "a", tmp_path / "b"
    train(small(a, algo="ppo", steps=3))
    train(small(b, algo="ppo", steps=2))
    after_two = torch.load(b / "checkpoint" / "critic.pt")["critic"]
    train(small(b, algo="ppo", steps=3, resume=str(b / "checkpoint")))
    ca = torch.load(a / "checkpoint" / "critic.pt")["critic"]
    cb = torch.load(b / "checkpoint" / "critic.pt")["critic"]
    assert any(not torch.equal(after_two[k], cb[k]) for k in cb)  # the third step trained it
    for k in ca:
        torch.testing.assert_close(ca[k], cb[k])
    ra = [json.loads(x) for x in open(a / "metrics.jsonl")]
    rb = [json.loads(x) for x in open(b / "metrics.jsonl")]
    assert abs(ra[2]["losses/value_loss"] - rb[2]["losses/value_loss"]) < 1e-6
