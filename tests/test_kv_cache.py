"""Reusing the KV cache changes no token: the whole-conversation rollout that keeps each episode's
cache across turns conditions on exactly the stored trajectory tokens, so with greedy decoding it
picks the same tokens with the same log-probs as the rollout that encodes every prompt afresh;
and prompts of very different lengths prefilled in length buckets give what each prompt alone
gives. For the tiny policy and for a randomly initialised small Llama (another architecture)."""

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
