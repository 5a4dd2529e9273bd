"""The rollout's generation copy (`--generation-dtype`, agent.generation_model) is the policy: its
LoRA adapters merged into the copy's weights, refreshed after every update; in bfloat16 it differs
only by bf16 rounding. And decoding into a reserved cache (kv_cache.reserve), with or without the
decode step's own attention (kv_cache.decode_attention), gives what decoding by concatenation and
SDPA gives."""

import contextlib
from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from agent import Policy, generation_model
from benchmarks.decode_step import PACKING
from machinery import lora
from machinery.kv_cache import Decoder, ReservedLayer, decode_attention, prefill, use_decode_attention


def lora_policy(dtype: str) -> Policy:
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=200,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    model = lora.add_adapters(base, rank=4)
    with torch.no_grad():  # adapters away from B = 0, as after some training
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return Policy(model=model.eval(), tokenizer=None, generation_dtype=dtype)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


IDS = torch.randint(0, 200, (3, 12), generator=torch.Generator().manual_seed(1))


def test_the_float32_generation_copy_has_the_adapters_merged_and_gives_the_policys_logits():
    policy = lora_policy("float32")
    copy = generation_model(policy)
    assert copy is not policy.model and not lora.has_adapters(copy)
    torch.testing.assert_close(logits(copy, IDS), logits(policy.model, IDS), atol=1e-5, rtol=1e-5)
    with lora.reference(policy.model):  # the adapters do change the logits: the merge is not a no-op
        assert (logits(copy, IDS) - logits(policy.model, IDS)).abs().max() > 1e-3


def test_the_generation_copy_follows_the_policy_after_an_update():
    policy = lora_policy("float32")
    generation_model(policy)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_A" in name:
                p.add_(0.1)
    copy = generation_model(policy)
    assert copy is generation_model(policy)  # one copy, refreshed in place
    torch.testing.assert_close(logits(copy, IDS), logits(policy.model, IDS), atol=1e-5, rtol=1e-5)


def test_the_bfloat16_generation_copy_differs_from_the_policy_only_by_bf16_rounding():
    policy = lora_policy("bfloat16")
    copy = generation_model(policy)
    assert copy.get_input_embeddings().weight.dtype == torch.bfloat16
    assert copy.get_output_embeddings().weight.dtype == torch.float32  # log-probs from a float32 head
    diff = (logits(copy, IDS) - logits(policy.model, IDS)).abs().max()
    assert 0 < diff < 0.05
    # under the update's autocast (train.py's rollout) the copy runs too, and its head stays float32
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = copy(input_ids=IDS).logits
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, logits(copy, IDS), atol=0.05, rtol=0)


def test_auto_generates_from_a_copy_in_the_updates_half_precision_on_a_cpu_only():
    from config import AgentConfig, generation_dtype

    def resolved(given, precision, device="cpu"):
        cfg = AgentConfig(generation_dtype=given)
        cfg.mixed_precision = precision  # what train.py and eval.py resolve before loading the policy
        return generation_dtype(cfg, device)

    assert resolved("auto", "bf16") == "bfloat16"
    assert resolved("auto", "fp16") == "float16"
    assert resolved("auto", "no") == ""  # float32 (the tiny policy's demo): the policy itself
    assert resolved("auto", "bf16", "cuda:0") == ""
    assert resolved("float32", "no") == "float32" and resolved("", "bf16") == ""


@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("in_room", [True, False])
def test_decode_attention_equals_sdpa(masked, in_room):
    """One query per row against 9 cached columns (grouped heads: 6 query heads on 2 key/value
    heads), the keys either plain tensors or views of a wider room of zeros (a reserved cache)."""
    g = torch.Generator().manual_seed(0)
    B, H, KV, T, D = 3, 6, 2, 9, 8
    query = torch.randn(B, H, 1, D, generator=g)
    key, value = torch.randn(B, KV, T, D, generator=g), torch.randn(B, KV, T, D, generator=g)
    if in_room:
        rooms = [torch.zeros(B, KV, T + 4, D) for _ in range(2)]
        rooms[0][:, :, :T], rooms[1][:, :, :T] = key, value
        key, value = rooms[0][:, :, :T], rooms[1][:, :, :T]
    mask = None
    if masked:  # left padding: row i's first i columns do not count
        mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
        for i in range(B):
            mask[i, ..., :i] = False
    module = SimpleNamespace(training=False, num_key_value_groups=H // KV, is_causal=True)
    want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=D**-0.5)
    got, _ = decode_attention(module, query, key, value, mask, scaling=D**-0.5)
    assert got.shape == want.shape == (B, 1, H, D)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


WAYS = ["reserved", "reserved, finished rows dropped"]
WAYS += [w + ", decode attention" for w in WAYS]


