"""Log-probs and entropy of the agent's tokens: the one training forward pass, in bounded memory.

Where it sits: `train.py` calls it for the policy in every update and for the frozen reference
model once per batch; PPO's critic reads its values at the same positions (`predicting_positions`).
It needs the token ids, the attention mask, WHERE the agent's tokens are, and (when sampling was
restricted to the available actions) which ids were allowed there. Nothing here knows an algorithm.

What is computed. For every agent token x_t (loss mask 1), under the distribution it was sampled
from (temperature T, and the action mask when there was one):

    log pi(x_t | x_<t) = log_softmax(z_{t-1} / T + mask_t)[x_t]        z = logits, (V,) per position
    (T = 0 is greedy sampling: the rollout picked the argmax and stored its log-prob at T = 1, so
    the update reads T = 0 as 1 too, never as a division by 0; `agent.generate`)
    H_t = - sum_v p_v log p_v                                          (0 log 0 := 0)

Why not just `model(...).logits`? That is a (B, T, V) float tensor: with Qwen2.5's vocabulary
(V = 151,936), a minibatch of 8 trajectories of 8,192 tokens is 40 GB per copy, and a log-softmax,
its exp and the entropy's product each add one. Here instead:

    1. the transformer runs once:               h = decoder(x)              (B, T, H)
    2. keep the positions that predict an agent token: h[b, t-1]            (N, H), N agent tokens
    3. the LM head, log-softmax, gather and entropy run on chunks of C of those positions,
       (C, V) at a time. Under autograd each chunk is checkpointed: backward recomputes its logits
       instead of keeping them, so the peak is a few (C, V) tensors, never (N, V) or (B, T, V).

Rows that start with the same prompt (a GRPO group's first observation) run it once in step 1
(`agent_states`): its keys and values are copied to each row, and only the rest of each row runs.
Rows may be padded on the left or the right. Under FSDP that path is off: it runs the decoder once
or twice depending on the data, and every FSDP forward is a collective that all processes must
issue alike (a process whose rows share no prompt would wait forever for the others' second one).

Precision. Call it under the autocast of the run (`--mixed-precision`); `train.py` samples under
the same one. The sampler's cached one-token decoding still rounds differently in bf16, which is
why train.py then recomputes pi_old with this forward (docs/reproduce.md, "Precision"). Dropout is off
(`disable_dropout`): the update runs in train mode, the rollout in eval mode, and both must score
the same distribution.

Observation and template tokens never reach the LM head at all. With action masking the mask of a
position is rebuilt per chunk from the ids allowed there, stored as a small (..., K) id list padded
with -1 (K = the most ids allowed at any one position), never as a (B, T, V) boolean.

`full_logprobs` is the plain computation over every position, kept as the reference for the parity
tests and as the "before" of `benchmarks/update_memory.py`. The plain computation a student reads is
in the plain reading path, plain/one_step.py (`one_step.token_logprobs`, the same lines with the
action mask as a (B, T, V) boolean); tests/test_plain_step.py holds it equal to both.
"""

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from machinery.kv_cache import cache_rows, last_column_only, length_buckets, sliding

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
    logits = output_logits(model, h).float() / (temperature or 1.0)  # (C, V); 0: greedy, see `agent.generate`
    if allowed is not None:
        logits = logits + allowed_bias(allowed.to(logits.device), logits.shape[-1])
    logp_all = F.log_softmax(logits, dim=-1)  # (C, V)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (C,)
    if not with_entropy:
        return logp, None
    p = logp_all.exp()
    return logp, -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)  # 0 * log 0 := 0


