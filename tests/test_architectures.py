"""Any causal LM a user picks runs the whole loop: random tiny configs of the architectures people
train agents on, each through the rollout's prefill (kv_cache.encode), the update's shared-prompt
pass (logprobs.prompt_pass: each prompt once, every row's rest on its cache) and one training step
of train.py. The fast path of a prompt's last layer (kv_cache.last_column_only) knows Llama and
Qwen2 layers; every other model runs its plain forward, and either way the tokens, log-probs and
cache are the plain forward's. The update's half samples its episodes: greedy ones of a task are
identical rows, merged before the update, so no prompt would be shared. A sliding window runs
every row whole (logprobs.one_pass_only). (GPT-2, Falcon, Bloom and MPT keep their blocks
elsewhere than `.layers`: reading `.layers` first crashed them in both places.)"""

import contextlib
import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import tiny
from agent import rollout
from batch import make_batch, token_logprobs, unique_rows
from envs import ENVS, EnvPool
from machinery import kv_cache, logprobs
from train import Config, train

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, head_dim=16)
GQA = dict(SMALL, num_key_value_heads=2)
# kind -> the config's size fields (each family names them its own way) and what sets it apart
ARCHITECTURES = {
    "llama": GQA,
    "qwen2": GQA,
    "qwen3": GQA,
    "mistral": dict(GQA, sliding_window=None),  # Mistral v0.2 on: no window
    "mistral-window": dict(GQA, sliding_window=16),  # its cache keeps only the last 16 columns
    "gemma2": dict(GQA, sliding_window=16),  # every other layer a window; softcapped logits
    "gemma3_text": dict(GQA, sliding_window=16),
    "phi3": dict(SMALL, num_key_value_heads=2),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, n_positions=1024),  # blocks under `.h`
    "gpt_neox": dict(SMALL),
    "falcon": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, ffn_hidden_size=128),
    "bloom": dict(hidden_size=64, n_layer=2, n_head=4),  # ALiBi: no position embeddings
    "opt": dict(
        hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4, word_embed_proj_dim=64
    ),
}
FAST = {"llama", "qwen2"}  # the layers whose last one runs at the last column only (Llama's steps)


