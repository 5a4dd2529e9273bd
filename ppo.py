"""PPO for multi-turn agents (Schulman et al., 2017), with GAE (Schulman et al., 2016) over the
agent's tokens of the whole multi-turn trajectory, as AgentGym-RL runs it through verl.

Where it sits: `train.py` calls `init()` once after loading the policy: the critic and its
optimizer are this algorithm's `algorithm.State`. After each rollout `advantages()` stores the
critic's values in `batch.values` and computes GAE; `loss()` on each minibatch takes fresh
log-probs (`batch.token_logprobs`) and the critic's fresh values. This file never talks to an
environment.

The critic is a SEPARATE model: a copy of the initial policy's transformer backbone with a scalar
head, `Linear(hidden, 1)`, and its own optimizer (verl's and the paper's setup). A value head on
the policy's own backbone would be cheaper, but then the value loss pushes on the features the
policy samples from, `vf_coef` trades one against the other, and one gradient clip covers both;
with a separate critic the policy's update is the same as GRPO's except for the advantage, which
is the comparison the paper makes. It costs a second copy of the backbone (small for `tiny`). It
trains what the policy trains: every weight, in float32 (weights, gradients and AdamW's two
moments: 16 bytes a parameter), or, under --lora-rank, its own copies of the policy's adapters over
a frozen copy of the base (2 bytes a parameter in bf16), with optimizer state for the adapters only
(benchmarks/memory_plan.py counts both). Its head runs in float32 under autocast, as the LM head.
V(s_t), the value of the state before agent token t is sampled, is read from the hidden state at
position t-1, exactly where the logits of token t come from.

The MDP is the agent's tokens only. A trajectory's agent tokens, in the order they were sampled,
are the loss-mask-1 positions of its rows in turn order, a_0 ... a_{n-1}. Observation and
template tokens are not steps: the recursion jumps over them, and their values are never read.
The outcome reward R sits on the LAST AGENT token, r_{n-1} = R, all other r_k = 0. (The reference
code put R on the last token of the sequence, an observation token, then multiplied rewards by
the agent mask, so R vanished; `tests/test_algorithms.py` would catch that.)

    delta_k = r_k + gamma * V_{k+1} - V_k                      (V_n = 0: the episode is over)
    A_k     = delta_k + gamma * lam * A_{k+1}                  (GAE: Schulman et al., 2016, eq. 16,
                                                                A_k = sum_l (gamma lam)^l delta_{k+l})
    G_k     = A_k + V_k                                        (the critic's target)

With gamma = lam = 1 (the paper's defaults) A_k = R - V_k: every agent token of a trajectory is
credited with its outcome, minus the critic's guess at that point. Loss over the agent tokens of a
minibatch ("token-mean"), advantages whitened once over the batch's agent tokens (`norm_adv`, as
verl's `masked_whiten`; per batch rather than per minibatch, so that splitting a minibatch into
micro-batches leaves the update unchanged; in float64, so that a batch whose advantages are all
equal, e.g. equal rewards under the zero critic of step 1, gets exactly 0 rather than float32
noise blown up to +-1), the clipped surrogate of
Schulman et al. (2017), eq. 7, shared with GRPO (`algorithm.clipped_policy_loss`), plus a clipped
value loss (their eq. 9 adds an unclipped one; the clip is verl's and the baselines'):

    ratio    = exp(logp - old_logp)
    pg_loss  = max(-A * ratio, -A * clip(ratio, 1 - clip_ratio, 1 + clip_ratio))
    v_clip   = V_old + clip(V - V_old, -vf_clip, vf_clip)
    v_loss   = 0.5 * max((V - G)^2, (v_clip - G)^2)
    kl       = exp(ref_logp - logp) - (ref_logp - logp) - 1     (k3, a loss term as in grpo.py; clamped)
    loss     = pg_loss + vf_coef * v_loss + kl_coef * kl - entropy_coef * entropy

Where the KL goes: here, as in grpo.py, the k3 estimate of KL(pi || pi_ref) is a loss term
(`algorithm.clipped_policy_loss`), so that PPO and GRPO differ only in the advantage. AgentGym-RL's
PPO (verl's KL penalty in the reward) instead subtracts kl_coef times the k1 estimate,
log(pi_old/pi_ref), from each token's reward before GAE, as reinforce_pp.py here does
(docs/algorithms-notes.md).

The critic learns at its own rate: --critic-lr, by default 0: AgentGym-RL's 1e-5 (CRITIC_LR, ten
times the policy's 1e-6), or the policy's own lr where that is larger (the tiny policy's 5e-4). A
zero-initialised head at the policy's 1e-6 would keep V near 0, and PPO would be whitened
REINFORCE. Its forward at rollout (the baseline and the value clip's anchor) runs in the update's
micro-batches (--micro-batch-size, --micro-batch-tokens), as the policy's and the reference's do;
in the loss it sees the micro-batch the policy sees.

Reads cfg.gamma, cfg.lam, cfg.norm_adv, cfg.whiten_eps, cfg.vf_coef, cfg.vf_clip, cfg.critic_lr,
cfg.clip_ratio, cfg.clip_ratio_high (DAPO's clip-higher, the upper end 1 + clip_ratio_high; 0:
the symmetric clip above), cfg.kl_coef, cfg.entropy_coef, cfg.micro_batch_size,
cfg.micro_batch_tokens (train.Config).
"""

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn

