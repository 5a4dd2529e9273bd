"""Micro-batches change memory, not the update: gradients accumulated over micro-batches equal the
gradients of the whole minibatch (policy and PPO's critic), and the reference log-probs computed in
micro-batches equal the ones computed at once."""

import json

import pytest
import torch
from accelerate import Accelerator
from transformers import Qwen2Config, Qwen2ForCausalLM

from algos import ALGOS
from batch import Batch, micro_batches
from train import Config
from update import accumulate_gradients, pi_old_from_update, reference_logprobs

BF16 = {"mixed_precision": "bf16", "kl_coef": 0.0}

V = 120


def small_model():
    torch.manual_seed(0)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=V,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )


def small_batch(masked: bool) -> Batch:
    """5 trajectories in 2 groups, rows of different lengths (one with no agent token), agent spans
    between observations, sampled log-probs away from the current ones, a reference."""
    g = torch.Generator().manual_seed(0)
    lengths = [14, 9, 11, 6, 12, 8]
    traj, turn = [0, 0, 1, 2, 3, 4], [0, 1, 0, 0, 0, 0]
    B, T = len(lengths), max(lengths)
    ids = torch.randint(0, V, (B, T), generator=g)
    attn, mask = torch.zeros((B, T), dtype=torch.long), torch.zeros((B, T))
    for b, n in enumerate(lengths):
        attn[b, :n] = 1
        if b != 3:  # row 3: no agent token at all
            mask[b, 3:6] = 1
            mask[b, 8:n] = 1
    allowed = None
    if masked:
        allowed = torch.full((B, T, 4), -1, dtype=torch.long)
        for b, t in mask.nonzero().tolist():
            allowed[b, t, :3] = torch.randint(0, V, (3,), generator=g)
            allowed[b, t, 0] = ids[b, t]
    return Batch(
        input_ids=ids,
        attention_mask=attn,
        loss_mask=mask,
        old_logprobs=-torch.rand((B, T), generator=g) * 2 * mask,
        allowed=allowed,
        traj=torch.tensor(traj),
        turn=torch.tensor(turn),
        rewards=torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0]),
        groups=torch.tensor([0, 0, 0, 1, 1]),
        ref_logprobs=-torch.rand((B, T), generator=g) * 2 * mask,
    )


def gradients(algo_name: str, micro: int, masked: bool, tokens: int = 0):
    cfg = Config(
        algo=algo_name,
        micro_batch_size=micro,
        micro_batch_tokens=tokens,
        kl_coef=0.1,
        entropy_coef=0.01,
        temperature=0.9,
    )
    algo, model = ALGOS[algo_name], small_model()
    state = algo.init(model, cfg, 1e-3) if algo.init else None
    if state is not None:
        torch.nn.init.normal_(state.model.head.weight, std=0.1)  # a critic that says something
    batch = small_batch(masked)
    algo.advantages(batch, cfg, state)
    stats = accumulate_gradients(model, batch, algo, cfg, state, Accelerator(cpu=True))
    models = [model] + ([state.model] if state else [])
    return [p.grad.clone() for m in models for p in m.parameters() if p.grad is not None], stats


@pytest.mark.parametrize("algo", ["grpo", "ppo", "reinforce_pp"])
@pytest.mark.parametrize("masked", [False, True])
def test_micro_batched_gradients_equal_the_whole_minibatch(algo, masked):
    whole, whole_stats = gradients(algo, 0, masked)
    for micro, tokens in ((1, 0), (4, 0), (0, 30)):
        split, stats = gradients(algo, micro, masked, tokens)
        assert len(split) == len(whole) > 0
        for a, b in zip(split, whole):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
        for k in ("losses/loss", "losses/policy_loss", "losses/kl", "losses/entropy"):
            if k in whole_stats:
                assert abs(stats[k] - whole_stats[k]) < 1e-5, k


