"""Reusing the KV cache changes no token: the whole-conversation rollout that keeps each episode's
cache across turns conditions on exactly the stored trajectory tokens, so with greedy decoding it
picks the same tokens with the same log-probs as the rollout that encodes every prompt afresh;
and prompts of very different lengths prefilled in length buckets give what each prompt alone
gives. For the tiny policy and for a randomly initialised small Llama (another architecture).
And a prompt's last layer computed at its last column only (`last_column_only`) gives the plain
forward's logits and cache, and leaves a model it does not know to its plain forward. A decode
step of a model whose attention SDPA cannot run (Gemma 2's soft cap, gpt-oss's sinks) gives the
plain forward's logits through the model's own eager attention."""

import contextlib
import sys

import pytest
import torch

import tiny
from agent import chat_ids, generate, rollout
from envs import ENVS, EnvPool


@pytest.fixture(scope="module")
def pool(start_server):
    p = EnvPool(url=start_server("servers.babyai").url, size=8)
    yield p
    p.close()


def tiny_policy(path):
    policy = tiny.load(path, "babyai")
    policy.context_turns, policy.temperature = 0, 0.0  # whole conversation, greedy
    return policy


def llama_policy(path):
    """The tiny policy's tokenizer and chat template on a random Llama (GQA: 2 key/value heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    policy = tiny_policy(path)
    tok = policy.tokenizer
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    policy.model = LlamaForCausalLM(cfg).eval()
    return policy


def both_ways(policy, pool, mask_actions, max_new_tokens, horizon=4):
    policy.mask_actions, policy.max_new_tokens = mask_actions, max_new_tokens
    spec, out = ENVS["babyai"], []
    for reuse in (True, False):
        policy.reuse_cache = reuse
        out.append(rollout(policy, pool, spec, spec.splits["test"][:6], horizon=horizon, batch_size=4))
    return out


@pytest.mark.parametrize("make", [tiny_policy, llama_policy], ids=["tiny-qwen2", "random-llama"])
@pytest.mark.parametrize("mask_actions", [True, False])
def test_the_cached_rollout_gives_the_same_tokens_and_logprobs(tiny_path, pool, make, mask_actions):
    policy = make(tiny_path)
    cached, fresh = both_ways(policy, pool, mask_actions, max_new_tokens=48 if mask_actions else 6)
    turns = 0
    for a, b in zip(cached, fresh):
        assert a.actions == b.actions and not a.error
        [ra], [rb] = a.rows, b.rows
        assert ra.ids == rb.ids and ra.mask == rb.mask and ra.allowed == rb.allowed
        torch.testing.assert_close(torch.tensor(ra.logprobs), torch.tensor(rb.logprobs), atol=1e-4, rtol=0)
        turns += a.turns
    assert turns > len(cached)  # episodes went on past their first turn: the cache was reused


@pytest.mark.parametrize("make", [tiny_policy, llama_policy], ids=["tiny-qwen2", "random-llama"])
def test_bucketed_prefill_equals_each_prompt_alone(tiny_path, make):
    """Prompts (one of them twice) from 1x to over 3x the shortest's length: several prefill buckets, joined
    for decoding."""
    policy = make(tiny_path)
    policy.mask_actions, policy.max_new_tokens = False, 5
    tok = policy.tokenizer
    texts = [
        "turn left",
        "go to the red ball " * 3,
        "You see a grey key 1 step ahead. " * 6,
        "move forward " * 9,
        "turn left",
    ]  # (a repeated prompt is encoded once)
    contexts = [chat_ids(tok, [{"role": "user", "content": t}]) for t in texts]
    assert max(map(len, contexts)) > 3 * min(map(len, contexts))
    ids, lp, _, _, state = generate(policy, contexts)
    for k, c in enumerate(contexts):
        ids1, lp1, _, _, _ = generate(policy, [c])
        assert ids[k] == ids1[0]
        torch.testing.assert_close(torch.tensor(lp[k]), torch.tensor(lp1[0]), atol=1e-4, rtol=0)
    # the cache holds each prompt and the reply's tokens fed back so far (all but perhaps the last)
    assert all(len(c) + len(r) - 1 <= n <= len(c) + len(r) for c, r, n in zip(contexts, ids, state.n))


@pytest.mark.parametrize("make", [tiny_policy, llama_policy], ids=["tiny-qwen2", "random-llama"])
def test_a_compacted_cache_has_no_holes_and_continues_the_same_way(tiny_path, make, monkeypatch):
    """After a turn the cache has holes (new tokens of different lengths in one batch, rows that
    stopped early); `compact()` keeps each row's tokens only, right-aligned, and the next turn
    generates the same."""
    import copy

    from machinery import kv_cache

    monkeypatch.setattr(kv_cache, "BUCKET_SPREAD", float("inf"))  # one bucket: each turn pads its new tokens
    policy = make(tiny_path)
    policy.mask_actions, policy.max_new_tokens = False, 6
    tok = policy.tokenizer
    texts = ["turn left", "You see a grey key 1 step ahead. " * 4, "move forward " * 3]
    contexts = [chat_ids(tok, [{"role": "user", "content": t}]) for t in texts]
    streams, state = contexts, None
    for turn in range(2):  # turn 2's new tokens, right-aligned, leave holes mid-row
        ids, _, _, _, state = generate(policy, streams, past=state)
        streams = [
            c + i + chat_ids(tok, [{"role": "user", "content": "go on " * (3 * k + turn + 1)}])[1:]
            for k, (c, i) in enumerate(zip(streams, ids))
        ]
    holed = copy.deepcopy(state)
    tight = state.compact()
    width = int(tight.attn.sum(-1).max())
    assert tight.attn.shape[1] == width < holed.attn.shape[1]
    assert tight.n == holed.n and tight.attn.sum(-1).tolist() == holed.attn.sum(-1).tolist()
    for row, k in zip(tight.attn, tight.attn.sum(-1).tolist()):  # left padding, then the row's tokens
        assert row[: width - k].sum() == 0 and row[width - k :].all()
    a = generate(policy, streams, past=tight)
    b = generate(policy, streams, past=holed)
    assert a[0] == b[0]
    for x, y in zip(a[1], b[1]):
        torch.testing.assert_close(torch.tensor(x), torch.tensor(y), atol=1e-4, rtol=0)


@pytest.mark.parametrize("make", [tiny_policy, llama_policy], ids=["tiny-qwen2", "random-llama"])
def test_new_tokens_bucketed_after_a_kept_cache_equal_a_fresh_pass(tiny_path, make):
    """A turn whose new observations range from a few tokens to many (several buckets, each on its
    rows' share of the kept cache, joined again) gives what encoding each whole stream afresh gives."""
    policy = make(tiny_path)
    policy.mask_actions, policy.max_new_tokens = False, 5
    tok = policy.tokenizer
    texts = ["turn left", "move forward " * 5, "pick up", "go to the red ball", "toggle", "drop " * 3]
    contexts = [chat_ids(tok, [{"role": "user", "content": t}]) for t in texts]
    ids, _, _, _, state = generate(policy, contexts)
    news = [chat_ids(tok, [{"role": "user", "content": "go on " * n}])[1:] for n in (40, 1, 12, 2, 41, 13)]
    streams = [c + i + x for c, i, x in zip(contexts, ids, news)]
    assert max(map(len, news)) > 3 * min(map(len, news))
    kept = generate(policy, streams, past=state)
    fresh = generate(policy, streams)
    assert kept[0] == fresh[0]
    for x, y in zip(kept[1], fresh[1]):
        torch.testing.assert_close(torch.tensor(x), torch.tensor(y), atol=1e-4, rtol=0)


def small_model(kind: str, attention: str = "sdpa", **extra):
    """A random 2-layer model of `kind` (Llama with grouped key/value heads, or Qwen2)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(
        kind,
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation=attention,
        **extra,
    )
    return AutoModelForCausalLM.from_config(cfg).eval()


def last_layer_rows(model) -> list[int]:
    """Every call of the last layer's MLP, as it runs: how many positions it computed."""
    seen = []
    mlp = model.get_decoder().layers[-1].mlp
    mlp.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0] * i[0].shape[1]))
    return seen


