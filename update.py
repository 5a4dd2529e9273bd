"""The update: what turns a batch of scored rollouts into new weights (paper, section 2; step 4
of train.py's loop, and sft.py's every step).

Where it sits: train.py calls `prepare_batch` (the log-probs the loss compares against: pi_old and
the frozen reference's), then the algorithm's `advantages`, then `update`: `epochs` passes over the
batch, each cut into minibatches; per minibatch `accumulate_gradients` runs the algorithm's loss
one micro-batch at a time (only one micro-batch's activations alive) and sums the gradients, then
one clipped optimizer step for the policy and for the algorithm's own model (PPO's critic).
sft.py runs the same `accumulate_gradients` with behaviour cloning's loss.

    for epoch in range(epochs):
        for minibatch in shuffled(batch).split(n_minibatches):      # global with N processes
            zero_grad
            for micro in micro_batches(minibatch):                   # bounded memory
                logp, entropy = token_logprobs(policy, micro)        # (B, T) at the agent tokens
                loss = algo.loss(logp, entropy, micro) * share(micro)
                loss.backward()
            clip_grad_norm; optimizer.step (skipped when the loss or a norm is not finite)

pi_old is the policy that sampled the rollouts: the sampled log-probs, or under --mixed-precision the
update's own forward before any step (`pi_old_from_update`) or a separate pass
(`recompute_old_logprobs`). Either way the first minibatch's ratio is 1 up to ON_POLICY_TOL, which
the run prints. `load_learner` builds what all of this works with: the policy (with LoRA adapters
as asked), its optimizer, the frozen reference model and the algorithm's state, prepared by
Accelerate (DDP or FSDP with several processes).
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

import tiny
from agent import Policy
from algorithm import Algorithm, mask_episodes
from batch import Batch, micro_batches, token_logprobs
from config import load_agent
from machinery import dist, lora
from machinery.accounting import OptimizerSteps, PassStats, sync_on_last_pass, token_weighted_passes
from machinery.checkpoint import load_state
from machinery.flags import flag
from machinery.logprobs import LogprobForward, disable_dropout
from machinery.timing import timed

REAL_MODEL_LR = 1e-6  # the paper's; the tiny policy's is tiny.LR
MICRO_BATCH_TOKENS = 4096
"""`--micro-batch-tokens` auto for a real model. The tiny policy's whole step is one pass (about
10k computed positions, well under 1 GB): a cut there only costs, since rows in different
micro-batches each run the prompt they share (the demo's update and reference, 21% less time)."""
ON_POLICY_TOL = 2e-2  # mean |log pi - log pi_old| per agent token before the first step: bf16's floor
# (SmolLM2, benchmarks/gpu_check.py --cpu: 1.8e-2 mean, 0.11 max; float32: ~1e-5)


@dataclass
class UpdateConfig:
    """How the weights are updated: what train.py and sft.py share."""

    lr: float = flag(0.0, at_least=0)
    """learning rate; 0: tiny.LR (5e-4) for tiny, else train.py 1e-6 (the paper's), sft.py 1e-5"""
    max_grad_norm: float = flag(1.0, above=0)
    """gradient clipping (the policy's, and an algorithm's own model's separately)"""
    micro_batch_size: int = flag(0, at_least=0)
    """rows per forward/backward at most; a minibatch's gradients are accumulated over them (the step is the
    same); 0: no row limit"""
    micro_batch_tokens: int | None = flag(None, at_least=0)
    """padded tokens per forward/backward at most (rows x the longest row; rows sorted by length fill
    micro-batches up to it, a longer row goes alone); 0: no limit; auto: no limit for tiny, else
    MICRO_BATCH_TOKENS (4096)"""
    gradient_checkpointing: bool = False
    """recompute each layer's activations in backward instead of keeping
    them (less memory, ~1/3 more compute)"""
    mixed_precision: str = flag("auto", choices=("auto", "no", "fp16", "bf16"))
    """no, fp16, bf16: autocast at rollout, evaluation and update alike (the trained weights stay float32;
    docs/reproduce.md, "Precision"); auto: bf16 for a real model where the hardware has fast bf16, else no
    (config.resolve_precision)"""
    lora_rank: int = flag(0, at_least=0)
    """train rank-R LoRA adapters (machinery/lora.py) instead of all weights; the reference is the base with
    adapters off (started from an adapter folder: that folder, frozen); 0: off"""
    lora_alpha: float = flag(0.0, at_least=0)
    """LoRA scale alpha (the update is alpha / rank * B A); 0: 2 * rank"""


@dataclass
class Learner:
    """What the update works with, built once by `load_learner`."""

    policy: Policy
    forward: torch.nn.Module  # the policy's LogprobForward as Accelerate prepared it (DDP, FSDP)
    optimizer: torch.optim.Optimizer
    ref_model: torch.nn.Module | None  # the frozen reference (None: no KL term, or LoRA's adapters off)
    ref_path: str  # the run's starting weights
    algo: Algorithm
    state: object  # the algorithm's own model and optimizer (PPO's critic), or None
    accelerator: object
    trained: list  # (model, optimizer) pairs the update steps


def load_learner(cfg, algo: Algorithm, accelerator, saved: dict | None) -> Learner:
    """The policy, its optimizer, the reference and the algorithm's state, prepared by Accelerate;
    with a checkpoint's `saved` state.pt, the optimizer and the algorithm's state as it left them."""
    policy, ref_model, ref_path = load_models(cfg, accelerator, saved)
    lr = cfg.lr or (tiny.LR if policy.is_tiny else REAL_MODEL_LR)
    resolve_micro_batch_tokens(cfg, policy)
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=lr)
    # `forward` computes the agent tokens' log-probs; Accelerate wraps it (DDP: gradients averaged in
    # backward). policy.model stays the plain model, for generation, the reference and saving.
    forward, optimizer = accelerator.prepare(LogprobForward(policy.model), optimizer)
    state = algo.init(policy.model, cfg, lr) if algo.init else None
    if state is not None:
        state.model, state.optimizer = accelerator.prepare(state.model, state.optimizer)
    if saved and saved["optimizer"] is not None:  # (None: saved under FSDP)
        optimizer.load_state_dict(saved["optimizer"])
    if saved and state is not None:
        load_state(state, cfg.resume, accelerator.unwrap_model)
    trained = [(forward, optimizer)] + ([(state.model, state.optimizer)] if state else [])
    return Learner(policy, forward, optimizer, ref_model, ref_path, algo, state, accelerator, trained)