from algorithm import (
    Algorithm,
    State,
    clipped_policy_loss,
    global_masked_moments,
    masked_mean,
    outcome_on_last_token,
)
from batch import micro_batches
from machinery import lora
from machinery.flags import flag
from machinery.logprobs import position_ids, predicting_positions


@dataclass
class Settings:
    gamma: float = flag(1.0, at_least=0, at_most=1)
    """ppo, reinforce_pp: discount per agent token"""
    lam: float = flag(1.0, at_least=0, at_most=1)
    """ppo: GAE lambda"""
    norm_adv: bool = True
    """ppo: whiten the advantages over the batch's agent tokens (verl's masked_whiten)"""
    whiten_eps: float = flag(1e-8, at_least=0)
    """ppo, reinforce_pp: added to the std (ppo) or the variance (reinforce_pp) when whitening"""
    vf_coef: float = flag(0.5, at_least=0)
    """ppo: weight of the value loss"""
    vf_clip: float = flag(0.5, above=0)
    """ppo: clip range of the new values around the old ones (verl's cliprange_value)"""
    critic_lr: float = flag(0.0, at_least=0)
    """ppo: learning rate of the critic; 0: AgentGym-RL's 1e-5, or the policy's lr where larger (tiny)"""


class Critic(nn.Module):
    """V(s): a copy of the policy's transformer backbone with a scalar head."""

    def __init__(self, policy_model: nn.Module):
        super().__init__()
        self.backbone = copy.deepcopy(policy_model.get_decoder())  # e.g. Qwen2Model, no LM head
        if not lora.has_adapters(policy_model):  # the policy trains every weight: so does the critic
            self.backbone.requires_grad_(True)
        # with LoRA: the critic trains its own copies of the policy's adapters over the frozen base
        for p in self.backbone.parameters():
            if p.requires_grad:  # trained in float32 (the frozen base may be bf16): a bf16 weight would
                p.data = p.data.float()  # round most of a small AdamW step away
        # skip_init: no draw from the RNG, so a PPO run samples exactly what a GRPO run samples
        self.head = nn.utils.skip_init(nn.Linear, policy_model.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)  # V = 0 at the start: no made-up baseline on step 1
        nn.init.zeros_(self.head.bias)
        self.head.to(next(self.backbone.parameters()).device)

    def forward(self, batch) -> torch.Tensor:
        """(B, T) token ids -> (B, T) values: at each agent token t, V of the state before it,
        read from h[t-1] like the policy's logits for t (machinery/logprobs.py); 0 elsewhere."""
        device = self.head.weight.device
        ids, attn = batch.input_ids.to(device), batch.attention_mask.to(device)
        rows, cols = predicting_positions(batch.loss_mask.to(device))
        pos = position_ids(attn)
        h = self.backbone(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state  # (B, T, H)
        with torch.autocast(device.type, enabled=False):  # the head in float32 under autocast too
            v = self.head(h[rows, cols - 1].float()).squeeze(-1)  # (N,): the prefix x_<t, (B, T, H) -> (N,)
        return torch.zeros(batch.loss_mask.shape, device=device).index_put((rows, cols), v)


CRITIC_LR = 1e-5  # AgentGym-RL's critic learning rate (ten times its policy's 1e-6)


def critic_lr(cfg, lr: float) -> float:
    """--critic-lr, or (0) the larger of AgentGym-RL's CRITIC_LR and the policy's `lr`."""
    return cfg.critic_lr or max(CRITIC_LR, lr)


def init(policy_model: nn.Module, cfg, lr: float) -> State:
    """The critic (from the policy's current backbone) and its own optimizer."""
    critic = Critic(policy_model)
    trained = [p for p in critic.parameters() if p.requires_grad]  # optimizer state only for these
    return State("critic", critic, torch.optim.AdamW(trained, lr=critic_lr(cfg, lr)))


@torch.no_grad()
def critic_values(critic: nn.Module, batch, cfg) -> torch.Tensor:
    """(B, T) the critic's values of the whole batch, computed in the update's micro-batches (one
    micro-batch's activations alive at a time, as for the policy and the reference)."""
    out = torch.zeros_like(batch.loss_mask)
    for rows, micro in micro_batches(batch, cfg.micro_batch_size, cfg.micro_batch_tokens):
        v = critic(micro)  # (b, t), t <= T
        out[rows, : v.shape[1]] = v.float().cpu()
    return out


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float):
    """(n,) rewards and (n,) values of one trajectory's agent tokens -> (n,) advantages, (n,) returns."""
    n = len(rewards)
    adv = torch.zeros(n)
    last = 0.0
    for k in reversed(range(n)):
        next_value = values[k + 1] if k + 1 < n else 0.0  # after the last agent token: the end
        delta = rewards[k] + gamma * next_value - values[k]
        last = delta + gamma * lam * last
        adv[k] = last
    return adv, adv + values


