"""The chunked log-probs at agent tokens equal the plain (B, T, V) computation, values and gradients,
with and without action masking, and the LM head never sees more than one chunk of positions."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from machinery.logprobs import agent_logprobs, allowed_bias, full_logprobs, predicting_positions

V = 300


def small_model(kind: str):
    torch.manual_seed(0)
    common = dict(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    if kind == "qwen2":  # untied head, like Qwen2.5-7B
        return Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False)).float()
    return LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True)).float()  # like SmolLM2


def small_batch(seed: int = 0, masked: bool = False):
    """3 right-padded rows with agent spans between observation spans; when masked, each agent
    position allows a few ids (the sampled one among them), as the rollout stores them."""
    g = torch.Generator().manual_seed(seed)
    lengths = [20, 13, 17]
    B, T = len(lengths), max(lengths)
    ids = torch.randint(0, V, (B, T), generator=g)
    attn = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T))
    for b, n in enumerate(lengths):
        attn[b, :n] = 1
        loss_mask[b, 4:8] = 1
        loss_mask[b, 11:n] = 1
    ids[attn == 0] = 0
    allowed_list, allowed_mask = None, None
    if masked:
        K = 5
        allowed_list = torch.full((B, T, K), -1, dtype=torch.long)
        allowed_mask = torch.ones((B, T, V), dtype=torch.bool)
        for b, t in loss_mask.nonzero().tolist():
            k = int(torch.randint(1, K + 1, (1,), generator=g))  # 1..K allowed ids, some padding
            ok = torch.randint(0, V, (k,), generator=g)
            ok[0] = ids[b, t]
            allowed_list[b, t, :k] = ok
            allowed_mask[b, t] = False
            allowed_mask[b, t, ok] = True
    return ids, attn, loss_mask, allowed_list, allowed_mask


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, None])
def test_chunked_logprobs_and_entropy_equal_the_plain_computation(kind, masked, chunk):
    model = small_model(kind)
    ids, attn, loss_mask, allowed_list, allowed_mask = small_batch(masked=masked)
    rows, cols = predicting_positions(loss_mask)
    allowed = allowed_list[rows, cols] if masked else None
    lp, ent = agent_logprobs(
        model, ids, attn, rows, cols, temperature=0.7, allowed=allowed, with_entropy=True, chunk_size=chunk
    )
    ref_lp, ref_ent = full_logprobs(
        model, ids, attn, temperature=0.7, allowed_mask=allowed_mask, with_entropy=True
    )
    assert lp.shape == (int(loss_mask.sum()),)
    torch.testing.assert_close(lp, ref_lp[rows, cols], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent[rows, cols], rtol=1e-5, atol=1e-5)
    if masked:  # the mask matters: entropy over at most 5 ids, not over V
        assert ent.max() <= torch.log(torch.tensor(5.0)) + 1e-5


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("masked", [False, True])
def test_chunked_gradients_equal_the_plain_gradients(kind, masked):
    """Backward through checkpointed chunks gives the gradients of the plain (B, T, V) path."""
    ids, attn, loss_mask, allowed_list, allowed_mask = small_batch(seed=1, masked=masked)
    rows, cols = predicting_positions(loss_mask)
    w = torch.randn(len(rows), generator=torch.Generator().manual_seed(2))  # like advantages

    model = small_model(kind)
    lp, ent = agent_logprobs(
        model,
        ids,
        attn,
        rows,
        cols,
        allowed=allowed_list[rows, cols] if masked else None,
        with_entropy=True,
        chunk_size=5,
    )
    (-(w * lp).mean() - 0.1 * ent.mean()).backward()
    chunked = {n: p.grad.clone() for n, p in model.named_parameters()}

    model = small_model(kind)
    lp, ent = full_logprobs(model, ids, attn, allowed_mask=allowed_mask, with_entropy=True)
    (-(w * lp[rows, cols]).mean() - 0.1 * ent[rows, cols].mean()).backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(chunked[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)


def test_the_lm_head_sees_only_agent_positions_one_chunk_at_a_time():
    """No (B, T, V) tensor: the head's input is at most `chunk` positions, N in all, forward and
    recomputation in backward; observation positions never reach it."""
    model = small_model("qwen2")
    ids, attn, loss_mask, _, _ = small_batch()
    rows, cols = predicting_positions(loss_mask)
    seen = []
    model.get_output_embeddings().register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0]))
    lp, _ = agent_logprobs(model, ids, attn, rows, cols, chunk_size=8)
    assert max(seen) <= 8 and sum(seen) == len(rows) < attn.sum()
    lp.sum().backward()  # each chunk recomputed once, still at most 8 positions
    assert max(seen) <= 8 and sum(seen) == 2 * len(rows)


def test_allowed_bias_rebuilds_the_mask_from_id_lists():
    allowed = torch.tensor([[2, 0, -1], [-1, -1, -1], [4, -1, -1]])
    bias = allowed_bias(allowed, 5)
    inf = float("-inf")
    assert bias.tolist() == [[0, inf, 0, inf, inf], [0, 0, 0, 0, 0], [inf, inf, inf, inf, 0]]


def test_no_agent_tokens_gives_an_empty_result_that_backward_accepts():
    model = small_model("llama")
    ids, attn, loss_mask, _, _ = small_batch()
    rows, cols = predicting_positions(torch.zeros_like(loss_mask))
    lp, ent = agent_logprobs(model, ids, attn, rows, cols, with_entropy=True)
    assert lp.shape == ent.shape == (0,)
    (lp.sum() + ent.sum()).backward()


def shared_prompt_batch(masked: bool):
    """6 right-padded rows over 3 prompts of different lengths (rows 0, 2, 5 share one, rows 1, 4
    another, row 3 its own), each answered differently and at different lengths, one row with two
    agent spans, one row with no agent token at all (its prompt repeats another's)."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, V, (n,), generator=g) for n in (9, 5, 12)]
    plan = [(0, 4), (1, 7), (0, 2), (2, 3), (1, 10), (0, 6), (1, 0)]  # (prompt, rest length)
    B, T = len(plan), max(len(prompts[p]) + n for p, n in plan)
    ids = torch.zeros((B, T), dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T))
    for b, (p, n) in enumerate(plan):
        k = len(prompts[p])
        ids[b, : k + n] = torch.cat([prompts[p], torch.randint(1, V, (n,), generator=g)])
        attn[b, : k + n] = 1
        loss_mask[b, k : k + n] = 1
        if n >= 7:  # an observation in the middle of the rest: two agent spans
            loss_mask[b, k + 3 : k + 5] = 0
    allowed_list, allowed_mask = None, None
    if masked:
        allowed_list = torch.full((B, T, 3), -1, dtype=torch.long)
        allowed_mask = torch.ones((B, T, V), dtype=torch.bool)
        for b, t in loss_mask.nonzero().tolist():
            ok = torch.randint(0, V, (3,), generator=g)
            ok[0] = ids[b, t]
            allowed_list[b, t] = ok
            allowed_mask[b, t] = False
            allowed_mask[b, t, ok] = True
    return ids, attn, loss_mask, allowed_list, allowed_mask