def resolve_micro_batch_tokens(cfg, policy) -> None:
    """`--micro-batch-tokens` auto (None): no limit for the tiny policy, else MICRO_BATCH_TOKENS."""
    if cfg.micro_batch_tokens is None:
        cfg.micro_batch_tokens = 0 if policy.is_tiny else MICRO_BATCH_TOKENS


def load_models(cfg, accelerator, saved: dict | None):
    """The trained policy (with LoRA adapters, gradient checkpointing as asked), the frozen
    reference model (None: no KL term, or LoRA over a plain base, whose reference is the base with its
    adapters off) and the path of the run's starting weights, which the reference is."""
    policy = load_agent(cfg, accelerator.device, model=cfg.resume or None, trainable=True)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.mixed_precision)
    if cfg.lora_rank and not lora.has_adapters(policy.model):
        policy.model = lora.add_adapters(policy.model, cfg.lora_rank, cfg.lora_alpha)
    adapters = lora.has_adapters(policy.model)
    if half and adapters:  # fresh or resumed: the frozen base in 2 bytes, adapters fp32
        for p in policy.model.parameters():
            p.data = p.data if p.requires_grad else p.data.to(half)
    disable_dropout(policy.model)  # the update's train mode must score like the rollout's eval mode
    policy.model.get_output_embeddings().float()  # (the head stays float32: logprobs.fp32_head)
    if cfg.gradient_checkpointing:  # active in train mode only: generation keeps its KV cache
        policy.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    ref_path = saved["ref_path"] if saved else policy.path
    ref_model = None
    # LoRA's reference is the base with the adapters off, unless the run started from adapters (an SFT
    # checkpoint saved with --merge-lora false): the base alone is not the policy it started from
    if cfg.kl_coef and (not adapters or lora.is_adapter(ref_path)):
        ref_device = "cpu" if cfg.ref_device == "cpu" else accelerator.device
        ref_model = load_agent(cfg, ref_device, model=ref_path).model.eval().requires_grad_(False)
        if half and str(ref_device) != "cpu":
            ref_model.to(half)  # frozen: no fp32 master copy needed
            ref_model.get_output_embeddings().float()  # but the head in float32 (logprobs.fp32_head)
    return policy, ref_model, ref_path


