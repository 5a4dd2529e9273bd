"""What every algorithm shares: the interface `train.py` calls, and the clipped policy loss.

Where it sits: `train.py` picks `algos.ALGOS[cfg.algo]`, an `Algorithm`, and never names one. Per
run it calls `init` once (when the algorithm keeps a `State`, e.g. PPO's critic); per step
`advantages(batch, cfg, state)` once, then (update.py) `loss(logp, entropy, minibatch, cfg, state)`
on each minibatch, and it steps, clips, saves and restores the state's optimizer beside the policy's.
An algorithm's own knobs are a dataclass `Settings` in its file (fields with `flag`s and one-line
docstrings); `settings_class` joins every algorithm's into the one dataclass train.Config extends,
so each becomes a command-line flag. Adding an algorithm is one file that builds an `Algorithm` and
its line in `algos.ALGOS`; no other file names it.

GRPO, RLOO, GiGPO, PPO and REINFORCE++ differ in the advantage (and PPO adds a value loss,
REINFORCE++ moves the KL into the reward: below): all of them maximise PPO's clipped surrogate
objective (Schulman et al., 2017, eq. 7)

    L^CLIP = E_t[ min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t) ],
                                          r_t = pi(a_t|s_t) / pi_old(a_t|s_t)

over the agent tokens of a minibatch, averaged per token ("token-mean"), written below as the loss
max(-A r, -A clip(r)) = -min(A r, A clip(r)). eps_low = eps_high = --clip-ratio is PPO's; a larger
eps_high (--clip-ratio-high) is DAPO's "clip-higher": a token the policy
finds unlikely may then grow further before its gradient is clipped, which keeps entropy from
collapsing (DAPO: Yu et al., 2025, arXiv 2503.14476, "clip-higher"). With it, optionally, the k3
estimator of the KL to the frozen reference model
(DeepSeekMath, Shao et al., 2024, eq. 4; a loss term as in its GRPO objective, eq. 3),

    D_KL ~ pi_ref/pi - log(pi_ref/pi) - 1     (>= 0, unbiased),

clamped as verl's `low_var_kl` clamps it (log(pi_ref/pi) to [-20, 20], k3 to at most 10: one token
whose probability collapsed cannot make the loss overflow), and an entropy bonus.
`clipped_policy_loss()` is that one function.

Where the KL goes, per algorithm (docs/algorithms-notes.md): GRPO, RLOO, GiGPO and PPO add the k3
term above to the loss; REINFORCE++ puts the k1 estimate, log(pi_old / pi_ref) per token, into the
reward. AgentGym-RL's PPO (verl's KL penalty in the reward) also puts k1 there; here PPO
uses the k3 loss term like GRPO, so that PPO and GRPO differ only in the advantage.

Also here, shared by every algorithm and each off by default: DAPO's dynamic sampling
(`dynamic_sampling`: groups whose rewards are all equal carry no signal; roll out more) and its
overlong filter (`mask_episodes`: an episode with a reply cut at the token limit is left out
of the loss), the same for an episode the horizon cut (`horizon_filter`), and the discounted
return-to-go (`returns_to_go`) REINFORCE++ and GiGPO both use.
"""

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from batch import agent_tokens
from machinery import dist
from machinery.dist import global_masked_moments  # noqa: F401 (the algorithms whiten with it)
from machinery.flags import flag


@dataclass
class State:
    """What an algorithm trains beside the policy, with its own optimizer (PPO's critic).
    update.py prepares both with Accelerate (`load_learner`), zeroes, clips and steps the optimizer
    with the policy's; a checkpoint saves them to <checkpoint>/<name>.pt, and --resume restores
    them (machinery/checkpoint.py)."""

    name: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer


@dataclass(frozen=True)
class Algorithm:
    advantages: Callable  # (batch, cfg, state) -> None: fills batch.advantages (B, T)
    loss: Callable  # (logp, entropy, minibatch, cfg, state) -> (loss, stats)
    init: Callable | None = None  # (policy_model, cfg, lr) -> State; None: no state
    settings: type | None = None  # its own knobs: a dataclass of flag fields (None: none)
    min_group_size: int = 1  # rollouts per task it needs: 2 for one that compares a group's samples
    token_level: bool = False  # its advantage varies within a turn (a turn's credit: their sum)