def padded_prompts(lengths: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random prompts, left-padded to `width`: ids, mask and position ids (B, width) each."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 97, (len(lengths), width), generator=g)
    attn = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        attn[b, width - n :] = 1
    return ids * attn, attn, (attn.cumsum(-1) - 1).clamp(min=0)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("lengths", [[9, 14, 5], [14, 14, 14]], ids=["left-padded", "no-padding"])
def test_the_last_layer_at_the_last_column_only_gives_the_plain_logits_and_cache(kind, attention, lengths):
    """A prompt's forward with `last_column_only`: the last layer's MLP runs on one column per row,
    and the next-token logits and every layer's keys and values are the plain forward's, for a
    fresh prompt and for new tokens after a kept cache."""
    from transformers import DynamicCache

    from machinery.kv_cache import last_column_only

    model = small_model(kind, attention)
    seen = last_layer_rows(model)
    ids, attn, pos = padded_prompts(lengths, 14)
    more, more_attn, _ = padded_prompts([4, 6, 6], 6)
    more_pos = pos[:, -1:] + 1 + (more_attn.cumsum(-1) - 1).clamp(min=0)
    outs = []
    with torch.no_grad():
        for cut in (False, True):
            cache, logits = DynamicCache(config=model.config), []
            for x, a, p, past in ((ids, attn, pos, None), (more, more_attn, more_pos, attn)):
                a = a if past is None else torch.cat([past, a], dim=1)
                with last_column_only(model) if cut else contextlib.nullcontext():
                    out = model(input_ids=x, attention_mask=a, position_ids=p, cache=cache, logits_to_keep=1)
                logits.append(out.logits[:, -1])
            outs.append((logits, cache))
    assert seen == [3 * 14, 3 * 6, 3, 3]  # plain: every column; cut: one per row
    (plain, plain_cache), (cut, cut_cache) = outs
    for a, b in zip(plain, cut):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(plain_cache.layers, cut_cache.layers):
        torch.testing.assert_close(a.keys, b.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.values, b.values, rtol=1e-5, atol=1e-5)
    assert "forward" not in vars(model.get_decoder().layers[-1])  # the class's own forward again


@pytest.mark.parametrize(
    "kind, attention, extra",
    [
        ("mistral", "sdpa", {"sliding_window": 4}),  # a window: its cache keeps only the last columns
        ("gemma", "sdpa", {}),  # another layer (its norms and scaled embeddings)
        ("llama", "other", {}),  # an attention it does not know (flex attention's mask is no 4D tensor)
    ],
)
def test_a_model_it_does_not_know_runs_its_plain_forward(kind, attention, extra):
    """Every column of the last layer is computed, as without `last_column_only`. ("other" is SDPA
    registered under a name the fast path does not know: flex attention, the real case, compiles
    C++ kernels, which fail under PyTorch's default kernels, ATEN_CPU_CAPABILITY=default.)"""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from machinery.kv_cache import last_column_only

    AttentionInterface.register("other", sdpa_attention_forward)
    AttentionMaskInterface.register("other", sdpa_mask)

    model = small_model(kind, attention, **extra)
    seen = last_layer_rows(model)
    ids, attn, pos = padded_prompts([9, 14, 5], 14)
    with torch.no_grad(), last_column_only(model):
        out = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=1)
    assert seen == [3 * 14] and out.logits.shape == (3, 1, 97)