def prepare_batch(learner: Learner, batch: Batch, trajs: list, cfg, tm=None) -> dict:
    """What the advantages and the loss read besides the rewards: --overlong-filter's and
    --horizon-filter's masks (no loss on an episode with a reply cut at --max-new-tokens, or on one
    the horizon ended), pi_old recomputed under --mixed-precision,
    and the reference model's log-probs for the KL term. Returns their stats."""
    policy, stats = learner.policy, {}
    if cfg.overlong_filter:
        cut = [t.truncated > 0 for t in trajs]
        stats["charts/overlong_masked"] = dist.global_sum(mask_episodes(batch, cut))
    if cfg.horizon_filter:  # not done and no error: the turns ran out (train.usable drops errors)
        out_of_turns = [not t.done and not t.error for t in trajs]
        stats["charts/horizon_masked"] = dist.global_sum(mask_episodes(batch, out_of_turns))
    if cfg.mixed_precision != "no" and not pi_old_from_update(cfg, len(trajs)):
        stats.update(recompute_old_logprobs(learner, batch, cfg, tm))
    if cfg.kl_coef:
        with (
            timed(tm, "reference"),
            learner.accelerator.autocast(),
            lora.reference(policy.model),
            dist.full_weights(learner.forward),
        ):
            batch.ref_logprobs = reference_logprobs(learner.ref_model or policy.model, batch, cfg)
    return stats


def recompute_old_logprobs(learner: Learner, batch: Batch, cfg, tm=None) -> dict:
    """pi_old from the training forward, as verl does, under --mixed-precision: in bf16/fp16 the
    sampler's cached one-token decoding rounds differently from the update's full forward, so the
    sampled log-probs would make the first ratio != 1 (docs/reproduce.md, "Precision"; in float32 they
    agree to 2e-4 and are kept). Returns the mean |sampled - recomputed| per agent token."""
    with timed(tm, "old_logprobs"), learner.accelerator.autocast(), dist.full_weights(learner.forward):
        sampled, batch.old_logprobs = batch.old_logprobs, reference_logprobs(learner.policy.model, batch, cfg)
    gap = dist.global_sum(float(((sampled - batch.old_logprobs).abs() * batch.loss_mask).sum()))
    return {"charts/sampling_logprob_gap": gap / max(dist.global_sum(float(batch.loss_mask.sum())), 1.0)}


def pi_old_from_update(cfg, n_trajs: int) -> bool:
    """Whether, under --mixed-precision, the update's own forward can stand for the recomputed pi_old
    (`recompute_old_logprobs`), saving that whole pass: when the update is one minibatch in one epoch,
    its forward runs on the weights the rollout sampled from, on the same rows in the same micro-
    batches, before any optimizer step, so it is what the separate pass would compute; and nothing
    reads pi_old before the update (no KL term: REINFORCE++ puts it in the reward).
    `accumulate_gradients` then takes pi_old from its forward (tests/test_micro_batches.py)."""
    single = cfg.epochs == 1 and dist.global_sum(n_trajs) <= cfg.minibatch_size
    return cfg.mixed_precision != "no" and single and not cfg.kl_coef


def print_on_policy_gap(stats: dict) -> None:
    """The first minibatch's |log ratio|, before any optimizer step: 0 up to ON_POLICY_TOL."""
    gap, worst = stats["charts/on_policy_gap"], stats["charts/on_policy_gap_max"]
    verdict = "on-policy" if gap <= ON_POLICY_TOL else "NOT on-policy"
    said = f"first minibatch: |log ratio| mean {gap:.2e}, max {worst:.2e}"
    tqdm.write(f"{said} ({verdict} at tolerance {ON_POLICY_TOL:g})")


