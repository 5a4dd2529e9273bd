"""The batch: the contract between the agent and the algorithms.

Where it sits: `agent.rollout()` returns trajectories whose token sequences are `Row`s;
`make_batch()` pads them into one `Batch` of tensors; `update.prepare_batch` fills
`batch.ref_logprobs` under the frozen reference model, the algorithm file fills `batch.advantages`,
and every minibatch's loss starts from `token_logprobs()` under the current policy (computed by
`machinery/logprobs.py` at the agent tokens only, in bounded memory). This file
imports neither the environment client nor any algorithm, so an algorithm file that imports it
never talks to an environment.

A trajectory is one or more rows (one with the whole conversation, one per turn with a window of
the last K turns), and a row is a token sequence with a loss mask that is 1 exactly on the agent's
sampled tokens. `agent_tokens(batch, n)` lists trajectory n's agent tokens in the order they were
sampled: the steps of the token-level MDP that PPO's GAE and REINFORCE++'s return run over.
"""

from dataclasses import dataclass, field

import torch

from machinery.logprobs import agent_logprobs, predicting_positions


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
    allowed: torch.Tensor | None  # (B, T, K) ids allowed where sampling was masked, -1 padded; None: no mask
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
        return Batch(
            self.input_ids[rows],
            self.attention_mask[rows],
            self.loss_mask[rows],
            self.old_logprobs[rows],
            pick(self.allowed),
            self.traj[rows],
            self.turn[rows],
            self.rewards,
            self.groups,
            pick(self.ref_logprobs),
            pick(self.advantages),
            pick(self.returns),
            pick(self.values),
            self.anchors,
        )

    def trim(self) -> "Batch":
        """The same rows without the columns that are padding in every row (a micro-batch of
        short rows then costs only its own length)."""
        T = int(self.attention_mask.sum(-1).max())
        cut = lambda x: None if x is None else x[:, :T]
        return Batch(
            self.input_ids[:, :T],
            self.attention_mask[:, :T],
            self.loss_mask[:, :T],
            self.old_logprobs[:, :T],
            cut(self.allowed),
            self.traj,
            self.turn,
            self.rewards,
            self.groups,
            cut(self.ref_logprobs),
            cut(self.advantages),
            cut(self.returns),
            cut(self.values),
            self.anchors,
        )


