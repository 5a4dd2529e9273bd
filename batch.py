"""The batch: the contract between the agent and the algorithms.

Where it sits: `agent.rollout()` returns trajectories whose token sequences are `Row`s;
`make_batch()` pads them into one `Batch` of tensors; `train.py` fills `batch.ref_logprobs` with
`token_logprobs()` under the frozen reference model, the algorithm file fills `batch.advantages`,
and every minibatch's loss starts from `token_logprobs()` under the current policy. This file
imports neither the environment client nor any algorithm, so an algorithm file that imports it
never talks to an environment.

A trajectory is one or more rows (one with the whole conversation, one per turn with a window of
the last K turns), and a row is a token sequence with a loss mask that is 1 exactly on the agent's
sampled tokens. `agent_tokens(batch, n)` lists trajectory n's agent tokens in the order they were
sampled: the steps of the token-level MDP that PPO's GAE and REINFORCE++'s return run over.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass
class Row:
    """One token sequence the model saw and extended."""

    ids: list[int]
    mask: list[int]  # 1 on the agent's sampled tokens
    logprobs: list[float]  # log-prob of each sampled token at sampling time (0 elsewhere)
    allowed: dict[int, list[int]] = field(default_factory=dict)  # position -> allowed token ids


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, T) right-padded
    attention_mask: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T) 1.0 on agent tokens
    old_logprobs: torch.Tensor  # (B, T) at sampling time, aligned with input_ids
    allowed: torch.Tensor | None  # (B, T, V) bool where sampling was masked, else None
    traj: torch.Tensor  # (B,) index of each row's trajectory
    turn: torch.Tensor  # (B,) index of the row within its trajectory
    rewards: torch.Tensor  # (N,) outcome reward per trajectory
    groups: torch.Tensor  # (N,) group per trajectory
    ref_logprobs: torch.Tensor | None = None  # (B, T) under the frozen reference model
    advantages: torch.Tensor | None = None  # (B, T) filled by the algorithm
    returns: torch.Tensor | None = None  # (B, T) value targets (PPO) or returns (REINFORCE++)
    values: torch.Tensor | None = None  # (B, T) PPO's values at rollout time
    anchors: list[list[str]] | None = None  # (N,) per trajectory, the observation each turn acted on (GiGPO)

    def __len__(self):
        return self.input_ids.shape[0]

    def select(self, rows: torch.Tensor) -> "Batch":
        """A minibatch of rows (trajectory-level tensors are kept whole)."""
        pick = lambda x: None if x is None else x[rows]
        return Batch(self.input_ids[rows], self.attention_mask[rows], self.loss_mask[rows],
                     self.old_logprobs[rows], pick(self.allowed), self.traj[rows], self.turn[rows],
                     self.rewards, self.groups, pick(self.ref_logprobs), pick(self.advantages),
                     pick(self.returns), pick(self.values), self.anchors)


def make_batch(trajs, pad_id: int, vocab_size: int) -> Batch:
    """Trajectories (anything with `.rows`, `.reward` and `.group`, e.g. `agent.Trajectory`; GiGPO
    also reads `.observations` and `.turns`)
    -> one right-padded Batch, rows of trajectory 0 first."""
    rows = [(n, k, r) for n, tr in enumerate(trajs) for k, r in enumerate(tr.rows)]
    B, T = len(rows), max(len(r.ids) for _, _, r in rows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T))
    lp = torch.zeros((B, T))
    masked = any(r.allowed for _, _, r in rows)
    allowed = torch.zeros((B, T, vocab_size), dtype=torch.bool) if masked else None
    for b, (_, _, r) in enumerate(rows):
        n = len(r.ids)
        ids[b, :n] = torch.tensor(r.ids)
        attn[b, :n] = 1
        mask[b, :n] = torch.tensor(r.mask, dtype=torch.float)
        lp[b, :n] = torch.tensor(r.logprobs)
        if masked:
            allowed[b, :, :] = True  # unmasked positions allow everything
            for p, ok in r.allowed.items():
                allowed[b, p, :] = False
                allowed[b, p, ok] = True
    return Batch(
        input_ids=ids, attention_mask=attn, loss_mask=mask, old_logprobs=lp, allowed=allowed,
        traj=torch.tensor([n for n, _, _ in rows]), turn=torch.tensor([k for _, k, _ in rows]),
        rewards=torch.tensor([tr.reward for tr in trajs], dtype=torch.float),
        groups=torch.tensor([tr.group for tr in trajs]),
        anchors=[list(getattr(tr, "observations", []))[:getattr(tr, "turns", 0)] for tr in trajs],
    )


def agent_tokens(batch: Batch, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols) of trajectory n's agent tokens, in the order they were sampled: its rows in
    turn order, and within a row the loss-mask-1 columns left to right."""
    rows = (batch.traj == n).nonzero().squeeze(-1)
    rows = rows[batch.turn[rows].argsort()]
    b, t = [], []
    for r in rows.tolist():
        cols = batch.loss_mask[r].nonzero().squeeze(-1).tolist()
        b += [r] * len(cols)
        t += cols
    return torch.tensor(b, dtype=torch.long), torch.tensor(t, dtype=torch.long)


def token_logprobs(model, batch: Batch, temperature: float = 1.0, with_entropy: bool = False):
    """Log-prob of every token given the ones before it, under the same (masked, temperature-
    scaled) distribution it was sampled from. Position t holds log p(x_t | x_<t); position 0 is 0.
    Returns (B, T) log-probs and, if asked, (B, T) entropies."""
    device = next(model.parameters()).device
    ids, attn = batch.input_ids.to(device), batch.attention_mask.to(device)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, :-1].float()
    logits = logits / temperature  # (B, T-1, V): logits[t] predicts token t+1
    if batch.allowed is not None:
        logits = logits.masked_fill(~batch.allowed[:, 1:].to(device), float("-inf"))
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    logp = F.pad(logp, (1, 0))  # (B, T): align with input_ids
    if not with_entropy:
        return logp, None
    p = logp_all.exp()
    ent = -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)  # (B, T-1); 0*log0 := 0
    return logp, F.pad(ent, (1, 0))
