"""The KV cache of a batch of token streams: what a turn's forward encodes, and what it keeps.

Where it sits: `agent.generate()` calls `prefill()` for each turn's prompt tokens and decodes from
the `Encoded` state it returns, one token a step (`Decoder`); in whole-conversation mode
`agent.rollout()` hands that state back to the next turn (`Encoded.select` drops the episodes that
ended, `Encoded.compact` the holes), so that the next turn encodes only the tokens each stream
gained. Nothing here samples or knows an environment.

Four things keep the prefill's cost (per token, padding included) near the real tokens':
1. a prompt repeated in the batch (a GRPO group's first turn) is encoded once, its cache rows copied;
2. new tokens of very different lengths go in buckets of similar length (BUCKET_SPREAD), each on
   its own rows' share of the cache, the buckets' caches joined again, left-padded, for decoding;
3. a kept cache is compacted before each turn: each row's real columns right-aligned, so it is as
   wide as its longest stream, not as the sum of every turn's longest observation and reply;
4. the last layer runs its queries, attention and MLP at the last column only, where the next
   token's logits are read (`last_column_only`); the other columns need only its keys and values.
Position ids are always given explicitly, so where a token sits in the cache changes nothing the
model computes (tests/test_kv_cache.py checks every path against encoding each stream afresh).

Decoding appends one column per step. transformers' cache does it by `torch.cat`, copying every
layer's whole cache each step (16 SmolLM2 streams, 760 columns: 560 MB of copies per step);
`reserve()` gives each layer room for the reply instead, and a step writes its column in place;
`prefill(room=...)` makes that room as it joins the buckets (`join`), each row's keys and values
copied once (the copies were a tenth of the demo's rollout time when made one after another).
And a row whose reply has ended stops costing: `Decoder` sets finished rows aside and `join()`s them
back when the turn's decoding is done. A decode step's attention (`decode_attention`) reads the
cache once, at the bandwidth the CPU has, where torch's SDPA kernel for one query spends 2-3x that.
"""

import contextlib
import copy
import functools
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


@dataclass
class Encoded:
    """A batch of token streams whose first `n[i]` tokens are in a KV cache, for the next turn to
    extend instead of encoding the stream again (whole-conversation mode). A column of `attn` is 0
    where it holds no stream token: left padding, and the tokens fed after a row had finished
    while other rows went on (each row's own tokens sit in order; position ids are given
    explicitly, so such holes change nothing the model computes for the real tokens)."""

    cache: object  # transformers' DynamicCache: per layer (B, heads, T, head_dim)
    attn: torch.Tensor  # (B, T)
    n: list[int]  # per row: how many of its stream's tokens the cache holds

    def select(self, rows: list[int]) -> "Encoded":
        """The rows `rows`, in that order (episodes that ended are dropped)."""
        idx = torch.tensor(rows, device=self.attn.device)
        self.cache.batch_select_indices(idx)
        return Encoded(self.cache, self.attn[idx], [self.n[i] for i in rows])

    def compact(self) -> "Encoded":
        """The same streams without their holes: each row's cached tokens moved, in order, to the
        right end of a cache as wide as the longest row (left padding only). Without this a
        cache grows by every turn's longest observation and longest reply, whatever each row's
        own were, and every later forward attends over the padding (32 BabyAI episodes, turn 5:
        1131 columns for at most 867 tokens in any row; compacted, 912). Moving a cached key
        changes nothing: its position is already rotated into it, and the mask says which
        columns count."""
        B, T = self.attn.shape
        count = self.attn.sum(-1)  # (B,) real columns per row
        width = int(count.max()) if B else 0
        if width == T or not self.full_width():
            return self  # nothing to drop; or a sliding-window layer, which keeps only its last columns
        b, src = self.attn.nonzero(as_tuple=True)  # row-major: each row's columns in order
        dst = (width - count)[b] + (self.attn.cumsum(-1) - 1)[b, src]
        attn = torch.zeros((B, width), dtype=self.attn.dtype, device=self.attn.device)
        attn[b, dst] = 1
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                x = getattr(layer, name)  # (B, heads, T, head_dim)
                out = x.new_zeros((B, x.shape[1], width, x.shape[3]))
                out[b, :, dst] = x[b, :, src]
                setattr(layer, name, out)
        return Encoded(self.cache, attn, self.n)

    def rows(self, rows: list[int]) -> "Encoded":
        """A compacted copy of the rows `rows`, in that order; this state is left as it is."""
        idx = torch.tensor(rows, device=self.attn.device)
        return Encoded(cache_rows(self.cache, idx), self.attn[idx], [self.n[i] for i in rows]).compact()

    def full_width(self) -> bool:
        """Whether every layer holds every column (not a sliding window's last ones only)."""
        return all(layer.keys.shape[-2] == self.attn.shape[1] for layer in self.cache.layers)


