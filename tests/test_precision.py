"""The rollout samples from the distribution the update scores: stored log-probs against the
training forward in float32 and under bf16 autocast, at a temperature other than 1, for the tiny
Qwen2, a random Llama and a random sliding-window Mistral (whose cache `compact()` and `prefill`
treat apart); under --mixed-precision the update's pi_old is the training forward's own, so the
first minibatch is on-policy; dropout is off in the update."""

import json

import pytest
import torch

import tiny
from agent import Trajectory, chat_ids, generate
from batch import Row, make_batch, token_logprobs
from machinery.logprobs import agent_logprobs, disable_dropout, predicting_positions

TEMPERATURE = 0.7
FP32_TOL = 2e-4  # what tests/test_agent.py holds the float32 rollout to
BF16_TOL = 0.1  # max per token, small models: 8 bits of mantissa; cached decoding and a full forward differ


def tiny_policy(path):
    policy = tiny.load(path, "babyai")
    policy.context_turns, policy.mask_actions, policy.max_new_tokens = 0, False, 6
    policy.temperature = TEMPERATURE
    return policy


def random_policy(path, kind):
    """The tiny policy's tokenizer on a random Llama, or on a Mistral whose every layer attends to
    a sliding window of 12 tokens (its cache keeps only the last ones), both built from configs."""
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    policy = tiny_policy(path)
    tok = policy.tokenizer
    common = dict(
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
    torch.manual_seed(0)
    if kind == "llama":
        policy.model = LlamaForCausalLM(LlamaConfig(**common)).eval()
    else:
        policy.model = MistralForCausalLM(MistralConfig(**common, sliding_window=12)).eval()
    return policy


MAKERS = {
    "tiny-qwen2": tiny_policy,
    "random-llama": lambda p: random_policy(p, "llama"),
    "sliding-mistral": lambda p: random_policy(p, "mistral"),
}


def two_turns(policy) -> list[Row]:
    """Two turns of whole-conversation generation, as the rollout runs them: fresh prompts (one
    repeated), then each stream extended by an observation on its kept, compacted cache. One row
    per stream, mask 1 on both replies, the sampled log-probs stored."""
    tok = policy.tokenizer
    texts = ["turn left", "go to the red ball " * 3, "turn left", "You see a grey key 1 step ahead. " * 3]
    contexts = [chat_ids(tok, [{"role": "user", "content": t}]) for t in texts]
    torch.manual_seed(1)
    ids1, lp1, _, _, state = generate(policy, contexts)
    news = [chat_ids(tok, [{"role": "user", "content": "go on " * n}])[1:] for n in (1, 9, 4, 2)]
    streams = [c + i + x for c, i, x in zip(contexts, ids1, news)]
    ids2, lp2, _, _, _ = generate(policy, streams, past=state.select(list(range(len(texts)))).compact())
    rows = []
    for c, i1, l1, x, i2, l2 in zip(contexts, ids1, lp1, news, ids2, lp2):
        ids = c + i1 + x + i2
        mask = [0] * len(c) + [1] * len(i1) + [0] * len(x) + [1] * len(i2)
        lp = [0.0] * len(c) + l1 + [0.0] * len(x) + l2
        rows.append(Row(ids=ids, mask=mask, logprobs=lp))
    return rows


def gap(policy, precision: torch.dtype | None) -> float:
    """Largest |stored - training forward| over the agent tokens, both under `precision`."""
    ctx = torch.autocast("cpu", dtype=precision) if precision else torch.autocast("cpu", enabled=False)
    with ctx:
        rows = two_turns(policy)
        trajs = [Trajectory(task=0, group=0, rows=[r]) for r in rows]
        batch = make_batch(trajs, policy.tokenizer.pad_token_id)
        with torch.no_grad():
            logp, _ = token_logprobs(policy.model, batch, TEMPERATURE)
    m = batch.loss_mask.bool()
    assert m.sum() > 20
    return float((logp[m] - batch.old_logprobs[m]).abs().max())


@pytest.mark.parametrize("make", list(MAKERS))
def test_stored_logprobs_equal_the_training_forward_in_float32_at_temperature_07(tiny_path, make):
    assert gap(MAKERS[make](tiny_path), None) < FP32_TOL


@pytest.mark.parametrize("make", list(MAKERS))
def test_under_bf16_autocast_the_sampler_runs_in_bf16_within_bf16s_tolerance(tiny_path, make):
    """bf16 generation runs the model in bf16 (before: in float32, whatever --mixed-precision said),
    so its log-probs are the bf16 model's, within bf16's tolerance of the training forward's. How
    far below that tolerance depends on the kernels the CPU's instruction set selects (1.3e-5 on an
    AVX2 machine, 2e-5 and more on AVX-512), so nothing here asserts how imprecise bf16 is; that the
    sampler's log-probs are not the update's pi_old is test_a_bf16_run_recomputes_pi_old_and_its_
    first_minibatch_is_on_policy's claim."""
    policy = MAKERS[make](tiny_path)
    seen = []
    down = policy.model.get_decoder().layers[0].mlp.down_proj
    down.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    g = gap(policy, torch.bfloat16)
    assert set(seen) == {torch.bfloat16}  # sampler and update both ran their matmuls in bf16
    assert g < BF16_TOL, g


def test_dropout_is_off_so_train_mode_scores_like_eval_mode():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=50,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            attention_dropout=0.5,
        )
    )
    ids = torch.randint(0, 50, (2, 12))
    attn, mask = torch.ones_like(ids), torch.zeros(2, 12)
    mask[:, 6:] = 1
    rows, cols = predicting_positions(mask)
    with torch.no_grad():
        model.eval()
        ref, _ = agent_logprobs(model, ids, attn, rows, cols)
        model.train()
        assert not torch.allclose(agent_logprobs(model, ids, attn, rows, cols)[0], ref)  # dropout was on
        disable_dropout(model)
        torch.testing.assert_close(agent_logprobs(model, ids, attn, rows, cols)[0], ref)


