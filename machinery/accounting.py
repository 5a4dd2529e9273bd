"""The update's accounting: what makes micro-batches, several processes and fp16 give the step the
math asks for, kept apart from the math (update.py).

Where it sits: `update.update` runs epochs x minibatches; per minibatch `update.accumulate_gradients`
runs the algorithm's loss one micro-batch at a time over `token_weighted_passes`, each backward
inside `sync_on_last_pass`, its stats summed by `PassStats`; then `OptimizerSteps.step` clips and
steps every optimizer (`step_optimizers`). sft.py runs the same.

- Token-weighted accumulation across processes: every loss term is a token-mean over the
  minibatch's agent tokens, so micro-batch i's loss, weighted by its share n_i / n of those tokens
  (n: every process's, dist.global_sum), sums to the minibatch's; DDP averages gradients over the N
  processes, so each backward is scaled by N * n_i / n (tests/test_micro_batches.py,
  tests/test_distributed.py).
- Filler passes: every process runs the same number of passes (DDP and FSDP communicate in each);
  one with fewer micro-batches repeats a filler at weight 0.
- `no_sync`: only the last pass averages the gradients across processes.
- fp16's scaler: one loss scaler serves every optimizer (`step_optimizers`); a step it skips on an
  overflow is counted apart from a step skipped for a non-finite loss (`OptimizerSteps`).
"""

import contextlib
import math
from unittest import mock

import torch

from machinery import dist


def token_weighted_passes(mb, micros: list, filler=None) -> list[tuple[object, float]]:
    """(micro-batch, weight) per backward pass over minibatch `mb` cut into `micros`: weight n_i / n,
    n the agent tokens of the minibatch on every process; then weight-0 passes of `filler` (default:
    the last micro-batch) until this process runs as many passes as the process with the most."""
    n = dist.global_sum(float(mb.loss_mask.sum()))
    passes = [(m, float(m.loss_mask.sum()) / n if n > 0 else 0.0) for m in micros]
    passes += [(filler or micros[-1], 0.0)] * (dist.global_max(len(passes)) - len(passes))
    return passes


@contextlib.contextmanager
def sync_on_last_pass(accelerator, models: list, last: bool):
    """Accumulate gradients locally (DDP's `no_sync`) on every pass but the last, whose backward
    averages them over the processes."""
    with contextlib.ExitStack() as no_sync:
        if not last:
            for model in models:
                no_sync.enter_context(accelerator.no_sync(model))
        yield


class PassStats:
    """The minibatch's stats: each pass's, weighted by its token share, summed over every process;
    and the largest |log ratio| of any agent token (a weight-0 filler's aside)."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.max_log_ratio = 0.0

    def add(self, stats: dict, w: float, logp, micro) -> None:
        for k, v in stats.items():
            self.sums[k] = self.sums.get(k, 0.0) + w * v
        agent = micro.loss_mask.to(logp.device) > 0
        gap = (logp.detach() - micro.old_logprobs.to(logp.device))[agent].abs()  # |log ratio| per agent token
        self.sums["losses/abs_log_ratio"] = self.sums.get("losses/abs_log_ratio", 0.0) + w * float(
            gap.mean() if len(gap) else 0.0
        )
        if w > 0 and len(gap):
            self.max_log_ratio = max(self.max_log_ratio, float(gap.max()))

    def global_stats(self) -> dict:
        keys = sorted(self.sums)  # the same on every process
        summed = dist.global_sum(torch.tensor([self.sums[k] for k in keys], dtype=torch.float64)).tolist()
        return {**dict(zip(keys, summed)), "max_log_ratio": dist.global_max(self.max_log_ratio)}


def step_optimizers(
    trained: list, accelerator, max_grad_norm: float, loss: float
) -> tuple[list[float], bool]:
    """Clip each model's gradients on its own (the policy's, then the algorithm's own model's; the
    norms are global, the same on every process) and step every optimizer, or none when the loss or
    a norm is not finite: a NaN/inf would poison the weights (signals.py's alarm). Returns the norms
    before clipping and whether the optimizers stepped.

    Under fp16 one loss scaler serves every optimizer: it unscales all of them once, before the
    clips (Accelerate's clip_grad_norm_ unscales every prepared optimizer at each call, so a second
    model's clip would raise), steps each, and updates its scale once per step, a skipped one
    included: an overflow (inf gradients, common at fp16's first scales) halves the scale and the
    next minibatch tries again. Without a scaler (float32, bf16) the unscale is a no-op."""
    scaler = accelerator.scaler
    accelerator.unscale_gradients()  # fp16: gradients / loss scale, every optimizer, once
    with mock.patch.object(accelerator, "unscale_gradients", lambda *a, **k: None):  # (done just above)
        norms = [
            float(accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)) for model, _ in trained
        ]
    stepped = all(map(math.isfinite, norms + [loss]))
    if stepped:
        for _, opt in trained:
            # the scaler steps the inner optimizer: Accelerate's step would update the scale after each
            # optimizer, and the next optimizer's gradients would be unscaled a second time
            if scaler:
                scaler.step(getattr(opt, "optimizer", opt))
            else:
                opt.step()
    if scaler:
        scaler.update()
    return norms, stepped


class OptimizerSteps:
    """`step_optimizers` for every minibatch of an update, counting the steps skipped: for a
    non-finite loss or gradient (`signals/nonfinite_skips`: machinery/signals.py's alarm), and under
    fp16 those its loss scaler skipped on an overflow (`charts/fp16_overflow_skips`, their share of
    the steps tried and the scale after the update: every step skipped, or the scale below a floor,
    is a run that cannot train in fp16, and the non-finite alarm says so)."""

    def __init__(self, trained: list, accelerator, max_grad_norm: float):
        self.trained, self.accelerator, self.max_grad_norm = trained, accelerator, max_grad_norm
        self.tried = self.skipped = self.overflows = 0

    def zero_grad(self) -> None:
        for _, opt in self.trained:
            opt.zero_grad()

    def step(self, loss: float) -> list[float]:
        """Clip and step every optimizer (or none); the norms before clipping."""
        norms, stepped = step_optimizers(self.trained, self.accelerator, self.max_grad_norm, loss)
        # fp16's scaler skips a step whose scaled gradients overflowed and lowers its scale:
        # routine in the first steps, not the alarm's business (a non-finite loss still is)
        overflow = not stepped and self.accelerator.scaler is not None and math.isfinite(loss)
        self.tried += 1
        self.overflows += overflow
        self.skipped += not stepped and not overflow
        return norms

    def stats(self) -> dict:
        """The counts, once the update is done; the gradients freed before the next rollout."""
        for _, opt in self.trained:
            opt.zero_grad(set_to_none=True)
        scaler = self.accelerator.scaler
        if scaler is None:
            return {"signals/nonfinite_skips": self.skipped}
        return {
            "signals/nonfinite_skips": self.skipped,
            "charts/fp16_overflow_skips": self.overflows,
            "charts/fp16_overflow_share": self.overflows / self.tried,
            "charts/fp16_loss_scale": float(scaler.get_scale()),
        }