class ReservedLayer(DynamicLayer):
    """A cache layer with room for `extra` more columns: `update` writes the new keys and values
    into the room, in place, and the layer's `keys`/`values` are views of the columns filled so
    far (the same numbers `torch.cat` would give). Out of room, or after anything replaced its
    tensors (select, compact), it falls back to DynamicLayer's concatenation."""

    def __init__(self, layer: DynamicLayer, extra: int, room: list[torch.Tensor] | None = None):
        """`room`: the keys' and values' buffers, already holding the columns (`join` fills them);
        None: copy `layer`'s columns into new ones."""
        super().__init__()
        self.__dict__.update(layer.__dict__)
        if room is None:
            B, H, T, D = layer.keys.shape
            # zeros: `decode_attention` reads the whole room, the unfilled columns masked (0 x 0, not NaN)
            room = [x.new_zeros((B, H, T + extra, D)) for x in (layer.keys, layer.values)]
            for buf, x in zip(room, (layer.keys, layer.values)):
                buf[:, :, :T] = x
        self.room = room
        T = room[0].shape[2] - extra
        self.keys, self.values = (buf[:, :, :T] for buf in room)

    def update(self, key_states, value_states, *args, **kwargs):
        k_room, v_room = self.room
        T, k = self.keys.shape[-2], key_states.shape[-2]
        if (
            self.keys.data_ptr() != k_room.data_ptr()
            or T + k > k_room.shape[-2]
            or self.keys.shape[0] != k_room.shape[0]
        ):
            return super().update(key_states, value_states, *args, **kwargs)
        k_room[:, :, T : T + k] = key_states
        v_room[:, :, T : T + k] = value_states
        self.keys, self.values = k_room[:, :, : T + k], v_room[:, :, : T + k]
        return self.keys, self.values


def reserve(cache, extra: int) -> None:
    """Give every full-width layer of `cache` room for `extra` more columns (see ReservedLayer)."""
    cache.layers = [
        ReservedLayer(layer, extra) if type(layer) is DynamicLayer and layer.is_initialized else layer
        for layer in cache.layers
    ]


def release(cache) -> None:
    """Back to plain layers holding the filled columns (views of the room: at most `extra`
    columns more stay allocated until the next select or compact replaces them)."""
    for i, layer in enumerate(cache.layers):
        if isinstance(layer, ReservedLayer):
            plain = DynamicLayer()
            plain.__dict__.update({k: v for k, v in layer.__dict__.items() if k != "room"})
            cache.layers[i] = plain


def cache_rows(cache, idx: torch.Tensor):
    """A new cache holding rows `idx` of `cache` (repeats allowed), which is left as it is; under
    autograd the copies stay differentiable (logprobs.agent_states trains through them)."""
    out = copy.copy(cache)
    out.layers = [copy.copy(layer) for layer in cache.layers]
    for layer in out.layers:
        layer.keys, layer.values = layer.keys[idx], layer.values[idx]
    return out


