"""Every algorithm in every precision a GPU user will pick: one training step under bf16 autocast,
with LoRA and without, whose first minibatch is on-policy; fp16's loss scaler through the update
(an overflow skipped and recovered from, PPO's two optimizers); a critic that trains float32
weights, and only what the policy trains; the KL reference of a run started from an SFT checkpoint,
saved merged or as adapters, is that SFT policy."""

import contextlib
import json
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from test_micro_batches import small_batch, small_model

import ppo
import sft
from algos import ALGOS
from batch import token_logprobs
from machinery import lora
from train import Config, train
from update import ON_POLICY_TOL, load_learner, prepare_batch, update


@pytest.fixture(scope="module")
def babyai(start_server):
    return start_server("servers.babyai")


@pytest.mark.parametrize("lora_rank", [0, 4])
@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_every_algorithm_trains_a_step_under_bf16_and_its_first_minibatch_is_on_policy(
    fresh_accelerate, tiny_path, babyai, tmp_path, algo, lora_rank
):
    """train.py --mixed-precision bf16 --algo A [--lora-rank 4]: the step runs (PPO's critic put its
    bf16 head output into a float32 tensor and crashed) and before any optimizer step every ratio is
    1, up to bf16's floor (update.ON_POLICY_TOL)."""
    train(
        Config(
            model=tiny_path,
            algo=algo,
            lora_rank=lora_rank,
            mixed_precision="bf16",
            url=babyai.url,
            steps=1,
            tasks_per_step=2,
            group_size=2,
            eval_episodes=0,
            rounds="2",
            mask_actions=False,
            max_new_tokens=8,
            out=str(tmp_path),
        )
    )
    m = json.loads(open(tmp_path / "metrics.jsonl").readline())
    assert m["charts/on_policy_gap"] <= ON_POLICY_TOL
    assert m["signals/nonfinite_skips"] == 0 and m["losses/loss"] == m["losses/loss"]  # not NaN


def test_the_critic_trains_float32_weights_and_only_what_the_policy_trains():
    """Without LoRA the critic trains its whole backbone and head in float32. With LoRA over a bf16
    base (what update.load_models makes under --mixed-precision bf16) it trains its own copies of the
    adapters and its head, in float32, with optimizer state for those alone; the base stays frozen
    (before: every bf16 base weight trained in bf16, most of a small step lost to rounding)."""
    cfg = Config(algo="ppo")
    state = ppo.init(small_model(), cfg, 1e-5)
    assert all(p.requires_grad and p.dtype == torch.float32 for p in state.model.parameters())

    policy = lora.add_adapters(small_model(), rank=4)
    for p in policy.parameters():
        p.data = p.data if p.requires_grad else p.data.to(torch.bfloat16)
    state = ppo.init(policy, cfg, 1e-5)
    named = dict(state.model.named_parameters())
    trained = {n for n, p in named.items() if p.requires_grad}
    assert trained and all("lora_" in n or n.startswith("head.") for n in trained)
    assert all(named[n].dtype == torch.float32 for n in trained)
    assert all(p.dtype == torch.bfloat16 for n, p in named.items() if n not in trained)
    in_optimizer = [p for g in state.optimizer.param_groups for p in g["params"]]
    assert len(in_optimizer) == len(trained)

    batch = small_batch(False)
    ppo.advantages(batch, cfg, state)
    torch.nn.init.normal_(state.model.head.weight, std=0.1)
    before = {n: named[n].detach().clone() for n in trained}
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the critic's values in float32 under autocast
        values = state.model(batch)
        assert values.dtype == torch.float32
        ppo.value_loss(values, batch, cfg)[0].backward()
    state.optimizer.step()
    moved = [n for n in trained if not torch.equal(before[n], named[n])]
    assert moved and all(p.grad is None for n, p in named.items() if n not in trained)


def ppo_update(accelerator, fp16=None, overflowing: int = 0, steps: int = 1) -> list:
    """`steps` PPO updates (policy and critic, two optimizers) of small_model on small_batch, one
    minibatch each. `fp16` (pytest's monkeypatch): with the scaler `Accelerator(mixed_precision=
    "fp16")` attaches on a GPU, attached on the CPU, where Accelerate refuses fp16: one GradScaler
    handed to every optimizer at prepare, native AMP on after it (before it, prepare would wrap the
    models' forward in fp16 autocast; the compute stays float32 here: the scaler's path is tested).
    `overflowing`: the first this many steps' gradients are made infinite, as fp16's scaled gradients
    overflow. Returns (weights, stats, loss scale) before the first step and after each."""
    cfg = Config(algo="ppo", minibatch_size=5, kl_coef=0.0, critic_lr=1e-3, lr=1e-3, mixed_precision="no")
    model = small_model()
    state = ppo.init(model, cfg, cfg.lr)
    torch.nn.init.normal_(state.model.head.weight, std=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    if fp16:
        accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    model, opt = accelerator.prepare(model, opt)
    state.model, state.optimizer = accelerator.prepare(state.model, state.optimizer)
    if fp16:
        assert opt.scaler is accelerator.scaler is state.optimizer.scaler
        fp16.setattr(accelerator, "native_amp", True)
        fp16.setattr(accelerator.state, "_mixed_precision", "fp16")
        fp16.setattr(accelerator, "autocast", contextlib.nullcontext)
    trained = [(model, opt), (state.model, state.optimizer)]
    batch = small_batch(False)
    ppo.advantages(batch, cfg, state)
    hook = next(model.parameters()).register_hook(lambda g: g * float("inf")) if overflowing else None
    weights = lambda: [p.detach().clone() for m, _ in trained for p in m.parameters()]
    scale = lambda: accelerator.scaler.get_scale() if accelerator.scaler else None
    out = [(weights(), None, scale())]
    for step in range(1, steps + 1):
        st = update(model, batch, 5, ALGOS["ppo"], cfg, state, accelerator, trained)
        if step == overflowing:  # the later steps' gradients are finite
            hook = hook.remove()
        out.append((weights(), st, scale()))
    return out


def assert_same(a: list, b: list) -> None:
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)