def random_model(kind: str, tok):
    torch.manual_seed(0)
    ids = dict(bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = AutoConfig.for_model(
        kind.removesuffix("-window"), vocab_size=len(tok), **ids, **ARCHITECTURES[kind]
    )
    return AutoModelForCausalLM.from_config(cfg).eval()


@pytest.fixture(scope="module")
def babyai(start_server):
    return start_server("servers.babyai")


@pytest.fixture(scope="module")
def pool(babyai):
    p = EnvPool(url=babyai.url, size=8)
    yield p
    p.close()


def policy_on(tiny_path, kind):
    """The tiny policy's tokenizer and chat template on a random model of `kind`, greedy, the whole
    conversation in context (so each turn's prefill extends a kept cache), free generation."""
    policy = tiny.load(tiny_path, "babyai")
    policy.model = random_model(kind, policy.tokenizer)
    policy.context_turns, policy.temperature, policy.mask_actions, policy.max_new_tokens = 0, 0.0, False, 6
    return policy


@contextlib.contextmanager
def plain_forward():
    """`last_column_only` as a model it does not know gets it: the model's plain forward."""
    saved = kv_cache.last_column_only, logprobs.last_column_only
    kv_cache.last_column_only = logprobs.last_column_only = lambda model: contextlib.nullcontext()
    try:
        yield
    finally:
        kv_cache.last_column_only, logprobs.last_column_only = saved


def cut_calls(model) -> list[bool]:
    """Per call of the last decoder block: whether it took several columns and gave back one (the
    fast path) rather than as many as it took."""
    seen, decoder = [], model.get_decoder()
    blocks = next(getattr(decoder, n) for n in ("layers", "h", "blocks") if hasattr(decoder, n))

    def hook(module, args, kwargs, out):
        x, y = (args[0] if args else kwargs["hidden_states"]), (out[0] if isinstance(out, tuple) else out)
        seen.append(x.shape[1] > 1 and y.shape[1] == 1)

    blocks[-1].register_forward_hook(hook, with_kwargs=True)
    return seen


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_the_prefill_gives_the_plain_forwards_tokens_and_logprobs(tiny_path, pool, kind):
    """Two-turn greedy episodes of a GRPO group (each task twice, so the prefill shares prompts):
    the rollout with the fast path and with the plain forward sample the same tokens with the same
    log-probs. The fast path ran (a last block that computed one column a row) exactly where it
    knows the layer."""
    policy = policy_on(tiny_path, kind)
    spec, tasks = ENVS["babyai"], [t for t in ENVS["babyai"].splits["test"][:3] for _ in range(2)]
    calls = cut_calls(policy.model)
    fast = rollout(policy, pool, spec, tasks, horizon=2, groups=[0, 0, 1, 1, 2, 2])
    assert any(calls) == (kind in FAST), calls
    calls.clear()
    with plain_forward():
        plain = rollout(policy, pool, spec, tasks, horizon=2, groups=[0, 0, 1, 1, 2, 2])
    assert calls and not any(calls)
    rows = lambda trajs: [r for tr in trajs for r in tr.rows]  # noqa: E731
    assert [r.ids for r in rows(fast)] == [r.ids for r in rows(plain)]
    for a, b in zip(rows(fast), rows(plain)):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


def sampled_batch(policy, pool):
    """A GRPO group of two sampled two-turn episodes for each of 3 tasks: a group's rows share
    their first observation (the update's shared prompt) and then part. (Greedy episodes of a task
    are identical rows, which `batch.unique_rows` merges before the update: no prompt is shared.)"""
    spec, tasks = ENVS["babyai"], [t for t in ENVS["babyai"].splits["test"][:3] for _ in range(2)]
    policy.temperature = 1.0
    torch.manual_seed(0)
    trajs = rollout(policy, pool, spec, tasks, horizon=2, groups=[0, 0, 1, 1, 2, 2])
    return make_batch(trajs, policy.tokenizer.pad_token_id)


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_the_update_runs_each_shared_prompt_once_and_gives_the_plain_forwards_logprobs(
    tiny_path, pool, kind, monkeypatch
):
    """The update's log-probs of sampled episodes (3 first observations, each shared by 2 rows
    that differ after it): each prompt runs once (logprobs.prompt_pass) and every row's rest on
    its cache, with the fast path and with the plain forward, and both give the plain full
    forward's log-probs (logprobs.full_logprobs) and the rollout's. A sliding window runs every
    row whole instead (logprobs.one_pass_only): its cache keeps only the window."""
    policy = policy_on(tiny_path, kind)
    batch = sampled_batch(policy, pool)
    assert len(unique_rows(batch)[0]) == len(batch) == 6  # no row merged away before the update
    ran, prompt_pass = [], logprobs.prompt_pass  # per shared-prompt pass, how many prompts it ran
    monkeypatch.setattr(logprobs, "prompt_pass", lambda d, p, *a: ran.append(len(p)) or prompt_pass(d, p, *a))
    calls = cut_calls(policy.model)
    m = batch.loss_mask.bool()
    with torch.no_grad():
        ref, _ = logprobs.full_logprobs(policy.model, batch.input_ids, batch.attention_mask)
        calls.clear()
        update_fast, _ = token_logprobs(policy.model, batch)
        shared = 0 if kv_cache.sliding(policy.model) else 3  # the distinct prompts
        assert sum(ran) == shared, ran
        assert sum(calls) == (len(ran) if kind in FAST else 0), calls  # one cut pass per prompt_pass
        ran.clear()
        calls.clear()
        with plain_forward():
            update_plain, _ = token_logprobs(policy.model, batch)
        assert sum(ran) == shared and not any(calls)
    torch.testing.assert_close(update_fast[m], ref[m], atol=1e-4, rtol=0)
    torch.testing.assert_close(update_plain[m], ref[m], atol=1e-4, rtol=0)
    torch.testing.assert_close(update_fast[m], batch.old_logprobs[m], atol=2e-4, rtol=0)


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_train_py_takes_a_step_on_every_architecture(fresh_accelerate, tiny_path, babyai, tmp_path, kind):
    """train.py on a saved random model of `kind` with the tiny tokenizer: one GRPO step, a finite
    loss, no skipped step, and the weights moved."""
    policy = policy_on(tiny_path, kind)
    policy.model.save_pretrained(tmp_path / "model")
    policy.tokenizer.save_pretrained(tmp_path / "model")
    before = {n: p.clone() for n, p in policy.model.named_parameters()}
    train(
        Config(
            model=str(tmp_path / "model"),
            url=babyai.url,
            steps=1,
            tasks_per_step=2,
            group_size=2,
            eval_episodes=0,
            rounds="2",
            mask_actions=False,
            max_new_tokens=6,
            temperature=1.0,
            out=str(tmp_path / "run"),
        )
    )
    m = json.loads(open(tmp_path / "run" / "metrics.jsonl").readline())
    assert m["losses/loss"] == m["losses/loss"] and m["signals/nonfinite_skips"] == 0
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint")
    assert any(not torch.equal(p, before[n]) for n, p in after.named_parameters() if n in before)
