"""PPO for multi-turn agents (Schulman et al., 2017), with GAE (Schulman et al., 2016) over the
agent's tokens of the whole multi-turn trajectory, as AgentGym-RL runs it through verl.

Where it sits: `train.py` builds a `Critic` once after loading the policy; after each rollout it
stores the critic's values in `batch.values`, calls `advantages()` once per batch, then `loss()`
on each minibatch with fresh log-probs (`agent.token_logprobs`) and fresh values (`Critic`).
This file never talks to an environment.

The critic is a SEPARATE model: a copy of the initial policy's transformer backbone with a scalar
head, `Linear(hidden, 1)`, and its own optimizer (verl's and the paper's setup). A value head on
the policy's own backbone would be cheaper, but then the value loss pushes on the features the
policy samples from, `vf_coef` trades one against the other, and one gradient clip covers both;
with a separate critic the policy's update is the same as GRPO's except for the advantage, which
is the comparison the paper makes. It costs a second copy of the backbone (small for `tiny`).
V(s_t), the value of the state before agent token t is sampled, is read from the hidden state at
position t-1, exactly where the logits of token t come from.

The MDP is the agent's tokens only. A trajectory's agent tokens, in the order they were sampled,
are the loss-mask-1 positions of its rows in turn order, a_0 ... a_{n-1}. Observation and
template tokens are not steps: the recursion jumps over them, and their values are never read.
The outcome reward R sits on the LAST AGENT token, r_{n-1} = R, all other r_k = 0. (The reference
code put R on the last token of the sequence, an observation token, then multiplied rewards by
the agent mask, so R vanished; `tests/test_algorithms.py` would catch that.)

    delta_k = r_k + gamma * V_{k+1} - V_k                      (V_n = 0: the episode is over)
    A_k     = delta_k + gamma * lam * A_{k+1}                  (GAE)
    G_k     = A_k + V_k                                        (the critic's target)

With gamma = lam = 1 (the paper's defaults) A_k = R - V_k: every agent token of a trajectory is
credited with its outcome, minus the critic's guess at that point. Loss over the agent tokens of a
minibatch ("token-mean"), advantages whitened per minibatch (`norm_adv`, as CleanRL):

    ratio    = exp(logp - old_logp)
    pg_loss  = max(-A * ratio, -A * clip(ratio, 1 - clip_ratio, 1 + clip_ratio))
    v_clip   = V_old + clip(V - V_old, -vf_clip, vf_clip)
    v_loss   = 0.5 * max((V - G)^2, (v_clip - G)^2)
    kl       = exp(ref_logp - logp) - (ref_logp - logp) - 1     (k3, a loss term as in grpo.py)
    loss     = pg_loss + vf_coef * v_loss + kl_coef * kl - entropy_coef * entropy
"""

import copy
import os
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from agent import agent_tokens


