"""The algorithms' math on hand-made multi-turn batches (GAE, return-to-go, whitening, RLOO), and
each algorithm end to end with the tiny policy on BabyAI."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

import grpo
import ppo
import reinforce_pp
from algorithm import (
    Algorithm,
    State,
    clipped_policy_loss,
    dynamic_sampling,
    informative,
    k3_kl,
    mask_episodes,
)
from algos import ALGOS
from batch import Batch
from train import Config, train

O, A = 0, 1  # loss mask: observation/template token, agent token


def batch_of(masks, traj, turn, rewards, groups=None, values=None, old=None, ref=None) -> Batch:
    """A right-padded Batch from per-row loss masks (the token ids do not matter here)."""
    B, T = len(masks), max(len(m) for m in masks)
    pad = lambda rows: torch.tensor([list(r) + [0] * (T - len(r)) for r in rows], dtype=torch.float)
    attn = pad([[1] * len(m) for m in masks]).long()
    return Batch(
        input_ids=torch.zeros((B, T), dtype=torch.long),
        attention_mask=attn,
        loss_mask=pad(masks),
        old_logprobs=pad(old) if old else torch.zeros((B, T)),
        allowed=None,
        traj=torch.tensor(traj),
        turn=torch.tensor(turn),
        rewards=torch.tensor(rewards, dtype=torch.float),
        groups=torch.tensor(groups if groups is not None else list(range(len(rewards)))),
        ref_logprobs=pad(ref) if ref else None,
        values=pad(values) if values else None,
    )


def two_turn_batch(values=None, reward=1.0, **kw):
    """One trajectory, two turns as two rows (context_turns=1), stored in the batch in REVERSE
    turn order; the second turn's row ends with observation tokens (as the reference code's did)."""
    masks = [
        [O, O, O, A, A, O],  # turn 1: agent tokens 2 and 3, then an observation token
        [O, O, A, O],
    ]  # turn 0: agent token 0
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
    ppo.advantages(b, Config(gamma=0.9, lam=0.8, norm_adv=False))
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
        ppo.advantages(b, Config(gamma=0.9, lam=0.8, norm_adv=False))
        out.append((b.advantages, b.returns))
    for adv, ret in out[1:]:
        torch.testing.assert_close(adv, out[0][0])
        torch.testing.assert_close(ret, out[0][1])


def test_with_gamma_lambda_1_and_a_zero_critic_every_agent_token_gets_the_final_reward():
    masks = [
        [O, A, A, O, O, A, O],  # trajectory 0, full context: 3 agent tokens over 2 turns
        [O, O, A, A],  # trajectory 1, turn 0
        [O, A, O],  # trajectory 1, turn 1 (ends on an observation token)
        [O, O, O, A],
    ]  # trajectory 2
    b = batch_of(masks, traj=[0, 1, 1, 2], turn=[0, 0, 1, 0], rewards=[1.0, 0.0, 0.5])
    ppo.advantages(b, Config(gamma=1.0, lam=1.0, norm_adv=False))  # values None: a zero critic
    expect = b.rewards[b.traj].unsqueeze(-1) * b.loss_mask
    torch.testing.assert_close(b.advantages, expect)
    torch.testing.assert_close(b.returns, expect)


def test_critic_value_at_token_t_sees_only_the_tokens_before_it():
    import tiny

    policy = tiny.load("tiny", "babyai")
    critic = ppo.Critic(policy.model)
    torch.nn.init.normal_(critic.head.weight)  # a non-zero head, so values differ
    ids = torch.randint(4, policy.model.config.vocab_size, (1, 8))
    b = batch_of([[O] + [A] * 7], traj=[0], turn=[0], rewards=[0.0])  # values are read at agent tokens
    b.input_ids = ids
    with torch.no_grad():
        v1 = critic(b)
        b.input_ids = ids.clone()
        b.input_ids[0, 5] = (ids[0, 5] + 1) % policy.model.config.vocab_size
        v2 = critic(b)
    torch.testing.assert_close(v1[:, :6], v2[:, :6])  # V_t for t <= 5 does not depend on token 5
    assert not torch.allclose(v1[:, 6:], v2[:, 6:])
    assert torch.all(ppo.Critic(policy.model)(b) == 0)  # the head starts at zero


class FixedValues(torch.nn.Module):
    """A stand-in critic whose values are its parameter (so the test controls them)."""

    def __init__(self, values):
        super().__init__()
        self.v = torch.nn.Parameter(values.clone())

    def forward(self, batch):
        return self.v


def test_value_loss_trains_only_agent_token_values_and_reports_diagnostics():
    b = two_turn_batch([[0.1] * 6, [0.3] * 4])
    ppo.advantages(b, Config())
    values = torch.zeros_like(b.loss_mask, requires_grad=True)
    v_loss, stats = ppo.value_loss(values, b, Config())
    v_loss.backward()
    assert torch.all(values.grad[b.loss_mask == 0] == 0) and torch.all(values.grad[b.loss_mask == 1] != 0)
    # returns G at the agent tokens: 1.0 everywhere (gamma = lam = 1); old V: 0.3, 0.1, 0.1
    # the new V = 0 is inside the clip range (0.5): v_loss = 0.5 * mean((0 - 1)^2) = 0.5
    assert abs(v_loss.item() - 0.5) < 1e-6 and stats["losses/vf_clipfrac"] == 0.0
    assert set(stats) == {"losses/value_loss", "losses/vf_clipfrac", "losses/explained_variance"}


def test_explained_variance_is_one_minus_var_of_the_error_over_var_of_the_returns():
    b = two_turn_batch([[0.0, 0.0, 0.0, 0.2, 0.9, 0.0], [0.0, 0.0, 0.6, 0.0]])
    ppo.advantages(b, Config(gamma=0.5, lam=1.0, norm_adv=False))
    on = b.loss_mask == 1
    g, v = b.returns[on].double(), b.values[on].double()
    expect = 1 - (g - v).var(unbiased=False) / g.var(unbiased=False)
    _, stats = ppo.value_loss(b.values.clone(), b, Config())
    assert abs(stats["losses/explained_variance"] - expect.item()) < 1e-6 and abs(expect.item()) > 0.01


def test_critic_learns_at_agentgym_rls_1e_5_unless_told_or_the_policys_is_larger():
    assert ppo.critic_lr(Config(), 1e-6) == 1e-5  # a real model: not the policy's 1e-6
    assert ppo.critic_lr(Config(), 5e-4) == 5e-4  # the tiny policy's own rate is larger
    assert ppo.critic_lr(Config(critic_lr=3e-6), 1e-6) == 3e-6


def test_critic_values_at_rollout_run_in_micro_batches_and_equal_one_pass():
    import tiny

    policy = tiny.load("tiny", "babyai")
    critic = ppo.Critic(policy.model)
    torch.nn.init.normal_(critic.head.weight)
    masks = [[O, A, A, O, A], [O, O, A], [O, A, O, A, A, A, O], [O, A]]
    b = batch_of(masks, traj=[0, 1, 2, 3], turn=[0] * 4, rewards=[0.0] * 4)
    b.input_ids = torch.randint(4, policy.model.config.vocab_size, b.input_ids.shape) * b.attention_mask
    seen = []
    forward = critic.forward
    critic.forward = lambda mb: (seen.append(len(mb)), forward(mb))[1]
    one = ppo.critic_values(critic, b, Config(micro_batch_size=0, micro_batch_tokens=0))
    assert seen == [4]
    seen.clear()
    micro = ppo.critic_values(critic, b, Config(micro_batch_size=1))
    assert seen == [1, 1, 1, 1]
    torch.testing.assert_close(micro, one, atol=1e-5, rtol=0)
    assert torch.all(one[b.loss_mask == 0] == 0) and torch.all(one[b.loss_mask == 1] != 0)


def test_ppo_loss_adds_vf_coef_times_the_value_loss_of_its_critic():
    b = two_turn_batch([[0.1] * 6, [0.3] * 4])
    ppo.advantages(b, Config())
    critic = FixedValues(torch.full_like(b.loss_mask, 0.2))
    state = State("critic", critic, torch.optim.SGD(critic.parameters(), lr=0.1))
    logp = torch.zeros_like(b.loss_mask)
    cfg = Config(vf_coef=0.7)
    with_critic, stats = ppo.loss(logp, None, b, cfg, state)
    without, _ = ppo.loss(logp, None, b, cfg)
    v_loss, _ = ppo.value_loss(critic(b), b, cfg)
    torch.testing.assert_close(with_critic - without, 0.7 * v_loss)
    assert stats["losses/value_loss"] == v_loss.item()


# --- REINFORCE++ ---------------------------------------------------------------------------------


def test_reinforce_pp_return_to_go_folds_the_kl_into_the_reward():
    # agent tokens in order: (1, 2), (0, 3), (0, 4); old - ref = 0.5, -0.2, 0.1; kl_coef 0.1
    # r = -0.05, 0.02, -0.01 + R(=1)                      gamma = 0.5
    # G_2 = 0.99, G_1 = 0.02 + 0.5 * 0.99 = 0.515, G_0 = -0.05 + 0.5 * 0.515 = 0.2075
    old = [[0, 0, 0, -1.2, -0.9, 0], [0, 0, -1.0, 0]]
    ref = [[9, 9, 9, -1.0, -1.0, 9], [9, 9, -1.5, 9]]  # 9 at observation tokens: ignored
    b = two_turn_batch(old=old, ref=ref)
    reinforce_pp.advantages(b, Config(kl_coef=0.1, gamma=0.5))
    expect = torch.tensor([[0, 0, 0, 0.515, 0.99, 0], [0, 0, 0.2075, 0, 0, 0]])
    torch.testing.assert_close(b.returns, expect)


def test_reinforce_pp_whitening_gives_zero_mean_unit_variance_over_the_batch_agent_tokens():
    g = torch.Generator().manual_seed(0)
    masks = [[O, A, A, O, A], [O, O, A, A, A], [O, A, O, O, A], [O, O, O, A, A]]
    old = (-torch.rand(4, 5, generator=g)).tolist()
    ref = (-torch.rand(4, 5, generator=g)).tolist()
    b = batch_of(masks, traj=[0, 1, 1, 2], turn=[0, 0, 1, 0], rewards=[1.0, 0.0, 0.3], old=old, ref=ref)
    reinforce_pp.advantages(b, Config(kl_coef=0.05, gamma=0.9))
    a = b.advantages[b.loss_mask == 1]
    assert abs(a.mean().item()) < 1e-5
    assert abs(a.var(unbiased=False).item() - 1.0) < 1e-4
    assert torch.all(b.advantages[b.loss_mask == 0] == 0)


# --- equal outcomes give exactly zero advantage (float32 rewards that are not dyadic) -------------

BABYAI_REWARDS = [0.925, 1 - 0.9 * 7 / 64, 0.1, 0.3, 0.7, 0.55]  # 1 - 0.9 * steps / budget, ...


@pytest.mark.parametrize("reward", BABYAI_REWARDS)
def test_grpo_group_of_equal_non_dyadic_rewards_gets_exactly_zero_advantage(reward):
    """float32 statistics gave |A| = 0.056, one sign for the whole group, for R = 0.925."""
    adv = grpo.group_advantages(torch.full((8,), reward), torch.zeros(8, dtype=torch.long))
    assert torch.all(adv == 0), adv
    adv = grpo.rloo_advantages(torch.full((8,), reward), torch.zeros(8, dtype=torch.long))
    assert torch.all(adv == 0), adv


@pytest.mark.parametrize("reward", BABYAI_REWARDS)
def test_ppo_minibatch_of_equal_rewards_gets_no_policy_gradient(reward):
    """Zero critic, gamma = lam = 1: every advantage is R; whitening equal values must give 0,
    not float32 noise scaled up to +-1."""
    masks = [[O, A, A, O, A, A], [O, O, A, A, A, A], [O, A, A, A, O, A], [O, O, A, A, A, A]] * 3
    b = batch_of(masks, traj=list(range(12)), turn=[0] * 12, rewards=[reward] * 12)
    ppo.advantages(b, Config())
    logp = torch.zeros_like(b.loss_mask, requires_grad=True)
    loss, _ = ppo.loss(logp, None, b, Config())
    loss.backward()
    assert torch.all(logp.grad == 0), logp.grad.abs().max()
    assert torch.all(ppo.whiten(b.advantages, b.loss_mask, 1e-8) == 0)


@pytest.mark.parametrize("reward", BABYAI_REWARDS)
def test_reinforce_pp_batch_of_equal_returns_gets_exactly_zero_advantage(reward):
    masks = [[O, A, A, O, A, A], [O, O, A, A, A, A], [O, A, A, A, O, A]] * 4
    b = batch_of(masks, traj=list(range(12)), turn=[0] * 12, rewards=[reward] * 12)
    reinforce_pp.advantages(b, Config(kl_coef=0.0))
    assert torch.all(b.advantages == 0)


# --- GRPO / RLOO ---------------------------------------------------------------------------------


def test_grpo_advantages_have_zero_mean_per_group_and_zero_for_equal_rewards():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.2, 0.9, 0.4, 0.1])
    groups = torch.tensor([0] * 4 + [1] * 4 + [2] * 4)
    adv = grpo.group_advantages(rewards, groups)
    for g in range(3):
        assert abs(adv[groups == g].mean().item()) < 1e-6
    assert torch.all(adv[groups == 1] == 0)
    assert adv[0] > 0 > adv[1]  # the terminal reward reaches the advantage
    torch.testing.assert_close(adv[:4].std(), torch.tensor(1.0), atol=1e-4, rtol=0)


def test_rloo_baseline_for_each_sample_is_the_mean_of_the_others_in_its_group():
    rewards = [1.0, 0.0, 0.0, 0.5, 0.2, 0.9]
    groups = [0, 0, 0, 0, 1, 1]
    masks = [[O, A, A]] * 6
    b = batch_of(masks, traj=list(range(6)), turn=[0] * 6, rewards=rewards, groups=groups)
    grpo.rloo_advantages_for(b, Config())
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
    ALGOS[algo].advantages(b, Config(), None)
    on = b.loss_mask == 1
    assert torch.all(b.advantages[0][on[0]] > b.advantages[1][on[1]])
    assert torch.all(b.advantages[~on] == 0)


# --- the shared clipped policy loss --------------------------------------------------------------


def one_token(ratio: float, adv: float, ref: float | None = None):
    """A one-row batch with a single agent token whose policy ratio is `ratio`."""
    b = batch_of(
        [[O, A]],
        traj=[0],
        turn=[0],
        rewards=[0.0],
        old=[[0.0, 0.0]],
        ref=[[0.0, ref]] if ref is not None else None,
    )
    logp = torch.tensor([[0.0, math.log(ratio)]], requires_grad=True)
    return b, logp, torch.tensor([[0.0, adv]])


@pytest.mark.parametrize(
    "ratio,adv,clipped",
    [
        (1.5, 1.0, True),  # A > 0, ratio above 1 + eps: no incentive to go further
        (0.5, -1.0, True),  # A < 0, ratio below 1 - eps: likewise
        (0.5, 1.0, False),  # A > 0, ratio below 1 - eps: the min keeps the unclipped term
        (1.5, -1.0, False),  # A < 0, ratio above 1 + eps: likewise
        (1.1, 1.0, False),  # inside the clip range
    ],
)
def test_clipped_loss_has_zero_gradient_exactly_where_ppo_eq7_clips(ratio, adv, clipped):
    b, logp, a = one_token(ratio, adv)
    loss, stats = clipped_policy_loss(logp, None, b, a, clip_ratio=0.2)
    loss.backward()
    g = logp.grad[0, 1].item()
    if clipped:
        assert g == 0.0 and stats["losses/clipfrac"] == 1.0
    else:
        assert abs(g - (-adv * ratio)) < 1e-6  # d(-A r)/d logp = -A r
    assert logp.grad[0, 0] == 0  # the observation token
    torch.testing.assert_close(loss, torch.tensor(max(-adv * ratio, -adv * min(max(ratio, 0.8), 1.2))))


def test_k3_kl_value_and_gradient():
    """k3 = pi_ref/pi - log(pi_ref/pi) - 1: for log(pi_ref/pi) = 0.5, e^0.5 - 1.5 = 0.148721."""
    b, logp, a = one_token(ratio=1.0, adv=0.0, ref=0.5)
    loss, stats = clipped_policy_loss(logp, None, b, a, clip_ratio=0.2, kl_coef=1.0)
    assert abs(stats["losses/kl"] - (math.exp(0.5) - 1.5)) < 1e-6
    loss.backward()  # d k3 / d logp = 1 - pi_ref/pi = 1 - e^0.5
    assert abs(logp.grad[0, 1].item() - (1 - math.exp(0.5))) < 1e-6
    b, logp, a = one_token(ratio=1.0, adv=0.0, ref=0.0)
    assert clipped_policy_loss(logp, None, b, a, clip_ratio=0.2, kl_coef=1.0)[1]["losses/kl"] == 0.0


def test_k3_kl_is_clamped_as_verls_low_var_kl():
    """log(pi_ref/pi) is clamped to [-20, 20] and k3 to at most 10: a collapsed token cannot blow
    up the loss, and past the clamp it gets no KL gradient."""
    logp = torch.tensor([[-30.0, 0.0, -1.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -30.0, -1.5, -2.5]])
    kl = k3_kl(logp, ref)
    expect_small = math.exp(-0.5) + 0.5 - 1  # unclamped inside the range
    torch.testing.assert_close(kl, torch.tensor([[10.0, 10.0, expect_small, math.exp(-2.5) + 2.5 - 1]]))
    kl.sum().backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] == 0 and logp.grad[0, 2] != 0


@pytest.mark.parametrize(
    "ratio,adv,eps_high,clipped",
    [
        (1.25, 1.0, 0.28, False),  # clip-higher: A > 0 may raise the ratio up to 1.28
        (1.25, 1.0, 0.0, True),  # symmetric eps 0.2: clipped at 1.2
        (1.30, 1.0, 0.28, True),  # past 1 + eps_high
        (0.75, -1.0, 0.28, True),  # the lower side keeps eps_low = 0.2
        (0.85, -1.0, 0.28, False),
    ],
)
def test_clip_higher_clips_the_ratio_to_1_minus_eps_low_1_plus_eps_high(ratio, adv, eps_high, clipped):
    b, logp, a = one_token(ratio, adv)
    loss, stats = clipped_policy_loss(logp, None, b, a, clip_ratio=0.2, clip_ratio_high=eps_high)
    loss.backward()
    g = logp.grad[0, 1].item()
    assert (g == 0.0) == clipped and stats["losses/clipfrac"] == float(clipped)
    if not clipped:
        assert abs(g - (-adv * ratio)) < 1e-6
    low, high = 0.8, 1 + (eps_high or 0.2)
    torch.testing.assert_close(loss, torch.tensor(max(-adv * ratio, -adv * min(max(ratio, low), high))))


def traj(group, reward):
    return SimpleNamespace(group=group, reward=reward, success=reward > 0.5, done=True, turns=1)


def test_dynamic_sampling_drops_equal_reward_groups_and_refills_to_the_batch_size():
    first = [traj(0, 1.0), traj(0, 0.0), traj(1, 0.0), traj(1, 0.0), traj(2, 1.0), traj(2, 1.0)]
    assert {t.group for t in informative(first)} == {0}
    rounds = {
        1: [traj(10, 0.5), traj(10, 0.5), traj(11, 0.0), traj(11, 1.0)],  # one informative group
        2: [traj(20, 1.0), traj(20, 0.0), traj(21, 0.2), traj(21, 0.7)],
    }  # two
    asked = []
    kept, stats = dynamic_sampling(
        first, lambda r: (asked.append(r), rounds[r])[1], want=3, max_rounds=5, horizon=5
    )
    assert asked == [1, 2]  # stopped as soon as 3 groups had signal
    assert [t.group for t in kept] == [0, 0, 11, 11, 20, 20]  # the first 3 kept groups; 21 dropped
    assert stats["dynamic/rounds"] == 2 and stats["dynamic/groups_kept"] == 3
    assert stats["dynamic/groups_seen"] == 7 and stats["dynamic/success_all"] == 6 / 14


def test_dynamic_sampling_stops_at_the_cap_and_never_leaves_the_step_empty():
    flat = lambda g: [traj(g, 0.0), traj(g, 0.0)]
    asked = []
    kept, stats = dynamic_sampling(
        flat(0) + [traj(1, 0.0), traj(1, 1.0)],
        lambda r: (asked.append(r), flat(10 * r))[1],
        want=2,
        max_rounds=2,
        horizon=5,
    )
    assert asked == [1, 2] and [t.group for t in kept] == [1, 1] and stats["dynamic/rounds"] == 2
    first = flat(0) + flat(1)
    kept, stats = dynamic_sampling(first, lambda r: flat(10 * r), want=2, max_rounds=1, horizon=5)
    assert kept == first and stats["dynamic/groups_kept"] == 0  # no signal anywhere: the first round
    kept, stats = dynamic_sampling(first, lambda r: 1 / 0, want=2, max_rounds=0, horizon=5)
    assert kept == first and stats["dynamic/rounds"] == 0  # a cap of 0 never rolls out


def test_dynamic_sampling_reports_success_and_cut_share_over_every_group_rolled_out():
    """The kept groups have a reward spread by construction (their success is pulled toward 1/2);
    `dynamic/success_all` and `dynamic/cut_share_all` describe every episode rolled out, the
    signal the adaptive schedule reads (scaling_inter.Adaptive)."""
    solved = [SimpleNamespace(group=0, reward=1.0, success=True, done=True, turns=2) for _ in range(2)]
    mixed = [traj(1, 1.0), SimpleNamespace(group=1, reward=0.0, success=False, done=False, turns=5)]
    more = [SimpleNamespace(group=10, reward=0.0, success=False, done=False, turns=5) for _ in range(2)]
    kept, stats = dynamic_sampling(solved + mixed, lambda r: more, want=2, max_rounds=1, horizon=5)
    assert [t.group for t in kept] == [1, 1]
    assert stats["dynamic/success_all"] == 3 / 6
    assert stats["dynamic/cut_share_all"] == 3 / 6  # cut: not done, at the horizon


def test_overlong_filter_gives_a_cut_episode_no_gradient_but_keeps_its_reward_in_the_baseline():
    masks = [[O, A, A], [O, A, A], [O, O, A], [O, A, O]]
    b = batch_of(masks, traj=[0, 1, 2, 2], turn=[0, 0, 0, 1], rewards=[1.0, 0.0, 0.5], groups=[0, 0, 0])
    plain = batch_of(masks, traj=[0, 1, 2, 2], turn=[0, 0, 0, 1], rewards=[1.0, 0.0, 0.5], groups=[0, 0, 0])
    assert mask_episodes(b, [False, True, False]) == 1
    assert torch.all(b.loss_mask[1] == 0) and torch.equal(b.loss_mask[[0, 2, 3]], plain.loss_mask[[0, 2, 3]])
    grpo.advantages(b, Config())
    grpo.advantages(plain, Config())
    # episode 1's reward 0 is still in the group's mean and std: the others' advantages are unchanged
    torch.testing.assert_close(b.advantages[[0, 2, 3]], plain.advantages[[0, 2, 3]])
    logp = torch.zeros_like(b.loss_mask, requires_grad=True)
    loss, _ = grpo.loss(logp, None, b, Config(kl_coef=0.0))
    loss.backward()
    assert torch.all(logp.grad[1] == 0) and torch.all(logp.grad[0, 1:] != 0)


def test_train_loop_never_names_an_algorithm():
    """Adding an algorithm is one file and one line in ALGOS: train() has no branch on one."""
    import inspect

    import train as train_module

    source = inspect.getsource(train_module.train)
    for name in ("grpo", "rloo", "ppo", "reinforce", "critic"):
        assert name not in source.lower(), name


def test_algorithm_files_never_import_the_environment_client_and_agent_never_imports_tiny():
    import subprocess
    import sys

    code = (
        "import sys, grpo, ppo, reinforce_pp; assert not {'envs', 'agent', 'tiny'} & set(sys.modules); "
        "import agent; assert 'tiny' not in sys.modules"
    )
    root = __file__.rsplit("/tests/", 1)[0]
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)


# --- end to end ----------------------------------------------------------------------------------


def small(tmp_path, **kw) -> Config:
    base = dict(
        steps=2,
        tasks_per_step=2,
        group_size=2,
        minibatch_size=2,
        eval_episodes=0,
        rounds="2,3",
        steps_per_stage=1,
        out=str(tmp_path),
        save_every=1,
    )
    base.update(kw)
    return Config(**base)


def spy_on(algo: str, monkeypatch) -> list:
    """Put a copy of ALGOS[algo] in the table that records, for every loss call, (step, the
    loss's approx_kl, the surrogate's gain sum A * (logp - old_logp) over the agent tokens, sum |A|)."""
    inner, calls, step = ALGOS[algo], [], [0]

    def advantages(batch, cfg, state=None):
        step[0] += 1
        inner.advantages(batch, cfg, state)

    def loss(logp, entropy, mb, cfg, state=None):
        total, st = inner.loss(logp, entropy, mb, cfg, state)
        d = logp.detach().cpu() - mb.old_logprobs
        calls.append(
            (
                step[0],
                st["losses/approx_kl"],
                float((d * mb.advantages * mb.loss_mask).sum()),
                float(mb.advantages.abs().sum()),
            )
        )
        return total, st

    monkeypatch.setitem(ALGOS, algo, Algorithm(advantages, loss, inner.init))
    return calls


@pytest.mark.parametrize("algo", ["ppo", "reinforce_pp", "rloo"])
def test_each_algorithm_trains_end_to_end_on_babyai(tmp_path, monkeypatch, algo):
    """Two steps, each one minibatch seen twice (epochs 2): the first pass is on-policy (the
    stored log-probs are the update's: approx_kl ~ 0), the second sees the step the first took,
    which moved the policy up its own objective (sum A * (logp - old_logp) > 0); finite losses."""
    calls = spy_on(algo, monkeypatch)
    train(small(tmp_path, algo=algo, rounds="3", group_size=4, minibatch_size=8, epochs=2))
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]
    keys = {
        "losses/loss",
        "losses/policy_loss",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/entropy",
        "losses/kl",
    }
    if algo == "ppo":
        keys |= {"losses/value_loss", "losses/explained_variance", "losses/vf_clipfrac"}
    assert keys <= set(rows[0]) and keys <= set(rows[1])
    assert all(math.isfinite(r[k]) for r in rows for k in keys)
    for step in (1, 2):
        mine = [c for c in calls if c[0] == step]
        first, second = (
            mine[: len(mine) // 2],
            mine[len(mine) // 2 :],
        )  # epochs 1 and 2: the same micro-batches
        assert len(mine) % 2 == 0 and max(abs(c[1]) for c in first) < 1e-6
        assert min(c[1] for c in second) > 100 * max(max(abs(c[1]) for c in first), 1e-9)
        assert abs(sum(c[2] for c in first)) < 1e-4
        if sum(c[3] for c in mine) > 1.0:  # (a step whose rewards were all equal has only the KL's and
            assert sum(c[2] for c in second) > 1e-3  # entropy's gradient, or REINFORCE++'s ~1e-5 advantages)
    assert sum(c[3] for c in calls) > 1.0  # some step had an advantage to climb
    if algo == "ppo":
        critic = torch.load(tmp_path / "checkpoint" / "critic.pt")["model"]
        assert critic["head.weight"].abs().sum() > 0  # the critic's head left its zero start


def test_dynamic_sampling_and_the_overlong_filter_act_in_the_training_loop(tmp_path, monkeypatch):
    """With both flags every group the update sees has a reward spread (unless none had), the
    episodes cut at the token limit reach the update with no agent token to train, and both log."""
    seen = []

    def advantages(batch, cfg, state=None):
        spread = [len(set(batch.rewards[batch.groups == g].tolist())) > 1 for g in batch.groups.unique()]
        empty = sum(int(batch.loss_mask[batch.traj == n].sum() == 0) for n in range(len(batch.rewards)))
        seen.append((spread, empty))
        grpo.advantages(batch, cfg, state)

    monkeypatch.setitem(ALGOS, "grpo", Algorithm(advantages, grpo.loss))
    train(
        small(
            tmp_path,
            rounds="2",
            dynamic_sampling=True,
            dynamic_max_rounds=2,
            overlong_filter=True,
            max_new_tokens=2,
            clip_ratio_high=0.28,
        )
    )
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert len(rows) == len(seen) == 2
    for r, (spread, empty) in zip(rows, seen):
        assert 0 <= r["dynamic/rounds"] <= 2 and r["dynamic/groups_kept"] <= 2 <= r["dynamic/groups_seen"]
        assert all(spread) if r["dynamic/groups_kept"] else not any(spread)
        assert r["charts/overlong_masked"] == empty
    assert sum(r["charts/overlong_masked"] for r in rows) > 0  # 2 tokens cut some replies


def test_the_horizon_filter_masks_exactly_the_episodes_that_ran_out_of_turns(tmp_path, monkeypatch):
    """--horizon-filter: each episode the horizon ended (charts/cut_share) reaches the update with no
    agent token to train, every other episode keeps its tokens, and the count logs."""
    seen = []

    def advantages(batch, cfg, state=None):
        seen.append(sum(int(batch.loss_mask[batch.traj == n].sum() == 0) for n in range(len(batch.rewards))))
        grpo.advantages(batch, cfg, state)

    monkeypatch.setitem(ALGOS, "grpo", Algorithm(advantages, grpo.loss))
    train(small(tmp_path, rounds="2", steps=3, horizon_filter=True))
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert len(rows) == len(seen) == 3
    for r, empty in zip(rows, seen):
        episodes = 2 * 2  # tasks_per_step x group_size
        assert r["charts/horizon_masked"] == empty == round(r["charts/cut_share"] * episodes)
    assert sum(seen) > 0  # 2 turns cut some episodes


def test_ppo_resume_restores_the_critic(tmp_path):
    """3 steps straight == 2 steps, then resume for the third: the same critic weights."""
    a, b = tmp_path / "a", tmp_path / "b"
    train(small(a, algo="ppo", steps=3))
    train(small(b, algo="ppo", steps=2))
    after_two = torch.load(b / "checkpoint" / "critic.pt")["model"]
    train(small(b, algo="ppo", steps=3, resume=str(b / "checkpoint")))
    ca = torch.load(a / "checkpoint" / "critic.pt")["model"]
    cb = torch.load(b / "checkpoint" / "critic.pt")["model"]
    assert any(not torch.equal(after_two[k], cb[k]) for k in cb)  # the third step trained it
    for k in ca:
        torch.testing.assert_close(ca[k], cb[k])
    ra = [json.loads(x) for x in open(a / "metrics.jsonl")]
    rb = [json.loads(x) for x in open(b / "metrics.jsonl")]
    assert abs(ra[2]["losses/value_loss"] - rb[2]["losses/value_loss"]) < 1e-6