@pytest.mark.parametrize("way", WAYS)
def test_decoding_into_a_reserved_cache_equals_decoding_by_concatenation(way, monkeypatch):
    """Each way's logits for the rows that fed a real token, and the final state, equal plain
    concatenation's (with SDPA). Dropping: the second call drops row 1 (1 of 3 finished), the
    fourth row 0."""
    policy = lora_policy("")
    use_decode_attention(policy.model)
    news = [IDS[0].tolist(), IDS[1, :7].tolist(), IDS[2, :10].tolist()]
    lives = ([1, 1, 1], [1, 0, 1], [1, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1])
    out = {}
    for w in ("concatenation", way):
        monkeypatch.setattr(Decoder, "DROP_SHARE", 0.25 if "dropped" in w else 2.0)
        monkeypatch.setattr(Decoder, "DROP_MIN_LEFT", 0)  # (by default 5 steps are too few to drop)
        policy.model.set_attn_implementation("decode" if "decode" in w else "sdpa")
        with torch.no_grad():
            first, state = prefill(policy.model, news, [0, 0, 0], None, 0, "cpu")
            step = Decoder(policy.model, state, 5, preallocate=w != "concatenation")
            assert isinstance(state.cache.layers[0], ReservedLayer) == (w != "concatenation")
            nxt, got = first.argmax(-1), []
            for live in lives:  # six steps: one past the room reserved for five
                logits = step(nxt, live)
                got.append(logits[torch.tensor(live, dtype=torch.bool)])
                nxt = logits.argmax(-1)
            assert len(step.rows) == (1 if "dropped" in w else 3)
            final = step.close().compact()
        out[w] = (got, final)
    for a, b in zip(out["concatenation"][0], out[way][0]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    (_, plain), (_, other) = out["concatenation"], out[way]
    assert torch.equal(plain.attn, other.attn) and plain.n == other.n
    for a, b in zip(plain.cache.layers, other.cache.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-6, rtol=0)
        torch.testing.assert_close(a.values, b.values, atol=1e-6, rtol=0)


def test_a_prefill_with_the_replys_room_is_prefill_then_reserve_without_the_copy():
    """Prompts of different lengths, one of them twice: prefill(room=5) gives the same state as
    prefill and then reserving 5 columns, its layers already ReservedLayer, so the Decoder copies
    nothing more (its rooms are prefill's buffers)."""
    policy = lora_policy("")
    news = [IDS[0].tolist(), IDS[1, :4].tolist(), IDS[0].tolist(), IDS[2, :9].tolist()]
    with torch.no_grad():
        plain_logits, plain = prefill(policy.model, news, [0] * 4, None, 0, "cpu")
        Decoder(policy.model, plain, 5)  # reserves: copies every layer into a new room
        logits, roomy = prefill(policy.model, news, [0] * 4, None, 0, "cpu", room=5)
        rooms = [layer.room[0].data_ptr() for layer in roomy.cache.layers]
        Decoder(policy.model, roomy, 5)
    assert [layer.room[0].data_ptr() for layer in roomy.cache.layers] == rooms
    torch.testing.assert_close(logits, plain_logits, atol=0, rtol=0)
    assert torch.equal(roomy.attn, plain.attn) and roomy.n == plain.n
    for a, b in zip(plain.cache.layers, roomy.cache.layers):
        assert isinstance(b, ReservedLayer) and a.room[0].shape == b.room[0].shape
        assert torch.equal(a.room[0], b.room[0]) and torch.equal(a.room[1], b.room[1])


class FSDPLikeWrapper(torch.nn.Module):
    """A layer wrapped the way FSDP wraps it in place: its weights' names gain `_fsdp_wrapped_module.`"""

    def __init__(self, inner):
        super().__init__()
        self._fsdp_wrapped_module = inner

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._fsdp_wrapped_module, name)

    def forward(self, *args, **kwargs):
        return self._fsdp_wrapped_module(*args, **kwargs)


def test_the_copy_finds_the_weights_of_layers_fsdp_wrapped_and_refuses_when_one_is_missing():
    policy = lora_policy("float32")
    layers = policy.model.get_base_model().model.layers
    layers[0] = FSDPLikeWrapper(layers[0])
    assert any("_fsdp_wrapped_module" in n for n, _ in policy.model.named_parameters())
    copy = generation_model(policy)
    torch.testing.assert_close(logits(copy, IDS), logits(policy.model, IDS), atol=1e-5, rtol=1e-5)
    # a weight the copy cannot find would leave it at its random initial value: an error instead
    policy._generators.clear()
    layers[1].input_layernorm.weight = None  # (a module with no weight: nothing to copy)
    with pytest.raises(RuntimeError, match="input_layernorm"):
        generation_model(policy)