@dataclass
class PPOConfig:
    clip_ratio: float = 0.2
    """Clip range of the policy ratio."""
    kl_coef: float = 0.001
    """Weight of the k3 KL to the frozen reference model (a loss term, as in GRPO)."""
    entropy_coef: float = 0.001
    """Weight of the entropy bonus."""
    gamma: float = 1.0
    """Discount per agent token (the paper: 1.0)."""
    lam: float = 1.0
    """GAE lambda (the paper: 1.0)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    vf_clip: float = 0.5
    """Clip range of the new values around the old ones (verl's cliprange_value)."""
    norm_adv: bool = True
    """Whiten the advantages over each minibatch's agent tokens."""


class Critic(nn.Module):
    """V(s): a copy of the policy's transformer backbone with a scalar head."""

    def __init__(self, policy_model: nn.Module):
        super().__init__()
        self.backbone = copy.deepcopy(policy_model.get_decoder())  # e.g. Qwen2Model, no LM head
        self.backbone.requires_grad_(True)
        # skip_init: no draw from the RNG, so a PPO run samples exactly what a GRPO run samples
        self.head = nn.utils.skip_init(nn.Linear, policy_model.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)  # V = 0 at the start: no made-up baseline on step 1
        nn.init.zeros_(self.head.bias)
        self.head.to(next(self.backbone.parameters()).device)

    def forward(self, batch) -> torch.Tensor:
        """(B, T) token ids -> (B, T) values; position t holds V of the state before token t."""
        device = self.head.weight.device
        ids, attn = batch.input_ids.to(device), batch.attention_mask.to(device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        h = self.backbone(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state  # (B, T, H)
        v = self.head(h.float()).squeeze(-1)  # (B, T): value after reading token t
        return F.pad(v[:, :-1], (1, 0))  # shift: the state before token t is the prefix x_<t


def save_critic(path: str, critic: Critic, optimizer) -> None:
    torch.save({"critic": critic.state_dict(), "optimizer": optimizer.state_dict()},
               os.path.join(path, "critic.pt"))


def load_critic(path: str, critic: Critic, optimizer) -> None:
    state = torch.load(os.path.join(path, "critic.pt"), weights_only=False)
    critic.load_state_dict(state["critic"])
    optimizer.load_state_dict(state["optimizer"])


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


def advantages(batch, cfg: PPOConfig = PPOConfig()) -> None:
    """Fill batch.advantages and batch.returns (B, T) from batch.rewards (N,) and batch.values
    (B, T, the critic's at rollout; None: a zero critic). Zero off the agent tokens."""
    values = batch.values.float().cpu() if batch.values is not None else torch.zeros_like(batch.loss_mask)
    adv = torch.zeros_like(batch.loss_mask)  # (B, T)
    ret = torch.zeros_like(batch.loss_mask)
    for n in range(len(batch.rewards)):
        b, t = agent_tokens(batch, n)
        if len(b) == 0:
            continue
        r = torch.zeros(len(b))  # (n_agent,)
        r[-1] = batch.rewards[n]  # the outcome, on the last agent token
        a, g = gae(r, values[b, t], cfg.gamma, cfg.lam)
        adv[b, t], ret[b, t] = a, g
    batch.values = values * batch.loss_mask
    batch.advantages, batch.returns = adv, ret


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def loss(logp: torch.Tensor, entropy: torch.Tensor | None, mb, cfg: PPOConfig = PPOConfig(),
         values: torch.Tensor | None = None):
    """Clipped policy loss + clipped value loss (when the critic's fresh `values` (B, T) are given)
    + k3 KL + entropy bonus over the agent tokens of minibatch `mb`. Returns (loss, stats)."""
    m = mb.loss_mask.to(logp.device)
    adv = mb.advantages.to(logp.device)
    if cfg.norm_adv:
        mean = masked_mean(adv, m)
        std = masked_mean((adv - mean) ** 2, m).sqrt()
        adv = (adv - mean) / (std + 1e-8) * m
    log_ratio = (logp - mb.old_logprobs.to(logp.device)) * m  # 0 off the agent tokens
    ratio = log_ratio.exp()
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * ratio.clamp(1 - cfg.clip_ratio, 1 + cfg.clip_ratio)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), m)
    total = pg_loss
    stats = {}
    if values is not None:
        old_v, ret = mb.values.to(values.device), mb.returns.to(values.device)
        mv = mb.loss_mask.to(values.device)
        v_clipped = old_v + (values - old_v).clamp(-cfg.vf_clip, cfg.vf_clip)
        v_loss = 0.5 * masked_mean(torch.max((values - ret) ** 2, (v_clipped - ret) ** 2), mv)
        total = total + cfg.vf_coef * v_loss.to(logp.device)
        with torch.no_grad():
            stats["losses/value_loss"] = v_loss.item()
            stats["losses/vf_clipfrac"] = masked_mean(((values - old_v).abs() > cfg.vf_clip).float(), mv).item()
            var_ret = masked_mean((ret - masked_mean(ret, mv)) ** 2, mv)
            err = ret - old_v
            var_err = masked_mean((err - masked_mean(err, mv)) ** 2, mv)
            stats["losses/explained_variance"] = (1 - var_err / var_ret).item() if var_ret > 0 else 0.0
    if mb.ref_logprobs is not None and cfg.kl_coef:
        d = (mb.ref_logprobs.to(logp.device) - logp) * m
        kl = masked_mean(d.exp() - d - 1, m)
        total = total + cfg.kl_coef * kl
        stats["losses/kl"] = kl.item()
    if entropy is not None:
        ent = masked_mean(entropy, m)
        total = total - cfg.entropy_coef * ent
        stats["losses/entropy"] = ent.item()
    with torch.no_grad():
        stats["losses/policy_loss"] = pg_loss.item()
        stats["losses/approx_kl"] = masked_mean((ratio - 1) - log_ratio, m).item()
        stats["losses/clipfrac"] = masked_mean(((ratio - 1).abs() > cfg.clip_ratio).float(), m).item()
    return total, stats