@dataclass
class Settings:
    """What every algorithm reads: the clipped surrogate's bounds, the KL and entropy terms, and
    DAPO's batch filters."""

    clip_ratio: float = flag(0.2, above=0)
    """clip range eps of the policy ratio (PPO, eq. 7); with --clip-ratio-high, the lower one"""
    clip_ratio_high: float = flag(0.0, at_least=0)
    """upper clip range eps_high, the ratio clipped to [1 - clip_ratio, 1 + eps_high] (DAPO's
    clip-higher, e.g. 0.28); 0: clip_ratio"""
    kl_coef: float = flag(0.001, at_least=0)
    """weight of the KL to the frozen reference model (k3 loss term; REINFORCE++: in the reward); 0: no
    reference model"""
    entropy_coef: float = 0.001
    """weight of the entropy bonus"""
    dynamic_sampling: bool = False
    """drop groups whose rewards are all equal (no GRPO signal) and roll out more groups to refill the batch
    (DAPO's dynamic sampling)"""
    dynamic_max_rounds: int = flag(3, at_least=0)
    """dynamic sampling: extra rollouts per step at most; then train on what was kept (logged as
    dynamic/rounds); 0: no extra rollout, the step trains on its groups with a spread only"""
    overlong_filter: bool = False
    """leave episodes with a reply cut at --max-new-tokens out of the loss (DAPO's overlong filtering; their
    reward still counts in the group's baseline)"""
    horizon_filter: bool = False
    """leave episodes the horizon cut (the environment had not ended them) out of the loss, so running
    out of turns is not trained on as a failure; their reward still counts in the group's baseline"""


def settings_class(algos) -> type:
    """One dataclass holding `Settings` and every algorithm's own (`Algorithm.settings`), for
    train.Config to extend. Two algorithms may declare the same field (PPO's and REINFORCE++'s
    gamma) only with the same default: one flag serves both."""
    found = [Settings] + [a.settings for a in algos if a.settings is not None]
    found = list(dict.fromkeys(found))
    defaults: dict[str, tuple] = {}
    for cls in found:
        for f in dataclasses.fields(cls):
            if f.name in defaults and defaults[f.name][0] != f.default:
                raise TypeError(
                    f"{cls.__qualname__} ({cls.__module__}.py) and {defaults[f.name][1]} both declare "
                    f"{f.name}, with different defaults: rename one"
                )
            defaults[f.name] = (f.default, f"{cls.__qualname__} ({cls.__module__}.py)")
    # a class another one extends is already in it (GiGPO's settings extend GRPO's)
    bases = [c for c in found if not any(o is not c and issubclass(o, c) for o in found)]
    return dataclasses.make_dataclass("AlgorithmSettings", [], bases=tuple(reversed(bases)))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the positions where mask is 1 (the agent tokens)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def returns_to_go(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """(n,) per-step rewards of one trajectory -> (n,) G_k = r_k + gamma * G_{k+1}, G_n = 0
    (REINFORCE++ over agent tokens, GiGPO over turns)."""
    out = torch.zeros_like(rewards)
    running = 0.0
    for k in reversed(range(len(rewards))):
        running = rewards[k] + gamma * running
        out[k] = running
    return out


def outcome_on_last_token(batch):
    """Per trajectory with agent tokens: (rows, cols) of its agent tokens in the order they were
    sampled (`batch.agent_tokens`) and their (n_agent,) rewards, the outcome R on the LAST agent
    token and 0 before it (PPO's GAE and REINFORCE++'s return-to-go read the same MDP)."""
    for n in range(len(batch.rewards)):
        b, t = agent_tokens(batch, n)
        if len(b):
            r = torch.zeros(len(b))  # (n_agent,)
            r[-1] = batch.rewards[n]
            yield b, t, r


KL_LOG_RATIO_CLAMP, KL_MAX = 20.0, 10.0  # verl's low_var_kl bounds


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T): k3 = pi_ref/pi - log(pi_ref/pi) - 1 per token, clamped as verl's
    low_var_kl (d = log(pi_ref/pi) to [-20, 20], k3 to [-10, 10]; k3 >= 0, so only 10 binds)."""
    d = (ref_logp - logp).clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    return (d.exp() - d - 1).clamp(-KL_MAX, KL_MAX)


def clipped_policy_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor | None,
    mb,
    adv: torch.Tensor,
    clip_ratio: float,
    kl_coef: float = 0.0,
    entropy_coef: float = 0.0,
    clip_ratio_high: float = 0.0,
):
    """-L^CLIP (PPO, eq. 7) + kl_coef * k3 KL (DeepSeekMath, eq. 4) - entropy_coef * entropy,
    each a token-mean over the agent tokens of minibatch `mb`. The ratio is clipped to
    [1 - clip_ratio, 1 + clip_ratio_high] (DAPO's clip-higher; clip_ratio_high 0: clip_ratio).
    logp, entropy: (B, T) under the current policy; adv: (B, T), 0 off the agent tokens.
    Returns (loss, stats) with CleanRL's metric names."""
    eps_low, eps_high = clip_ratio, clip_ratio_high or clip_ratio
    m = mb.loss_mask.to(logp.device)
    adv = adv.to(logp.device)
    log_ratio = (logp - mb.old_logprobs.to(logp.device)) * m  # 0 off the agent tokens
    ratio = log_ratio.exp()  # r_t
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * ratio.clamp(1 - eps_low, 1 + eps_high)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), m)
    total = pg_loss
    stats = {}
    if mb.ref_logprobs is not None and kl_coef:
        kl = masked_mean(k3_kl(logp * m, mb.ref_logprobs.to(logp.device) * m), m)  # 0 off the agent tokens
        total = total + kl_coef * kl
        stats["losses/kl"] = kl.item()
    if entropy is not None:
        ent = masked_mean(entropy, m)
        total = total - entropy_coef * ent
        stats["losses/entropy"] = ent.item()
    with torch.no_grad():
        stats["losses/policy_loss"] = pg_loss.item()
        stats["losses/approx_kl"] = masked_mean((ratio - 1) - log_ratio, m).item()
        clipped = (ratio < 1 - eps_low) | (ratio > 1 + eps_high)
        stats["losses/clipfrac"] = masked_mean(clipped.float(), m).item()
    return total, stats