def decode_benchmark_logits(way: str, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """4 decode steps' logits of a small Llama over a reserved cache with left padding, by
    transformers' forward and by benchmarks/decode_step.py's `way` (lean or packed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from benchmarks.decode_step import lean, packed

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=200, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16,
    )  # fmt: skip
    news = [IDS[0].tolist(), IDS[1, :7].tolist(), IDS[2, :10].tolist()]
    model = LlamaForCausalLM(config).to(dtype).eval()
    use_decode_attention(model)
    out = {}
    for w in ("transformers", way):
        swap = packed(model, 3) if w == "packed" else contextlib.nullcontext()
        with torch.no_grad(), swap:
            first, state = prefill(model, news, [0, 0, 0], None, 0, "cpu")
            step = Decoder(model, state, 4)
            step = lean(model, step) if w == "lean" else step
            nxt, got = first.argmax(-1), []
            for _ in range(4):
                got.append(step(nxt, [1, 1, 1]).float())
                nxt = got[-1].argmax(-1)
        out[w] = torch.stack(got)
    return out[way], out["transformers"]


def test_the_decode_benchmarks_hand_written_step_gives_transformers_logits():
    """benchmarks/decode_step.py measures a way of a Llama decode step that the rollout does not
    use: `lean_step`, the step written out by hand. It is meant to compute what transformers'
    forward computes, over a reserved cache with left padding."""
    torch.testing.assert_close(*decode_benchmark_logits("lean", torch.float32), atol=1e-4, rtol=0)


@pytest.mark.skipif(
    not PACKING, reason="oneDNN packs bf16 weights only on CPUs with AVX512 or AVX-NE-CONVERT"
)
def test_the_decode_benchmarks_packed_weights_give_transformers_logits():
    """decode_step.py's `Packed` linears (bf16 weights packed once for oneDNN) compute what
    transformers' forward computes, on the CPUs that can pack them."""
    torch.testing.assert_close(*decode_benchmark_logits("packed", torch.bfloat16), atol=1e-4, rtol=0)


def test_the_decode_benchmarks_int8_linear_is_the_linear_at_int8_precision():
    """benchmarks/decode_step.py's `bf16-int8` way (measured, not used): `Int8` is a linear layer on
    an int8 copy of its weight, one scale per output row, so it computes the layer to within int8's
    rounding (1-3% here: the inputs are quantized on the fly too, to 7 bits), the output of a
    weight row scaled 100x as precisely as the others (one scale for the whole weight puts those 41%
    off)."""
    from benchmarks.decode_step import Int8

    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    with torch.no_grad():
        linear.weight[3] *= 100  # a row of another scale: per-row scales keep the others precise
    x = torch.randn(5, 64).bfloat16()
    want, got = linear(x.float()), Int8(linear)(x)
    assert got.dtype == torch.bfloat16
    others = [i for i in range(48) if i != 3]
    for rows in (others, [3]):
        err = (got.float()[:, rows] - want[:, rows]).norm() / want[:, rows].norm()
        assert err < 0.03, (rows, err)


def test_prompt_lookup_counts_a_copied_reply_in_fewer_steps_and_a_new_one_a_step_a_token():
    """benchmarks/prompt_lookup.py counts the decode steps speculation from the prompt would take:
    a draft copies what followed the reply's last tokens earlier in the context, and a step keeps
    the draft's matching prefix plus the one token it samples itself."""
    from benchmarks.prompt_lookup import draft, steps_for

    context = [7, 1, 2, 3, 4, 5, 9]
    assert draft(context + [1, 2], 3) == [3, 4, 5]  # the match of the last 2 tokens, 3 tokens on
    assert draft([1, 2, 8, 1, 2, 9, 1, 2], 2) == [9, 1]  # the most recent match
    assert draft([5, 6], 4) == []
    # no earlier 9 for the first step to copy from: it samples 1 alone; then each step drafts what
    # followed in the context and keeps it all: 1 | 2 3 4 5 9 with k = 4, 1 | 2 3 | 4 5 | 9 with k = 1
    assert steps_for(context, [1, 2, 3, 4, 5, 9], 4) == 2
    assert steps_for(context, [1, 2, 3, 4, 5, 9], 1) == 4
    assert steps_for([100, 101], [11, 12, 13], 4) == 3  # nothing to copy: one step a token


def test_prompt_lookups_verification_attention_gives_transformers_logits_for_several_tokens():
    """benchmarks/prompt_lookup.py times a verification (q new tokens per row on a reserved cache)
    through `verify_attention`, the rollout's one-token attention generalized to q tokens: it has to
    compute what transformers' SDPA computes, causal within the q."""
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    from benchmarks.prompt_lookup import use_verify_attention
    from machinery.kv_cache import reserve

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=200, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    prompt, new = IDS[:2, :6], IDS[:2, 6:9]  # (2, 6) cached, (2, 3) to verify
    out = {}
    for way in ("sdpa", "verify"):
        model.set_attn_implementation("sdpa")
        with torch.no_grad():
            cache = DynamicCache(config=config)
            model(prompt, cache=cache, use_cache=True)
            if way == "verify":
                reserve(cache, 8)
                use_verify_attention(model)
            out[way] = model(new, cache=cache, use_cache=True).logits  # (2, 3, V)
    torch.testing.assert_close(out["verify"], out["sdpa"], atol=1e-5, rtol=0)