@pytest.mark.parametrize(
    "kind, extra",
    [
        # scores of about 0.006, which a cap of 0.01 bends; a window wider than the streams: the full
        # layer decodes from a reserved room (ReservedLayer), and narrower: the window's last columns
        ("gemma2", dict(attn_logit_softcapping=0.01, sliding_window=64)),
        ("gemma2", dict(attn_logit_softcapping=0.01, sliding_window=6)),
        ("gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=6)),  # a sink per head
    ],
    ids=["gemma2-softcap", "gemma2-softcap-window", "gpt_oss-sinks"],
)
def test_decode_attention_with_a_soft_cap_or_sinks_gives_the_plain_forwards_logits(kind, extra, monkeypatch):
    """SDPA takes neither a soft cap on the attention scores nor sink logits, so `decode_attention`
    hands such a model's attention to the model's own eager attention, SDPA's boolean mask made
    additive. Left-padded prompts of different lengths, then 4 greedy one-token steps: every
    step's logits are the plain forward's over each whole stream alone, and each step's attention
    went through that branch. (These logits move by over 1e-3 without the cap, 0.17 without the
    sinks, and 0.07 with the mask left boolean, which eager attention adds as 0s and 1s.)"""
    from machinery.kv_cache import Decoder, prefill, use_decode_attention

    model = small_model(kind, "eager", head_dim=16, **extra)
    modeling = sys.modules[type(model.get_decoder().layers[0].self_attn).__module__]
    steps, eager = [], modeling.eager_attention_forward
    monkeypatch.setattr(
        modeling,
        "eager_attention_forward",
        lambda m, q, *a, **kw: steps.append(q.shape[2]) or eager(m, q, *a, **kw),
    )
    ids, attn, _ = padded_prompts([9, 14, 5], 14)
    streams = [row[a.bool()].tolist() for row, a in zip(ids, attn)]
    use_decode_attention(model)
    with torch.no_grad():
        logits, state = prefill(model, streams, [0, 0, 0], None, 0, "cpu")
        step, got = Decoder(model, state, 4), [logits]
        for _ in range(4):
            nxt = got[-1].argmax(-1)
            streams = [s + [t] for s, t in zip(streams, nxt.tolist())]
            got.append(step(nxt, [1, 1, 1]))
        assert steps.count(1) == 4 * 2  # every step, every layer: the eager branch
        model.set_attn_implementation("eager")
        for b, s in enumerate(streams):
            plain = model(input_ids=torch.tensor([s])).logits[0, -5:]  # (5, V): the prompt's last, 4 steps
            torch.testing.assert_close(torch.stack([g[b] for g in got]), plain, atol=1e-5, rtol=1e-5)