def update(forward, batch, n_trajs: int, algo, cfg, state, accelerator, trained, tm=None) -> dict:
    """`cfg.epochs` passes over the rollout batch (`n_trajs` trajectories on this process), each in
    minibatches: one clipped-ratio step of every (model, optimizer) in `trained` per minibatch.
    With N processes a minibatch is every process's share of it (each process cuts its batch into
    the same number of parts) and DDP averages the gradients. Returns the mean of each minibatch's
    (global) stats, the first minibatch's |log ratio| (`charts/on_policy_gap`), and the optimizer
    steps skipped for a non-finite loss or gradient or fp16's overflows
    (machinery/accounting.py's `OptimizerSteps`)."""
    n_minibatches = max(1, math.ceil(dist.global_sum(n_trajs) / cfg.minibatch_size))  # the same everywhere
    filler = batch.select(torch.arange(1)).trim()  # a weight-0 pass for a process with nothing in a minibatch
    optimizers = OptimizerSteps(trained, accelerator, cfg.max_grad_norm)
    stats: dict[str, list] = {}
    first = None  # the first minibatch's |log ratio| (mean, max): 0 up to rounding, or pi_old is not pi's
    from_forward = pi_old_from_update(cfg, n_trajs)  # pi_old: the first forward (no separate pass)
    for _ in range(cfg.epochs):
        for part in torch.randperm(n_trajs).tensor_split(n_minibatches):
            mb = batch.select(torch.isin(batch.traj, part).nonzero().squeeze(-1))
            optimizers.zero_grad()
            with timed(tm, "forward_backward"):
                st = accumulate_gradients(forward, mb, algo, cfg, state, accelerator, filler, from_forward)
            with timed(tm, "optimizer"):
                norms = optimizers.step(st["losses/loss"])
            top = st.pop("max_log_ratio")
            first = first or (st["losses/abs_log_ratio"], top)
            st["losses/grad_norm"] = norms[0]  # the policy's, before clipping
            for k, v in st.items():
                stats.setdefault(k, []).append(v)
    return {
        **{k: float(np.mean(v)) for k, v in stats.items()},
        **optimizers.stats(),
        "charts/on_policy_gap": first[0],
        "charts/on_policy_gap_max": first[1],
    }


def accumulate_gradients(forward, mb, algo, cfg, state, accelerator, filler=None, pi_old_from_forward=False):
    """Backward of the algorithm's loss on minibatch `mb`, one micro-batch at a time (only one
    micro-batch's activations alive). `forward`: the policy, or its `logprobs.LogprobForward` as
    Accelerate prepared it (DDP, FSDP).

    Each micro-batch's loss is weighted by its share of the minibatch's agent tokens, so the
    accumulated gradients are the minibatch's (tests/test_micro_batches.py); with N processes the
    weights count every process's tokens, a process with fewer micro-batches runs weight-0 filler
    passes (`filler`, default its last micro-batch), and only the last pass averages the gradients:
    machinery/accounting.py. `pi_old_from_forward` (`pi_old_from_update`): each micro-batch's pi_old
    is its own forward's log-probs, detached (every ratio 1, as after a recompute); the gap to the
    sampled ones is logged. Returns the global minibatch's stats."""
    cut = micro_batches(mb, cfg.micro_batch_size, cfg.micro_batch_tokens) if len(mb) else []
    micros = [m for _, m in cut]
    passes = token_weighted_passes(mb, micros, filler)
    models = [forward] + ([state.model] if state is not None else [])
    stats = PassStats()
    for i, (micro, w) in enumerate(passes):
        with sync_on_last_pass(accelerator, models, last=i == len(passes) - 1):
            sampled = {}  # |sampled - pi_old| per agent token, when pi_old is this forward's
            with accelerator.autocast():
                logp, ent = token_logprobs(forward, micro, cfg.temperature, with_entropy=True)  # (B, T)
                if pi_old_from_forward:
                    sampled = pi_old_is_this_forward(micro, logp)
                loss, st = algo.loss(logp, ent, micro, cfg, state)
            accelerator.backward(loss * w * dist.world())
        stats.add({**st, **sampled, "losses/loss": loss.item()}, w, logp, micro)
    return stats.global_stats()


def pi_old_is_this_forward(micro, logp: torch.Tensor) -> dict:
    """`micro`'s pi_old set to `logp`, detached; returns the mean |sampled - logp| per agent token."""
    m = micro.loss_mask.to(logp.device)
    gap = (micro.old_logprobs.to(logp.device) - logp.detach()).abs() * m
    micro.old_logprobs = logp.detach().float()
    return {"charts/sampling_logprob_gap": float(gap.sum() / m.sum().clamp(min=1))}


@torch.no_grad()
def reference_logprobs(model, batch, cfg) -> torch.Tensor:
    """(B, T) log-probs of the agent tokens under the frozen reference `model`, once per batch,
    in the update's micro-batches (`micro_batches`) on whatever device the model is on."""
    out = torch.zeros_like(batch.loss_mask)
    for rows, micro in micro_batches(batch, cfg.micro_batch_size, cfg.micro_batch_tokens):
        lp, _ = token_logprobs(model, micro, cfg.temperature)
        out[rows, : lp.shape[1]] = lp.float().cpu()
    return out