def agent_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    temperature: float = 1.0,
    allowed: torch.Tensor | None = None,
    with_entropy: bool = False,
    chunk_size: int | None = None,
):
    """Log-probs (and entropies) of the tokens at (rows, cols), each given the tokens before it.

    input_ids, attention_mask: (B, T); rows, cols: (N,) with cols >= 1; allowed: (N, K) ids allowed
    at each of those positions, -1 padded (all -1: not masked), or None. Returns (N,) log-probs and
    (N,) entropies or None. Call it under the autocast you train with (Accelerate's `autocast()`):
    the decoder and the head are called directly, not through the model's wrapped forward.
    """
    device = next(model.parameters()).device
    ids, attn = input_ids.to(device), attention_mask.to(device)
    rows, cols = rows.to(device), cols.to(device)
    h = agent_states(model, ids, attn, rows, cols)  # (N, H): the state that predicts each agent token
    targets = ids[rows, cols]  # (N,)
    C = chunk_size or default_chunk(model.config.vocab_size)
    grad = torch.is_grad_enabled() and h.requires_grad
    logps, ents = [], []
    for s in range(0, len(targets), C):
        args = (
            model,
            h[s : s + C],
            targets[s : s + C],
            None if allowed is None else allowed[s : s + C],
            temperature,
            with_entropy,
        )
        # checkpoint: keep only h for backward and recompute this chunk's (C, V) logits there
        lp, ent = checkpoint(_chunk, *args, use_reentrant=False) if grad else _chunk(*args)
        logps.append(lp)
        ents.append(ent)
    if not logps:  # no agent token at all: keep the graph (the LM head too: DDP waits for its gradient)
        zero = h.sum(-1).float() * 0.0 + output_logits(model, h[:0]).sum() * 0.0
        return zero, zero if with_entropy else None
    logp = torch.cat(logps)
    return logp, torch.cat(ents) if with_entropy else None


def disable_dropout(model) -> None:
    """Dropout off everywhere in `model` (nn.Dropout modules, and the float `*dropout*` rates that
    attention layers read themselves when training), as TRL's disable_dropout does: the update
    runs the policy in train mode (gradient checkpointing needs it) and must compute the same
    log-probs as the rollout's eval mode, or the first ratio is not 1."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for name, value in list(vars(m).items()):
            if "dropout" in name and isinstance(value, float):
                setattr(m, name, 0.0)


def fp32_head(model) -> None:
    """The LM head in float32 even under bf16 autocast, for the sampler and the update alike
    (`config.load_agent` calls it). In bf16 a logit of magnitude 30 is rounded to 1/8, so log-probs
    of the same tokens differed by up to 0.27 between SmolLM2's sampler and training forward, and
    by 0.21 between two training forwards of the same rows in different micro-batches
    (benchmarks/gpu_check.py); MiniMax-M1 (2025) traced its training/inference mismatch to the same
    head. The head's cost is one (H, V) matmul per sampled token: small next to the blocks."""
    head = model.get_output_embeddings()
    if head is None or getattr(head, "fp32_head", False):
        return
    head.float()

    def forward(x):
        with torch.autocast(x.device.type, enabled=False):
            return F.linear(x.float(), head.weight.float(), None if head.bias is None else head.bias.float())

    head.forward, head.fp32_head = forward, True


def sharded(model) -> bool:
    """Whether FSDP (1 or 2) wraps any part of `model`: then each wrapped forward all-gathers."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    kinds = (FSDP, getattr(torch.distributed.fsdp, "FSDPModule", FSDP))
    return any(isinstance(m, kinds) for m in model.modules())


def real_span(attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(B, T) mask -> (B,) first real column, (B,) one past the last, and whether every row's real
    tokens are contiguous (left padding, right padding or none; no holes)."""
    real = attn > 0
    start = real.int().argmax(-1)  # (B,) the first 1 (0 for an empty row)
    stop = attn.shape[1] - real.flip(-1).int().argmax(-1)  # (B,)
    contiguous = bool(torch.all((stop - start == real.sum(-1)) | ~real.any(-1)))
    return start, stop, contiguous


def one_pass_only(model) -> bool:
    """Whether `model` must run every row whole: under FSDP (a data-dependent number of collectives
    would hang), with a sliding window (its cache keeps only the window), or under gradient
    checkpointing (which runs without a cache)."""
    checkpointing = model.training and getattr(model, "is_activation_checkpointing", False)
    return sharded(model) or sliding(model) or checkpointing