# --- DAPO's batch filters (Yu et al., 2025), each behind a flag that is off by default ----------


def informative(trajs: list) -> list:
    """The trajectories of the groups whose rewards are not all equal (by `.group`, `.reward`).
    A group of equal rewards gets A = 0 under GRPO (and its variants): no gradient but the KL's
    and the entropy's, while it still takes its share of the token-mean."""
    rewards: dict = {}
    for t in trajs:
        rewards.setdefault(t.group, set()).add(t.reward)
    return [t for t in trajs if len(rewards[t.group]) > 1]


def dynamic_sampling(trajs: list, roll_more: Callable[[int], list], want: int, max_rounds: int, horizon: int):
    """DAPO's dynamic sampling: keep the groups with a reward spread (`informative`), and while
    fewer than `want` groups are kept (on any process: the rounds are decided together, as every
    process rolls out together), call `roll_more(round)` for a fresh set of groups (round = 1, 2, ...;
    their `.group` ids must not repeat earlier ones), at most `max_rounds` more times. The kept
    groups past `want` are dropped, so the batch keeps its size; at the cap the batch is what was
    kept (smaller), and when no group was kept, the first round's (as without dynamic sampling: a
    step is never skipped for want of signal, it has only the KL and entropy terms).
    Returns (trajectories to train on, stats): `dynamic/rounds` extra rollouts, `dynamic/groups_kept`
    (with a reward spread), `dynamic/groups_seen`, and over every episode rolled out `dynamic/success_all`,
    the success rate, and `dynamic/cut_share_all`, the share the `horizon` cut (the charts/ metrics then
    describe only the trained groups, whose success a reward spread pulls toward 1/2: the adaptive
    schedule reads these two)."""
    seen, kept, rounds = list(trajs), informative(trajs), 0
    n_groups = lambda ts: len({t.group for t in ts})
    while rounds < max_rounds and dist.global_max(int(n_groups(kept) < want)):
        rounds += 1
        more = roll_more(rounds)
        seen += more
        kept += informative(more)
    first = set(list(dict.fromkeys(t.group for t in kept))[:want])  # the first `want` groups rolled out
    kept = [t for t in kept if t.group in first]
    share = lambda xs: dist.global_sum(float(sum(xs))) / max(1.0, dist.global_sum(float(len(seen))))
    stats = {
        "dynamic/rounds": rounds,
        "dynamic/groups_kept": dist.global_sum(n_groups(kept)),
        "dynamic/groups_seen": dist.global_sum(n_groups(seen)),
        "dynamic/success_all": share([t.success for t in seen]),
        "dynamic/cut_share_all": share([not t.done and t.turns >= horizon for t in seen]),
    }
    return kept or list(trajs), stats  # none at all: the first round, as without dynamic sampling


def mask_episodes(batch, cut: list[bool]) -> int:
    """Every agent token of trajectory n with cut[n] gets loss mask 0, so the update learns nothing
    from an episode that a limit, not the policy, ended: DAPO's overlong filtering (a reply cut at
    --max-new-tokens) and --horizon-filter (an episode out of turns). Its reward still counts in its
    group's baseline. Call before `advantages` (whitening then sees only the trained tokens).
    Returns how many episodes were masked."""
    cut = torch.tensor(cut, dtype=torch.bool)  # (N,)
    batch.loss_mask = batch.loss_mask * (~cut[batch.traj]).unsqueeze(-1)  # (B, T) * (B, 1)
    return int(cut.sum())