@pytest.mark.parametrize("micro", [0, 2])
def test_pi_old_taken_from_the_update_forward_equals_a_recomputed_pi_old(fresh_accelerate, micro):
    """Under bf16 autocast, one minibatch in one epoch (update.pi_old_from_update): the gradients and
    the loss with pi_old taken from each micro-batch's own forward equal those after the separate
    recompute the update replaces (update.reference_logprobs); the sampled log-probs' gap to it is
    logged. The recompute matters: with the sampled log-probs as pi_old the loss differs."""
    cfg = Config(micro_batch_size=micro, minibatch_size=5, **BF16)
    assert pi_old_from_update(cfg, n_trajs=5)
    for other in ({"epochs": 2}, {"minibatch_size": 4}, {"kl_coef": 0.1}, {"mixed_precision": "no"}):
        assert not pi_old_from_update(Config(**{"minibatch_size": 5, **BF16, **other}), 5), other
    accelerator, algo = Accelerator(cpu=True, mixed_precision="bf16"), ALGOS["grpo"]

    def step(how: str):
        model, batch = small_model(), small_batch(False)
        algo.advantages(batch, cfg, None)
        if how == "recomputed":
            with accelerator.autocast():
                batch.old_logprobs = reference_logprobs(model, batch, cfg)
        stats = accumulate_gradients(
            model, batch, algo, cfg, None, accelerator, pi_old_from_forward=how == "forward"
        )
        return [p.grad.clone() for p in model.parameters() if p.grad is not None], stats

    (recomputed, st_r), (forward, st_f), (_, st_s) = step("recomputed"), step("forward"), step("sampled")
    for a, b in zip(recomputed, forward, strict=True):
        torch.testing.assert_close(a, b)
    assert st_f["losses/loss"] == pytest.approx(st_r["losses/loss"], abs=1e-6)
    assert st_f["losses/abs_log_ratio"] == 0 == st_r["losses/abs_log_ratio"]
    assert st_f["charts/sampling_logprob_gap"] > 0.1  # small_batch's sampled log-probs are made up
    assert abs(st_s["losses/loss"] - st_r["losses/loss"]) > 1e-3


def test_micro_batches_cover_every_row_once_and_drop_only_padding():
    batch = small_batch(masked=True)  # row lengths 14, 9, 11, 6, 12, 8
    micros = micro_batches(batch, rows=4)
    assert [idx.tolist() for idx, _ in micros] == [[3, 5, 1, 2], [4, 0]]  # sorted by length
    assert [m.input_ids.shape[1] for _, m in micros] == [11, 14]  # each its own longest row
    for idx, m in micros:
        torch.testing.assert_close(m.input_ids, batch.input_ids[idx, : m.input_ids.shape[1]])
    # a token budget: rows x longest <= 24, and a row longer than the budget alone
    micros = micro_batches(batch, tokens=24)
    assert [idx.tolist() for idx, _ in micros] == [[3, 5], [1, 2], [4], [0]]
    assert all(len(m) * m.input_ids.shape[1] <= 24 for _, m in micros)
    micros = micro_batches(batch, tokens=10)
    assert [len(idx) for idx, _ in micros] == [1] * 6
    every = torch.cat([idx for idx, _ in micros]).sort().values
    assert every.tolist() == list(range(len(batch)))
    assert sum(int(m.loss_mask.sum()) for _, m in micros) == int(batch.loss_mask.sum())


def test_reference_logprobs_in_micro_batches_equal_one_pass():
    model, batch = small_model(), small_batch(masked=True)
    whole = reference_logprobs(model, batch, Config(micro_batch_size=0, micro_batch_tokens=0))
    for micro, tokens in ((1, 0), (4, 0), (0, 24)):
        cfg = Config(micro_batch_size=micro, micro_batch_tokens=tokens)
        torch.testing.assert_close(reference_logprobs(model, batch, cfg), whole)
    assert torch.all(whole[batch.loss_mask == 0] == 0) and torch.all(whole[batch.loss_mask == 1] < 0)