def prompt_pass(decoder, prompts: dict[tuple, int], ids: torch.Tensor, attn: torch.Tensor):
    """The distinct prompts (token tuple -> its index u), left-padded to (U, P), run once with a
    cache: the decoder's output at the last column (each prompt's last token: it predicts the
    first reply token; the rest read the prompt through the cache) and the (U, P) attention mask."""
    U, P = len(prompts), max(map(len, prompts))
    p_ids = torch.zeros((U, P), dtype=ids.dtype, device=ids.device)
    p_attn = torch.zeros((U, P), dtype=attn.dtype, device=ids.device)
    for x, u in prompts.items():
        p_ids[u, P - len(x) :] = torch.tensor(x, device=ids.device)
        p_attn[u, P - len(x) :] = 1
    with last_column_only(decoder):
        out = decoder(
            input_ids=p_ids, attention_mask=p_attn, position_ids=position_ids(p_attn), use_cache=True
        )
    return out, p_attn


def agent_states(
    model, ids: torch.Tensor, attn: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
) -> torch.Tensor:
    """(N, H) decoder outputs at (rows, cols - 1), the states that predict the agent tokens.

    Rows whose prompts are the same (the tokens before a row's first agent token: a GRPO group's
    first observation, or one observation that several rollouts answered, half the tiny demo's
    tokens) run that prompt once. Its keys and values are then copied to each of its rows, and only
    the rest of each row runs, on top of them (`shared_prompt_states`). The distinct prompts go in
    buckets of similar length (kv_cache.length_buckets), each bucket's own passes padded to its
    longest prompt only: padded to the longest of all, the tiny demo's prompts (58 to 220 tokens)
    cost 1.7x their real tokens.

    A row's prompt and rest are read between its first and last real column, so left padding
    (the tokenizers' side for generation) works as right padding does. The same numbers as one
    pass over every row (tests/test_logprobs.py, gradients included: they flow back through the
    copies into the prompt's pass). One pass when no prompt repeats, under gradient checkpointing
    (which runs without a cache), under FSDP (a data-dependent number of collectives would hang),
    for a sliding-window model (its cache keeps only the window) and for a mask with holes.
    """
    decoder = model.get_decoder()
    first = torch.full((ids.shape[0],), ids.shape[1], device=ids.device).scatter_reduce(0, rows, cols, "amin")
    start, stop, contiguous = real_span(attn)
    live = rows.unique().tolist()  # the rows with agent tokens, in order
    prompts: dict[tuple, int] = {}
    which = [prompts.setdefault(tuple(ids[b, start[b] : first[b]].tolist()), len(prompts)) for b in live]
    if len(prompts) == len(live) or not contiguous or () in prompts or one_pass_only(model):
        h = decoder(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).last_hidden_state
        return h[rows, cols - 1]
    texts, spans = list(prompts), (start, first, stop)  # texts: u -> its tokens
    states, order = [], []
    for bucket in length_buckets([len(x) for x in texts]):
        local = {u: k for k, u in enumerate(bucket)}  # this bucket's prompts, numbered from 0
        mine = [(b, local[u]) for b, u in zip(live, which) if u in local]
        picked = torch.isin(rows, torch.tensor([b for b, _ in mine], device=ids.device)).nonzero().squeeze(-1)
        own = {texts[u]: k for u, k in local.items()}
        states.append(shared_prompt_states(decoder, ids, attn, spans, own, mine, rows[picked], cols[picked]))
        order.append(picked)
    order_t = torch.cat(order)
    back = torch.empty_like(order_t)
    back[order_t] = torch.arange(len(order_t), device=ids.device)
    return torch.cat(states)[back]  # (N, H) in the order of (rows, cols)