def encode(model, news: list[list[int]], starts: list[int], past: Encoded | None, pad: int, device):
    """One forward over each row's new tokens (right-aligned, so that every row's last token is
    in the last column), appended to `past`. Returns the next-token logits (B, V) and the state."""
    B, W = len(news), max(len(x) for x in news)
    ids = torch.full((B, W), pad, dtype=torch.long)
    new_attn = torch.zeros((B, W), dtype=torch.long)
    pos = torch.zeros((B, W), dtype=torch.long)
    for i, (x, s) in enumerate(zip(news, starts)):
        ids[i, W - len(x) :] = torch.tensor(x)
        new_attn[i, W - len(x) :] = 1
        pos[i, W - len(x) :] = torch.arange(s, s + len(x))
    new_attn = new_attn.to(device)
    attn = new_attn if past is None else torch.cat([past.attn, new_attn], dim=1)
    with last_column_only(model):  # only the last column's logits are read; the rest, through the cache
        out = model(
            input_ids=ids.to(device),
            attention_mask=attn,
            position_ids=pos.to(device),
            cache=past.cache if past is not None else None,
            use_cache=True,
            logits_to_keep=1,
        )
    return out.logits[:, -1, :], Encoded(out.cache, attn, [s + len(x) for s, x in zip(starts, news)])


LAST_COLUMN_LAYERS = ("LlamaDecoderLayer", "Qwen2DecoderLayer")  # the layers `last_column_only` knows
LAST_COLUMN_ATTENTION = ("sdpa", "eager", "decode")  # the attentions whose 4D mask it can cut to a row


@contextlib.contextmanager
def last_column_only(model):
    """Within it, `model`'s last decoder layer computes its keys and values at every column of the
    forward, and its output at the last column only. A prompt's last-layer outputs are read at one
    column: the rollout's prefill reads the next token's logits there (`encode`), the update the
    state that predicts the first reply token (logprobs.prompt_pass); every later token reads the
    prompt through the cache, that is through the layer's keys and values. So the last layer's
    queries, attention, output projection and MLP run on one column instead of every one: for the
    tiny policy (2 layers; prompts of 58-220 tokens, replies of a few) close to half of each
    prompt's arithmetic, forward and backward. The keys, values and last column are the plain
    forward's (tests/test_kv_cache.py). Other models (another layer, a sliding window, an attention
    whose mask is not a 4D tensor, a decoder that keeps its blocks elsewhere than `.layers`: GPT-2,
    Falcon, Bloom...) run their plain forward (tests/test_architectures.py)."""
    layers = getattr(model.get_decoder(), "layers", None)  # GPT-2's blocks are `.h`, MPT's `.blocks`
    layer = layers[-1] if layers else None
    known = type(layer).__name__ in LAST_COLUMN_LAYERS and not sliding(model)
    if not known or model.config._attn_implementation not in LAST_COLUMN_ATTENTION:
        yield
        return
    layer.forward = functools.partial(_last_column_forward, layer)
    try:
        yield
    finally:
        del layer.forward  # the class's forward again


def _last_column_forward(
    layer, hidden_states, attention_mask=None, position_embeddings=None, cache=None, **_
):
    """A Llama/Qwen2 decoder layer (transformers' LlamaDecoderLayer and its attention, the same
    steps), its queries and everything after them at the last column only: (B, T, H) -> (B, 1, H).
    (`_`: the decoder's other arguments, position ids and use_cache, which the cache and the
    rotary embeddings already carry.)"""
    attn = layer.self_attn
    B = hidden_states.shape[0]
    x = layer.input_layernorm(hidden_states)

    def heads(proj, x):  # (B, t, H) -> (B, heads, t, head_dim)
        return proj(x).view(B, x.shape[1], -1, attn.head_dim).transpose(1, 2)

    modeling = sys.modules[type(attn).__module__]

    def rotate(x, cos, sin):  # (B, heads, t, head_dim): apply_rotary_pos_emb's formula, one tensor
        return x * cos.unsqueeze(1) + modeling.rotate_half(x) * sin.unsqueeze(1)

    cos, sin = position_embeddings  # (B, T, head_dim)
    q = rotate(heads(attn.q_proj, x[:, -1:]), cos[:, -1:], sin[:, -1:])
    k, v = rotate(heads(attn.k_proj, x), cos, sin), heads(attn.v_proj, x)
    if cache is not None:
        k, v = cache.update(k, v, attn.layer_idx)
    mask = None if attention_mask is None else attention_mask[:, :, -1:]  # the last query's row
    eager = modeling.eager_attention_forward
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, eager)
    out, _ = attend(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling)  # (B, 1, heads, head_dim)
    h = hidden_states[:, -1:] + attn.o_proj(out.reshape(B, 1, -1))
    return h + layer.mlp(layer.post_attention_layernorm(h))