@pytest.mark.parametrize("epochs", [1, 2])
def test_a_bf16_run_recomputes_pi_old_and_its_first_minibatch_is_on_policy(
    fresh_accelerate, tmp_path, capsys, epochs
):
    """train.py --mixed-precision bf16: the sampled log-probs differ from the update's by bf16
    rounding (logged as charts/sampling_logprob_gap), pi_old is the training forward's (one epoch:
    the update's own, update.pi_old_from_update; two: a separate pass), and before the first
    optimizer step every ratio is 1 (charts/on_policy_gap: mean |log ratio|, 0 here, within
    update.ON_POLICY_TOL on the mean), printed for the user."""
    from train import Config, train
    from update import ON_POLICY_TOL

    train(
        Config(
            epochs=epochs,
            steps=1,
            tasks_per_step=2,
            group_size=2,
            eval_episodes=0,
            rounds="2",
            mixed_precision="bf16",
            mask_actions=False,
            max_new_tokens=8,
            out=str(tmp_path),
        )
    )
    m = json.loads(open(tmp_path / "metrics.jsonl").readline())
    assert m["charts/on_policy_gap"] <= ON_POLICY_TOL
    assert m["charts/sampling_logprob_gap"] > 0  # the sampler's own log-probs were not used as pi_old
    assert "first minibatch: |log ratio| mean" in capsys.readouterr().out


def test_the_lm_head_runs_in_float32_under_bf16_autocast(tiny_path):
    """logprobs.fp32_head (applied by config.load_agent): the sampler's logits and the update's are
    float32 even under bf16 autocast (a bf16 logit of 30 is rounded to 1/8), while the blocks run
    in bf16; the model's own logits are the same as before to float32 rounding when autocast is off."""
    from machinery.logprobs import fp32_head

    policy = tiny_policy(tiny_path)
    ids = torch.tensor([policy.tokenizer("go to the red ball")["input_ids"]])
    with torch.no_grad():
        plain = policy.model(input_ids=ids).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert policy.model(input_ids=ids).logits.dtype == torch.bfloat16  # before: the head in bf16
        fp32_head(policy.model)
        torch.testing.assert_close(policy.model(input_ids=ids).logits, plain)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert policy.model(input_ids=ids).logits.dtype == torch.float32


def test_mixed_precision_auto_is_bf16_for_a_real_model_where_bf16_is_fast(tiny_path, tmp_path, monkeypatch):
    """--mixed-precision auto (config.resolve_precision): bf16 for a real model on a CPU with bf16
    matrix instructions, no without them and always no for the tiny policy (name, folder, or LoRA
    adapters on it); a value given is kept."""
    import config

    monkeypatch.setattr(config, "cpu_has_fast_bf16", lambda: True)
    assert config.resolve_precision("auto", "smollm2", "cpu") == "bf16"
    adapters = tmp_path / "adapters"  # what machinery/lora.py reads of an adapter folder
    adapters.mkdir()
    (adapters / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": tiny_path}))
    for name in ("tiny", tiny_path, str(adapters)):
        assert config.resolve_precision("auto", name, "cpu") == "no", name
    assert config.resolve_precision("no", "smollm2", "cpu") == "no"
    monkeypatch.setattr(config, "cpu_has_fast_bf16", lambda: False)
    assert config.resolve_precision("auto", "smollm2", "cpu") == "no"
    assert config.resolve_precision("bf16", "tiny", "cpu") == "bf16"