def shared_prompt_states(decoder, ids, attn, spans, prompts: dict[tuple, int], mine: list, rows, cols):
    """One bucket of `agent_states`: its distinct prompts (token tuple -> u) run once, then the rest
    of each of its rows (`mine`: (row, u) pairs) on a copy of its prompt's cache:

        prompts  (U, P) left-padded  -> states (U, 1, H) at the last column, cache (U, heads, P, d)
        the rest (R, C) right-padded -> states (R, C, H), attending to cache[which]

    `spans`: each row's first real column, first agent column and one past its last (B,) each.
    Returns the (n, H) states that predict the agent tokens (rows, cols), all in these rows."""
    start, first, stop = spans
    out, p_attn = prompt_pass(decoder, prompts, ids, attn)
    live_t = torch.tensor([b for b, _ in mine], device=ids.device)
    which_t = torch.tensor([u for _, u in mine], device=ids.device)
    cache = cache_rows(out.cache, which_t)  # each row's copy of its prompt's keys and values
    begin, end = first[live_t], stop[live_t]  # (R,) where each row's rest begins and ends
    C = int((end - begin).max())
    col = begin.unsqueeze(-1) + torch.arange(C, device=ids.device)  # (R, C) the rest's columns
    r_attn = (col < end.unsqueeze(-1)).to(attn.dtype)
    r_ids = ids[live_t.unsqueeze(-1), col.clamp(max=ids.shape[1] - 1)] * r_attn
    pos = col - start[live_t].unsqueeze(-1)  # (R, C) positions count from the row's first real token
    h_rest = decoder(
        input_ids=r_ids,
        attention_mask=torch.cat([p_attn[which_t], r_attn], dim=1),
        position_ids=pos,
        cache=cache,
        use_cache=True,
    ).last_hidden_state  # (R, C, H)
    # agent token (b, t) is predicted from column t - 1: the prompt's last state when t is b's
    # first agent column, else the rest's state at t - 1 - first[b]
    at = torch.empty(ids.shape[0], dtype=torch.long, device=ids.device)
    at[live_t] = torch.arange(len(mine), device=ids.device)
    k = at[rows]  # (n,) each agent token's row among `mine`
    j = cols - 1 - first[rows]
    from_prompt = out.last_hidden_state[which_t[k], -1]  # (n, H)
    from_rest = h_rest[k, j.clamp(min=0)]  # (n, H)
    return torch.where((j < 0).unsqueeze(-1), from_prompt, from_rest)


class LogprobForward(torch.nn.Module):
    """The policy with `agent_logprobs` as its forward: what train.py hands to Accelerate. DDP
    starts its gradient averaging, and FSDP gathers its sharded weights, only in the wrapped
    module's forward, so the whole training computation (decoder, then the LM head on the agent
    positions) must run inside one; `.model` stays the plain model (generation, saving)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(
        self, input_ids, attention_mask, rows, cols, temperature=1.0, allowed=None, with_entropy=False
    ):
        return agent_logprobs(
            self.model, input_ids, attention_mask, rows, cols, temperature, allowed, with_entropy
        )


def full_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    allowed_mask: torch.Tensor | None = None,
    with_entropy: bool = False,
):
    """The plain computation: (B, T) log-probs of every token (position 0 holds 0) and entropies,
    from the full (B, T, V) logits; `allowed_mask` is (B, T, V) bool (True: may be sampled).
    The reference for the parity tests and the "before" of benchmarks/update_memory.py; the plain
    reading path's `one_step.token_logprobs` (plain/one_step.py) is this, tests/test_plain_step.py
    shows them equal."""
    device = next(model.parameters()).device
    ids, attn = input_ids.to(device), attention_mask.to(device)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits[:, :-1].float()
    logits = logits / (temperature or 1.0)  # (B, T-1, V): logits[t] predicts token t+1; 0: greedy
    if allowed_mask is not None:
        logits = logits.masked_fill(~allowed_mask[:, 1:].to(device), float("-inf"))
    logp_all = F.log_softmax(logits, dim=-1)
    logp = F.pad(logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1), (1, 0))  # (B, T)
    if not with_entropy:
        return logp, None
    p = logp_all.exp()
    ent = -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)  # (B, T-1)
    return logp, F.pad(ent, (1, 0))