def test_a_training_step_with_micro_batches_and_checkpointing_takes_the_same_gradient_step(
    tmp_path, monkeypatch
):
    """train.py end to end, one step: --micro-batch-size 1 --gradient-checkpointing true moves the
    weights exactly as the plain run does (same rollouts by seed). The optimizer is SGD at lr 1
    without clipping, so the change IS the gradient: AdamW's first step, about lr * sign(g), would
    let a wrongly scaled loss pass."""
    from safetensors.torch import load_file

    import tiny
    from train import train

    monkeypatch.setattr(torch.optim, "AdamW", lambda params, lr: torch.optim.SGD(params, lr=lr))
    start = tiny.load(tiny.tiny_policy_path("babyai"), "babyai").model.state_dict()
    weights = []
    for name, kw in [
        ("plain", dict(micro_batch_tokens=0)),
        ("split", dict(micro_batch_size=1, gradient_checkpointing=True)),
    ]:
        train(
            Config(
                steps=1,
                tasks_per_step=2,
                group_size=2,
                minibatch_size=4,
                eval_episodes=0,
                rounds="2",
                lr=1.0,
                max_grad_norm=1e9,
                out=str(tmp_path / name),
                **kw,
            )
        )
        weights.append(load_file(str(tmp_path / name / "checkpoint" / "model.safetensors")))
    metrics = [json.loads(open(tmp_path / n / "metrics.jsonl").readline()) for n in ("plain", "split")]
    assert metrics[0]["charts/reward"] == metrics[1]["charts/reward"]  # the same rollouts
    assert metrics[1]["perf/peak_memory_gb"] > 0 and metrics[1]["perf/update_tokens_per_s"] > 0
    moved = max(float((weights[0][k] - start[k]).abs().max()) for k in weights[0])
    assert moved > 1e-5  # a gradient step to compare (a loss scaled by 2 would move twice as far)
    for k in weights[0]:
        torch.testing.assert_close(
            weights[1][k] - start[k], weights[0][k] - start[k], rtol=1e-3, atol=1e-3 * moved
        )


@pytest.mark.parametrize("masked", [False, True])
def test_identical_rows_computed_once_give_each_copy_its_own_logprobs_and_gradients(masked):
    """token_logprobs runs the model on distinct rows only; every copy must still read the log-probs,
    entropies and gradients it would have had on its own (here: against row-by-row passes)."""
    from batch import token_logprobs, unique_rows

    batch = small_batch(masked)
    picks = torch.tensor([0, 1, 0, 2, 3, 1, 4, 5, 5, 0])
    dup = batch.select(picks)
    first, copies = unique_rows(dup)
    assert first.tolist() == [0, 1, 3, 4, 6, 7] and copies.tolist() == [0, 1, 0, 2, 3, 1, 4, 5, 5, 0]
    weights = torch.rand(dup.loss_mask.shape, generator=torch.Generator().manual_seed(1))

    def grads(fn):
        model = small_model()
        logp, ent = fn(model)
        ((logp + 0.1 * ent) * weights).sum().backward()
        return logp.detach(), [p.grad for p in model.parameters() if p.grad is not None]

    def each_alone(model):
        parts = [
            token_logprobs(model, dup.select(torch.tensor([b])), 0.9, with_entropy=True)
            for b in range(len(dup))
        ]
        return torch.cat([lp for lp, _ in parts]), torch.cat([e for _, e in parts])

    once, g_once = grads(lambda m: token_logprobs(m, dup, 0.9, with_entropy=True))
    alone, g_alone = grads(each_alone)
    torch.testing.assert_close(once, alone, rtol=1e-5, atol=1e-6)
    assert torch.all(once[2] == once[0]) and torch.all(once[9] == once[0])
    for a, b in zip(g_once, g_alone):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    # rows that differ only in the allowed ids are not merged
    if masked:
        other = dup.select(torch.tensor([0, 2]))
        other.allowed[1, other.loss_mask[1].nonzero()[0, 0], 1] += 1
        assert len(unique_rows(other)[0]) == 2


def test_the_tiny_policy_updates_in_one_pass_and_a_real_model_under_the_token_budget():
    """--micro-batch-tokens auto: no cut for the tiny policy (a cut runs a prompt that rows share once
    per micro-batch), MICRO_BATCH_TOKENS for a real model; a value given is kept."""
    from types import SimpleNamespace

    from update import MICRO_BATCH_TOKENS, resolve_micro_batch_tokens

    for is_tiny, given, expected in [(True, None, 0), (False, None, MICRO_BATCH_TOKENS), (True, 512, 512)]:
        cfg = Config(micro_batch_tokens=given)
        resolve_micro_batch_tokens(cfg, SimpleNamespace(is_tiny=is_tiny))
        assert cfg.micro_batch_tokens == expected