def test_fp16s_scaler_steps_ppos_two_optimizers_like_float32(fresh_accelerate, monkeypatch):
    """One scaler, two optimizers (the policy's and the critic's): the update unscales each gradient
    once and updates the scale once (before: the second clip raised "unscale_() has already been
    called"; stepping each through Accelerate would unscale the critic's gradients twice). A scale
    of 2^16 is exact in float32, so the weights are float32's."""
    plain = ppo_update(Accelerator(cpu=True))
    accelerator = Accelerator(cpu=True)
    scaled = ppo_update(accelerator, fp16=monkeypatch)
    assert_same(scaled[1][0], plain[1][0])
    assert scaled[1][1]["charts/fp16_overflow_skips"] == 0 and scaled[1][2] == 2.0**16


def test_an_fp16_overflow_is_skipped_the_scale_halves_and_the_next_step_trains(fresh_accelerate, monkeypatch):
    """The first step's gradients overflow: no weight moves, the scaler halves its scale, the step is
    counted as an overflow (not a non-finite alarm), and the next minibatch steps as float32 would
    have on its first (before: the scaler's update was never called and the next clip raised)."""
    plain = ppo_update(Accelerator(cpu=True))
    accelerator = Accelerator(cpu=True)
    (start, _, _), (skipped, first, scale), (trained, second, _) = ppo_update(accelerator, monkeypatch, 1, 2)
    assert first["charts/fp16_overflow_skips"] == 1 and first["signals/nonfinite_skips"] == 0
    assert scale == 2.0**15 and all(torch.equal(a, b) for a, b in zip(start, skipped))
    assert second["charts/fp16_overflow_skips"] == 0
    assert_same(trained, plain[1][0])


def test_an_fp16_run_whose_every_step_overflows_raises_the_non_finite_alarm(fresh_accelerate, monkeypatch):
    """Gradients non-finite at every step, the loss finite: the scaler skips each step and halves its
    scale, no weight moves, and once that has held for --alarm-patience steps the non-finite alarm
    fires with its fix (before: each skip was counted as a routine overflow, no alarm read it, and
    the run went on without training, in silence). One overflow among trained steps does not."""
    from machinery import signals

    cfg = Config(alarm_patience=3)
    accelerator = Accelerator(cpu=True)
    out = ppo_update(accelerator, monkeypatch, overflowing=3, steps=3)
    history = [dict(st, step=k) for k, (_, st, _) in enumerate(out[1:], start=1)]
    assert all(torch.equal(a, b) for a, b in zip(out[0][0], out[-1][0]))  # nothing trained
    assert [st["charts/fp16_loss_scale"] for st in history] == [2.0**15, 2.0**14, 2.0**13]
    assert all(st["signals/nonfinite_skips"] == 0 for st in history)  # the loss stayed finite
    fired = lambda h: "non_finite" in signals.check(h, cfg)  # noqa: E731 (the random batch's KL fires too)
    assert [fired(history[:k]) for k in (1, 2, 3)] == [False, False, True]
    said = signals.describe("non_finite", history)
    assert "100% of the optimizer steps" in said and "try bf16 or no" in said

    once = [dict(history[0], step=1), {**history[0], "step": 2, "charts/fp16_overflow_share": 0.0}]
    assert not fired(once + [dict(once[1], step=3)])
    low = [{**history[0], "charts/fp16_overflow_share": 0.5, "charts/fp16_loss_scale": 0.5}]
    assert fired(low)  # the scale below the floor: fired at once


@pytest.mark.parametrize("merge", [True, False])
def test_the_kl_reference_of_a_run_from_an_sft_checkpoint_is_the_sft_policy(
    fresh_accelerate, tiny_path, tmp_path, merge
):
    """sft.py saves its policy merged (a plain folder) or, with --merge-lora false, as adapters over
    the base. RL from either, with LoRA, takes that SFT policy as its reference: the reference's
    log-probs equal the policy's before any update (before: from the adapter folder the reference
    was the base with the adapters off, not the policy RL started from)."""
    import tiny

    policy = tiny.load(tiny_path, "babyai")
    policy.model = lora.add_adapters(policy.model, rank=4)
    torch.manual_seed(0)
    for name, p in policy.model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)  # an SFT that moved the policy away from its base
    folder = str(tmp_path / "sft")
    sft.save(policy, folder, merge_lora=merge, summary={})
    assert lora.is_adapter(folder) != merge

    cfg = Config(model=folder, lora_rank=4, kl_coef=0.1, mixed_precision="no", out=str(tmp_path / "rl"))
    learner = load_learner(cfg, ALGOS["grpo"], Accelerator(cpu=True), None)
    batch = small_batch(False)
    batch.input_ids = batch.input_ids % len(learner.policy.tokenizer)
    prepare_batch(learner, batch, [SimpleNamespace(truncated=0)] * 5, cfg)
    with torch.no_grad():
        now, _ = token_logprobs(learner.policy.model, batch, cfg.temperature)
    agent = batch.loss_mask > 0
    assert (now[agent] - batch.ref_logprobs[agent]).abs().max() < 1e-5