def advantages(batch, cfg, state: State | None = None) -> None:
    """Fill batch.values (the critic's at rollout: the baseline and the value clip's anchor),
    batch.advantages and batch.returns (B, T) from batch.rewards (N,). Without a state the values
    already in batch.values are used (None: a zero critic). Zero off the agent tokens."""
    if state is not None:
        batch.values = critic_values(state.model, batch, cfg)
    values = batch.values.float().cpu() if batch.values is not None else torch.zeros_like(batch.loss_mask)
    adv = torch.zeros_like(batch.loss_mask)  # (B, T)
    ret = torch.zeros_like(batch.loss_mask)
    for b, t, r in outcome_on_last_token(batch):  # each trajectory's agent tokens, R on the last
        a, g = gae(r, values[b, t], cfg.gamma, cfg.lam)
        adv[b, t], ret[b, t] = a, g
    batch.values = values * batch.loss_mask
    batch.advantages = whiten(adv, batch.loss_mask, cfg.whiten_eps) if cfg.norm_adv else adv
    batch.returns = ret


def whiten(adv: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """(B, T) -> (B, T): (A - mean) / (std + eps) over the agent tokens of the global batch (every
    process's; std the biased one; statistics in float64, so that equal advantages give exactly 0);
    0 elsewhere."""
    mean, var = global_masked_moments(adv, mask)  # over every process's agent tokens (machinery/dist.py)
    return ((adv.double() - mean) / (var.sqrt() + eps) * mask.double()).to(adv.dtype)


def value_loss(values: torch.Tensor, mb, cfg):
    """Clipped value loss over the agent tokens; values: (B, T) from the critic now.
    Returns (v_loss, stats)."""
    old_v, ret = mb.values.to(values.device), mb.returns.to(values.device)
    mv = mb.loss_mask.to(values.device)
    v_clipped = old_v + (values - old_v).clamp(-cfg.vf_clip, cfg.vf_clip)
    v_loss = 0.5 * masked_mean(torch.max((values - ret) ** 2, (v_clipped - ret) ** 2), mv)
    stats = {}
    with torch.no_grad():
        stats["losses/value_loss"] = v_loss.item()
        stats["losses/vf_clipfrac"] = masked_mean(((values - old_v).abs() > cfg.vf_clip).float(), mv).item()
        _, var_ret = global_masked_moments(ret, mv)  # over every process's micro-batch (machinery/dist.py)
        _, var_err = global_masked_moments(ret - old_v, mv)
        stats["losses/explained_variance"] = (1 - var_err / var_ret).item() if var_ret > 0 else 0.0
    return v_loss, stats


def loss(logp: torch.Tensor, entropy: torch.Tensor | None, mb, cfg, state: State | None = None):
    """The shared clipped policy loss on (whitened) advantages, plus vf_coef times the clipped
    value loss of the critic's fresh values (when there is a critic). Returns (loss, stats)."""
    total, stats = clipped_policy_loss(
        logp, entropy, mb, mb.advantages, cfg.clip_ratio, cfg.kl_coef, cfg.entropy_coef, cfg.clip_ratio_high
    )
    if state is not None:
        v_loss, v_stats = value_loss(state.model(mb), mb, cfg)
        total = total + cfg.vf_coef * v_loss.to(logp.device)
        stats.update(v_stats)
    return total, stats


PPO = Algorithm(advantages=advantages, loss=loss, init=init, settings=Settings, token_level=True)