def watch_passes(model) -> list[tuple[int, int, bool]]:
    """Every decoder pass, as it runs: (rows, columns, whether it extends a cache)."""
    passes = []
    model.get_decoder().register_forward_hook(
        lambda m, i, kw, o: passes.append((*kw["input_ids"].shape, kw.get("cache") is not None)),
        with_kwargs=True,
    )
    return passes


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("masked", [False, True])
def test_a_shared_prompt_runs_once_and_gives_every_row_the_plain_logprobs_and_gradients(kind, masked):
    ids, attn, loss_mask, allowed_list, allowed_mask = shared_prompt_batch(masked)
    rows, cols = predicting_positions(loss_mask)
    w = torch.randn(len(rows), generator=torch.Generator().manual_seed(4))

    model = small_model(kind)
    passes = watch_passes(model)
    lp, ent = agent_logprobs(
        model,
        ids,
        attn,
        rows,
        cols,
        temperature=0.8,
        allowed=allowed_list[rows, cols] if masked else None,
        with_entropy=True,
    )
    # each prompt once, each of the 6 rows with agent tokens once on top of its prompt's cache; the
    # prompts (5, 9 and 12 tokens) in buckets of similar length, each pass as wide as its own prompt
    assert sum(n for n, _, rest in passes if not rest) == 3 and sum(n for n, _, rest in passes if rest) == 6
    assert sorted(w for _, w, rest in passes if not rest) == [5, 9, 12]
    (-(w * lp).mean() - 0.1 * ent.mean()).backward()
    shared = {n: p.grad.clone() for n, p in model.named_parameters()}

    model = small_model(kind)
    ref_lp, ref_ent = full_logprobs(
        model, ids, attn, temperature=0.8, allowed_mask=allowed_mask, with_entropy=True
    )
    torch.testing.assert_close(lp, ref_lp[rows, cols], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent[rows, cols], rtol=1e-5, atol=1e-5)
    (-(w * ref_lp[rows, cols]).mean() - 0.1 * ref_ent[rows, cols].mean()).backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(shared[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)


def left_padded(ids, attn, loss_mask, allowed_mask=None):
    """The same rows moved to the right end: left padding (the side tokenizers pad for generation)."""
    out = [torch.zeros_like(ids), torch.zeros_like(attn), torch.zeros_like(loss_mask)]
    out.append(None if allowed_mask is None else torch.ones_like(allowed_mask))
    T = ids.shape[1]
    for b, n in enumerate(attn.sum(-1).tolist()):
        for x, y in zip(out, (ids, attn, loss_mask, allowed_mask)):
            if x is not None:
                x[b, T - n :] = y[b, :n]
    return out


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_a_left_padded_batch_whose_rows_share_a_prompt_gets_the_plain_logprobs(kind):
    """Rows padded on the left (pads before the prompt) still share their prompt's pass, and each
    row's log-probs are those of the plain pass (before: the pads were read as part of the prompt,
    up to 0.07 off, silently)."""
    ids, attn, loss_mask, _, _ = shared_prompt_batch(masked=False)
    ids, attn, loss_mask, _ = left_padded(ids, attn, loss_mask)
    assert (attn[:, 0] == 0).any() and (attn[:, -1] == 1).all()
    rows, cols = predicting_positions(loss_mask)
    model = small_model(kind)
    passes = watch_passes(model)
    lp, ent = agent_logprobs(model, ids, attn, rows, cols, temperature=0.8, with_entropy=True)
    assert [rest for _, _, rest in passes] == [False, True] * 3  # per bucket: the prompts' pass, the rests'
    ref_lp, ref_ent = full_logprobs(model, ids, attn, temperature=0.8, with_entropy=True)
    torch.testing.assert_close(lp, ref_lp[rows, cols], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent[rows, cols], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_a_shared_prompts_last_layer_runs_at_its_last_column_only(kind):
    """The prompts' pass reads its last layer's output at each prompt's last token only (the rest
    reads the prompt through the cache): the last layer's MLP sees one column per prompt there,
    every column of the rows' rests, and the whole batch in the plain pass."""
    ids, attn, loss_mask, _, _ = shared_prompt_batch(masked=False)
    rows, cols = predicting_positions(loss_mask)
    model = small_model(kind)
    seen = []
    model.get_decoder().layers[-1].mlp.register_forward_hook(
        lambda m, i, o: seen.append(tuple(i[0].shape[:2]))
    )
    passes = watch_passes(model)
    agent_logprobs(model, ids, attn, rows, cols)
    assert [s for s, (_, _, rest) in zip(seen, passes) if not rest] == [(1, 1), (1, 1), (1, 1)]
    assert [s for s, (n, w, rest) in zip(seen, passes) if rest] == [(n, w) for n, w, rest in passes if rest]
    seen.clear()
    full_logprobs(model, ids, attn)
    assert seen == [tuple(ids.shape)]