BUCKET_SPREAD = 1.25  # a prefill bucket's longest prompt is at most this times its shortest


def sliding(model) -> bool:
    """Whether some layer of `model` attends to a sliding window (Mistral, Gemma 2/3): its cache
    keeps only the last window's columns, so caches of different widths cannot be joined by
    padding, nor rows of one copied under a longer mask."""
    c = model.config
    types = getattr(c, "layer_types", None)
    return "sliding_attention" in types if types else getattr(c, "sliding_window", None) is not None


def length_buckets(lengths: list[int]) -> list[list[int]]:
    """The indices of `lengths`, shortest first, cut into buckets whose longest is at most
    BUCKET_SPREAD times their shortest."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    buckets, cur = [], [order[0]]
    for i in order[1:]:
        if lengths[i] > BUCKET_SPREAD * lengths[cur[0]]:
            buckets.append(cur)
            cur = []
        cur.append(i)
    buckets.append(cur)
    return buckets


def prefill(model, news, starts, past, pad, device, room: int = 0):
    """`encode`, but fresh prompts are encoded once each (GRPO's group of rollouts of one task
    starts from one prompt: its cache rows are copies), and new tokens of very different lengths
    (fresh prompts, or a turn's observations after a kept cache) in buckets of similar length:
    padding to the longest would otherwise cost up to 2x the tokens (the prefill's cost is per
    token). The buckets' caches are then joined, each left-padded with masked zero columns, into
    one batch for decoding, with `room` more columns for the reply (`join`). Row order is kept."""
    if len(news) == 1 or sliding(model) or (past is not None and not past.full_width()):
        return encode(model, news, starts, past, pad, device)
    copies: dict[object, list[int]] = {}  # each row encoded -> the rows it stands for
    for i, x in enumerate(news):
        copies.setdefault(tuple(x) if past is None else i, []).append(i)
    places = list(copies.values())
    heads = [rows[0] for rows in places]
    buckets = length_buckets([len(news[i]) for i in heads])
    if len(buckets) == 1 and len(heads) == len(news):
        return encode(model, news, starts, past, pad, device)
    parts = []
    for b in buckets:
        rows = [heads[k] for k in b]
        logits, state = encode(
            model,
            [news[i] for i in rows],
            [starts[i] for i in rows],
            past.rows(rows) if past is not None else None,
            pad,
            device,
        )
        parts.append(([places[k] for k in b], logits, state))
    logits = parts[0][1].new_empty((len(news), parts[0][1].shape[-1]))  # (B, V)
    for at, lg, _ in parts:
        d, j = _places(at, device)
        logits[d] = lg[j]
    return logits, join([(at, st) for at, _, st in parts], room)


def _places(at: list, device) -> tuple[torch.Tensor, torch.Tensor]:
    """A part's rows and where `join` puts them (`at`: per row, its place or a list of places):
    (d, j), the places and, for each, the part's row copied there."""
    lists = [p if isinstance(p, list) else [p] for p in at]
    d = torch.tensor([p for ps in lists for p in ps], device=device)
    j = torch.tensor([k for k, ps in enumerate(lists) for _ in ps], device=device)
    return d, j


def join(parts: list[tuple[list, Encoded]], room: int = 0) -> Encoded:
    """One state of the rows of `parts`: (each row's place in the joined batch, or the list of
    places it is copied to; the part's state), the places together 0..B-1. Each row is
    right-aligned to the widest part (left-padded with masked zero columns), and with `room` every
    layer gets room for that many more columns (`ReservedLayer`): one copy of each row's keys and
    values, where padding, concatenating, reordering, copying repeated rows and then reserving
    would copy them five times. The parts' caches are consumed: the joined one is the last part's
    cache object, refilled."""
    T = max(st.attn.shape[1] for _, st in parts)
    places = [_places(at, st.attn.device) for at, st in parts]
    B = sum(len(d) for d, _ in places)
    attn = parts[0][1].attn.new_zeros((B, T))
    n = [0] * B
    for (_, st), (d, j) in zip(parts, places):
        attn[d, T - st.attn.shape[1] :] = st.attn[j]
        for p, k in zip(d.tolist(), j.tolist()):
            n[p] = st.n[k]
    cache = parts[-1][1].cache
    for li, layer in enumerate(cache.layers):
        bufs = []
        for name in ("keys", "values"):
            xs = [getattr(st.cache.layers[li], name) for _, st in parts]
            _, H, _, D = xs[0].shape
            buf = xs[0].new_zeros((B, H, T + room, D))  # zeros: the padding and the room are read, masked
            for x, (d, j) in zip(xs, places):  # (a part whose rows go once each needs no gather)
                buf[:, :, T - x.shape[2] : T][d] = x if len(d) == len(x) else x[j]
            bufs.append(buf)
        if room:
            cache.layers[li] = ReservedLayer(layer, room, bufs)
        else:
            layer.keys, layer.values = bufs
    return Encoded(cache, attn, n)


class Decoder:
    """The one-token forwards of `generate`: each call feeds every row's last sampled token at its
    stream's next position and returns the next-token logits (B, V). `preallocate`: the cache
    gets room for `steps` more columns up front (`reserve`), so that a step writes its
    column in place instead of copying every layer's cache (the numbers are the same).
    Rows that finished stop costing: once a quarter of the rows still decoded have finished
    (`DROP_SHARE`), their state is set aside and the forwards go on without them (their logits
    are zeros), unless fewer than `DROP_MIN_LEFT` steps can remain: setting rows aside copies the
    others' cache twice (select, then room again), which a few more one-token steps over the
    finished rows cost less than (the tiny policy's masked replies, at most 8 tokens: 42 ms less
    per demo rollout without it, the same samples). `close()` joins the rows again, in order.
    With `keep=False` (no later turn reads the state: one row per turn) rows set aside are let go,
    and `close()` has nothing to join. transformers' `generate` decodes every row until the
    longest reply ends, however early the others did."""

    DROP_SHARE = 0.25
    DROP_MIN_LEFT = 16

    def __init__(self, model, state: Encoded, steps: int, preallocate: bool = True, keep: bool = True):
        self.model, self.state, self.device, self.keep = model, state, state.attn.device, keep
        self.B, self.left = len(state.n), steps
        self.rows = list(range(self.B))  # the rows the forwards still run, in the batch's order
        self.parked: list[tuple[list[int], Encoded]] = []  # (rows, their state) of finished ones
        preallocate = preallocate and state.full_width()
        if preallocate and steps > 0:
            reserve(state.cache, steps)
        self.drops = preallocate and not sliding(model)  # a window's caches cannot be joined

    def __call__(self, nxt: torch.Tensor, was_live: list[int]) -> torch.Tensor:
        done = [j for j, i in enumerate(self.rows) if not was_live[i]]
        worth = len(done) >= self.DROP_SHARE * len(self.rows) and self.left >= self.DROP_MIN_LEFT
        if self.drops and done and worth:
            self._drop(done)
        state, rows = self.state, torch.tensor(self.rows, device=self.device)
        # The token each row sampled last; a row that finished before it fed garbage, masked out.
        live = [was_live[i] for i in self.rows]
        real = torch.tensor(live, dtype=torch.long, device=self.device)
        state.attn = torch.cat([state.attn, real.unsqueeze(-1)], dim=1)
        pos = torch.tensor(state.n, device=self.device).unsqueeze(-1)
        out = self.model(
            input_ids=nxt[rows].unsqueeze(-1),
            attention_mask=state.attn,
            position_ids=pos,
            cache=state.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        state.n = [k + r for k, r in zip(state.n, live)]
        self.left -= 1
        logits = out.logits[:, -1, :]
        if len(self.rows) == self.B:
            return logits
        full = logits.new_zeros((self.B, logits.shape[-1]))
        full[rows] = logits
        return full

    def _drop(self, done: list[int]) -> None:
        """Set the rows at places `done` of the decoded batch aside; go on with the others."""
        gone = set(done)
        keep = [j for j in range(len(self.rows)) if j not in gone]
        release(self.state.cache)
        if self.keep:
            self.parked.append(([self.rows[j] for j in done], self.state.rows(done)))
        self.state, self.rows = self.state.rows(keep), [self.rows[j] for j in keep]
        if self.left > 0:
            reserve(self.state.cache, self.left)

    def close(self) -> Encoded | None:
        """The state of all B rows, in order: each stream's context and reply, as in the cache;
        None when made with `keep=False` (the finished rows' caches were dropped, not set aside)."""
        release(self.state.cache)
        if not self.keep:
            return None
        if not self.parked:
            return self.state
        return join(self.parked + [(self.rows, self.state)])


def decode_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """A one-token step's attention as two batched matmuls: each key/value head's group of query
    heads against the cached columns, softmax in float32. On a CPU, torch's SDPA kernel for one
    query (`_scaled_dot_product_flash_attention_for_cpu`) took 2.4-2.9 ms a layer at 16 rows x 760
    columns in bf16, a third of a SmolLM2 decode step, where the matmuls take under 1 ms
    (docs/studies/speed_smollm2.md). A reserved cache's keys and values are views of its room
    (`ReservedLayer`), which a batched matmul would copy whole (its batch stride is the room's):
    the matmuls read the whole room instead, its unfilled columns (zeros) masked out.
    A prompt's forward and training go to SDPA; a model whose attention has sinks or a soft cap
    (gpt-oss, Gemma 2), which SDPA refuses, to its own eager attention, the mask made additive.
    transformers calls it by the name "decode" (`use_decode_attention`)."""
    if kwargs.get("s_aux") is not None or kwargs.get("softcap"):
        eager = sys.modules[type(module).__module__].eager_attention_forward
        if attention_mask is not None and attention_mask.dtype == torch.bool:  # SDPA's: True where it counts
            block = torch.finfo(query.dtype).min
            attention_mask = torch.zeros_like(attention_mask, dtype=query.dtype).masked_fill(
                ~attention_mask, block
            )
        return eager(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    if query.shape[2] != 1 or module.training:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    B, H, _, D = query.shape
    T = key.shape[2]
    mask = attention_mask
    if mask is not None and mask.dtype != torch.bool:  # additive: 0 where a column counts
        mask = mask == 0
    if in_room(key) and in_room(value):
        key, value = key._base, value._base
        mask = torch.ones((B, 1, 1, T), dtype=torch.bool, device=key.device) if mask is None else mask
        mask = F.pad(mask, (0, key.shape[2] - T), value=False)
        T = key.shape[2]
    KV = key.shape[1]
    q = query.reshape(B * KV, H // KV, D)  # each key/value head's group of query heads
    scores = torch.bmm(q, key.reshape(B * KV, T, D).transpose(1, 2))
    scores = scores.float().view(B, KV, H // KV, T) * (scaling or D**-0.5)
    if mask is not None:  # (B, 1, 1, T): True where a column counts
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(value.dtype).view(B * KV, H // KV, T)
    out = torch.bmm(probs, value.reshape(B * KV, T, D))
    return out.view(B, H, 1, D).transpose(1, 2), None


def in_room(x: torch.Tensor) -> bool:
    """Whether `x` is the first columns of a contiguous room (`ReservedLayer`'s `keys`/`values`)."""
    room = x._base
    return (
        room is not None
        and room.is_contiguous()
        and room.data_ptr() == x.data_ptr()
        and room.shape[:2] == x.shape[:2]
        and room.shape[3] == x.shape[3]
    )


def use_decode_attention(model) -> None:
    """Run `model`'s attention through `decode_attention` (its masks as SDPA's)."""
    AttentionInterface.register("decode", decode_attention)
    AttentionMaskInterface.register("decode", sdpa_mask)
    model.set_attn_implementation("decode")
