"""Log-probs and entropy of the agent's tokens: the one training forward pass, in bounded memory.

Where it sits: `train.py` calls it for the policy in every update and for the frozen reference
model once per batch; PPO's critic reads its values at the same positions (`predicting_positions`).
It needs the token ids, the attention mask, WHERE the agent's tokens are, and (when sampling was
restricted to the available actions) which ids were allowed there. Nothing here knows an algorithm.

What is computed. For every agent token x_t (loss mask 1), under the distribution it was sampled
from (temperature T, and the action mask when there was one):

    log pi(x_t | x_<t) = log_softmax(z_{t-1} / T + mask_t)[x_t]        z = logits, (V,) per position
    H_t = - sum_v p_v log p_v                                          (0 log 0 := 0)

Why not just `model(...).logits`? That is a (B, T, V) float tensor: with Qwen2.5's vocabulary
(V = 151,936), a minibatch of 8 trajectories of 8,192 tokens is 40 GB per copy, and a log-softmax,
its exp and the entropy's product each add one (issue 12). Here instead:

    1. the transformer runs once:               h = decoder(x)              (B, T, H)
    2. keep the positions that predict an agent token: h[b, t-1]            (N, H), N agent tokens
    3. the LM head, log-softmax, gather and entropy run on chunks of C of those positions,
       (C, V) at a time. Under autograd each chunk is checkpointed: backward recomputes its logits
       instead of keeping them, so the peak is a few (C, V) tensors, never (N, V) or (B, T, V).

Observation and template tokens never reach the LM head at all. With action masking the mask of a
position is rebuilt per chunk from the ids allowed there, stored as a small (..., K) id list padded
with -1 (K = the most ids allowed at any one position), never as a (B, T, V) boolean.

`full_logprobs` is the plain computation over every position, kept as the reference for the parity
tests and as the "before" of `benchmarks/update_memory.py`.
"""

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

CHUNK_ELEMENTS = 2**25
"""Default chunk: C = CHUNK_ELEMENTS // V positions, so one (C, V) float32 tensor is 128 MiB."""


def default_chunk(vocab_size: int) -> int:
    return max(1, CHUNK_ELEMENTS // vocab_size)


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T) positions counting only real tokens (left or right padding)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def predicting_positions(loss_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) loss mask -> (rows, cols) of the agent tokens, row-major, each with t >= 1.
    The logits that predict token (b, t) come from position (b, t-1)."""
    mask = loss_mask.clone()
    mask[:, 0] = 0  # nothing predicts the first token of a row (it is never an agent token)
    rows, cols = mask.nonzero(as_tuple=True)
    return rows, cols


def allowed_bias(allowed: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(C, K) allowed ids, -1 padded -> (C, V) additive mask: 0 where allowed, -inf elsewhere.
    A row of only -1 was not masked: 0 everywhere."""
    C = allowed.shape[0]
    bias = torch.full((C, vocab_size + 1), float("-inf"), device=allowed.device)
    bias.scatter_(1, allowed.masked_fill(allowed < 0, vocab_size), 0.0)  # -1 -> a spare column V
    bias[(allowed < 0).all(-1)] = 0.0
    return bias[:, :vocab_size]


def output_logits(model, h: torch.Tensor) -> torch.Tensor:
    """The model's LM head on hidden states (..., H) -> (..., V), as its own forward applies it."""
    logits = model.get_output_embeddings()(h)
    cap = getattr(model.config, "final_logit_softcapping", None)  # Gemma 2: tanh capping
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def _chunk(model, h, targets, allowed, temperature: float, with_entropy: bool):
    """(C, H) hidden states -> (C,) log-probs of `targets` and (C,) entropies (or None)."""
    logits = output_logits(model, h).float() / temperature  # (C, V)
    if allowed is not None:
        logits = logits + allowed_bias(allowed.to(logits.device), logits.shape[-1])
    logp_all = F.log_softmax(logits, dim=-1)  # (C, V)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (C,)
    if not with_entropy:
        return logp, None
    p = logp_all.exp()
    return logp, -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)  # 0 * log 0 := 0


def agent_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                   cols: torch.Tensor, temperature: float = 1.0, allowed: torch.Tensor | None = None,
                   with_entropy: bool = False, chunk_size: int | None = None):
    """Log-probs (and entropies) of the tokens at (rows, cols), each given the tokens before it.

    input_ids, attention_mask: (B, T); rows, cols: (N,) with cols >= 1; allowed: (N, K) ids allowed
    at each of those positions, -1 padded (all -1: not masked), or None. Returns (N,) log-probs and
    (N,) entropies or None. Call it under the autocast you train with (Accelerate's `autocast()`):
    the decoder and the head are called directly, not through the model's wrapped forward.
    """
    device = next(model.parameters()).device
    ids, attn = input_ids.to(device), attention_mask.to(device)
    rows, cols = rows.to(device), cols.to(device)
    h = model.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).last_hidden_state
    h = h[rows, cols - 1]  # (N, H): the state that predicts each agent token
    targets = ids[rows, cols]  # (N,)
    C = chunk_size or default_chunk(model.config.vocab_size)
    grad = torch.is_grad_enabled() and h.requires_grad
    logps, ents = [], []
    for s in range(0, len(targets), C):
        args = (model, h[s:s + C], targets[s:s + C], None if allowed is None else allowed[s:s + C],
                temperature, with_entropy)
        # checkpoint: keep only h for backward and recompute this chunk's (C, V) logits there
        lp, ent = checkpoint(_chunk, *args, use_reentrant=False) if grad else _chunk(*args)
        logps.append(lp)
        ents.append(ent)
    if not logps:  # no agent token at all: keep the graph (the LM head too: DDP waits for its gradient)
        zero = h.sum(-1).float() * 0.0 + output_logits(model, h[:0]).sum() * 0.0
        return zero, zero if with_entropy else None
    logp = torch.cat(logps)
    return logp, torch.cat(ents) if with_entropy else None


class LogprobForward(torch.nn.Module):
    """The policy with `agent_logprobs` as its forward: what train.py hands to Accelerate. DDP
    starts its gradient averaging, and FSDP gathers its sharded weights, only in the wrapped
    module's forward, so the whole training computation (decoder, then the LM head on the agent
    positions) must run inside one; `.model` stays the plain model (generation, saving)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, rows, cols, temperature=1.0, allowed=None, with_entropy=False):
        return agent_logprobs(self.model, input_ids, attention_mask, rows, cols, temperature, allowed, with_entropy)


def full_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
                  allowed_mask: torch.Tensor | None = None, with_entropy: bool = False):
    """The plain computation: (B, T) log-probs of every token (position 0 holds 0) and entropies,
    from the full (B, T, V) logits; `allowed_mask` is (B, T, V) bool (True: may be sampled).
    The reference for the parity tests and the "before" of benchmarks/update_memory.py."""
    device = next(model.parameters()).device
    ids, attn = input_ids.to(device), attention_mask.to(device)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits[:, :-1].float()
    logits = logits / temperature  # (B, T-1, V): logits[t] predicts token t+1
    if allowed_mask is not None:
        logits = logits.masked_fill(~allowed_mask[:, 1:].to(device), float("-inf"))
    logp_all = F.log_softmax(logits, dim=-1)
    logp = F.pad(logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1), (1, 0))  # (B, T)
    if not with_entropy:
        return logp, None
    p = logp_all.exp()
    ent = -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)  # (B, T-1)
    return logp, F.pad(ent, (1, 0))