def make_batch(trajs, pad_id: int) -> Batch:
    """Trajectories (anything with `.rows`, `.reward` and `.group`, e.g. `agent.Trajectory`; GiGPO
    also reads `.observations` and `.turns`) -> one right-padded Batch, rows of trajectory 0 first.
    Masked sampling is kept as the id lists the rollout stored (K = the most ids allowed anywhere),
    never as a (B, T, V) mask."""
    rows = [r for tr in trajs for r in tr.rows]
    B, T = len(rows), max(len(r.ids) for r in rows)
    right = lambda xs, fill: list(xs) + [fill] * (T - len(xs))  # each field padded as lists, one tensor
    ids = torch.tensor([right(r.ids, pad_id) for r in rows], dtype=torch.long)
    attn = torch.tensor([right([1] * len(r.ids), 0) for r in rows], dtype=torch.long)
    mask = torch.tensor([right(r.mask, 0) for r in rows], dtype=torch.float)
    lp = torch.tensor([right(r.logprobs, 0.0) for r in rows], dtype=torch.float)
    K = max((len(ok) for r in rows for ok in r.allowed.values()), default=0)
    allowed = torch.full((B, T, K), -1, dtype=torch.long) if K else None  # all -1: not masked
    if K:
        at = [
            (b, p, k, x) for b, r in enumerate(rows) for p, ok in r.allowed.items() for k, x in enumerate(ok)
        ]
        row, pos, k, x = map(torch.tensor, zip(*at))  # (row, position, k-th id allowed there, the id)
        allowed[row, pos, k] = x
    return Batch(
        input_ids=ids,
        attention_mask=attn,
        loss_mask=mask,
        old_logprobs=lp,
        allowed=allowed,
        traj=torch.tensor([n for n, tr in enumerate(trajs) for _ in tr.rows]),
        turn=torch.tensor([k for tr in trajs for k in range(len(tr.rows))]),
        rewards=torch.tensor([tr.reward for tr in trajs], dtype=torch.float),
        groups=torch.tensor([tr.group for tr in trajs]),
        anchors=[list(getattr(tr, "observations", []))[: getattr(tr, "turns", 0)] for tr in trajs],
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


def turn_of_tokens(batch) -> torch.Tensor:
    """(B, T) long: the turn index of every agent token within its trajectory, -1 elsewhere.
    Works for both layouts: one row per turn (context_turns=K), or one row holding the whole
    conversation, where each run of consecutive agent tokens is one turn."""
    out = torch.full(batch.loss_mask.shape, -1, dtype=torch.long)
    for n in batch.traj.unique().tolist():
        rows = (batch.traj == n).nonzero().squeeze(-1)
        rows = rows[batch.turn[rows].argsort()]  # turn order, whatever order the batch holds
        t = -1
        for r in rows.tolist():
            prev = 0.0
            for c, m in enumerate(batch.loss_mask[r].tolist()):
                if m and not prev:  # a new run of agent tokens starts a new turn
                    t += 1
                if m:
                    out[r, c] = t
                prev = m
    return out


def token_logprobs(model, batch: Batch, temperature: float = 1.0, with_entropy: bool = False):
    """Log-prob of each agent token given the tokens before it, under the same (masked, temperature-
    scaled) distribution it was sampled from, and the entropy of that distribution. Returns (B, T)
    log-probs and, if asked, (B, T) entropies, at the agent tokens (loss mask 1); 0 elsewhere.
    Computed by `logprobs.agent_logprobs`: only agent positions reach the LM head, in chunks.

    Identical rows are computed once (a GRPO group's rollouts that chose the same actions: a fifth
    of the demo's tokens): every copy reads the one result, and backward adds up the copies'
    gradients, exactly as if each had been computed on its own."""
    first, copies = unique_rows(batch)
    one = batch.select(first) if len(first) < len(batch) else batch
    rows, cols = predicting_positions(one.loss_mask)
    allowed = None if one.allowed is None else one.allowed[rows, cols]  # (N, K)
    # a plain model, or a `logprobs.LogprobForward` (maybe wrapped by DDP/FSDP: train.py's update)
    run = model if not hasattr(model, "get_decoder") else lambda *a: agent_logprobs(model, *a)
    logp, ent = run(one.input_ids, one.attention_mask, rows, cols, temperature, allowed, with_entropy)  # (N,)

    def grid(x):  # (N,) -> (B, T), differentiable
        where = (rows.to(x.device), cols.to(x.device))
        return torch.zeros(one.loss_mask.shape, device=x.device, dtype=x.dtype).index_put(where, x)[
            copies.to(x.device)
        ]

    return grid(logp), grid(ent) if with_entropy else None


def unique_rows(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(first, copies): the first row of each distinct row (same tokens, loss mask and allowed ids)
    and, for every row, which of those it equals; batch.select(first)[copies] is the batch again."""
    if len(batch) == 0:
        return torch.arange(0), torch.arange(0)
    key = [batch.input_ids * batch.attention_mask, batch.attention_mask, batch.loss_mask.long()]
    if batch.allowed is not None:
        key.append(batch.allowed.flatten(1))
    _, copies = torch.unique(torch.cat(key, dim=1), dim=0, return_inverse=True)
    first = torch.full((int(copies.max()) + 1,), len(batch), dtype=torch.long)
    first = first.scatter_reduce(0, copies, torch.arange(len(batch)), reduce="amin")
    # number the distinct rows in order of their first appearance (keeps the batch's row order)
    order = first.argsort()
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    return first[order], rank[copies]


def micro_batches(mb: Batch, rows: int = 0, tokens: int = 0) -> list[tuple[torch.Tensor, Batch]]:
    """Minibatch `mb` as (row indices, micro-batch) pairs: its rows sorted by length, cut wherever
    a micro-batch would pass `rows` rows or `tokens` padded tokens (its rows x its longest row; 0:
    no limit), each trimmed to its longest row. Sorting is what makes the cut pay: rows of similar
    length pad little (the demo's batch: 18k real tokens, 36k padded to its longest row), and the
    forward's cost is per padded token. A row longer than `tokens` goes alone."""
    lengths = mb.attention_mask.sum(-1)
    groups: list[list[int]] = [[]]
    for i in lengths.argsort(stable=True).tolist():  # shortest first: the row added is the longest
        n = len(groups[-1]) + 1
        if groups[-1] and ((rows and n > rows) or (tokens and n * int(lengths[i]) > tokens)):
            groups.append([])
        groups[-1].append(i)
    return [(idx, mb.select(idx).trim()) for idx in map(torch.tensor, groups) if len(idx)]
