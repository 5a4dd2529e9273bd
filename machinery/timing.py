"""Where the time of a training step goes: one tiny section timer.

Where it sits: `agent.rollout()` and `train.train()` take an optional `timings` dict and wrap
each part of their work in `with timed(timings, "section"):`; `benchmarks/rollout_profile.py`
passes a dict per step and prints them as a table. With `timings=None` (every normal run) the
timer does nothing but return, so the loop pays nothing for being measurable.

Sections add up (a section entered twice in a step counts twice) and may nest: "generate" holds
"prefill", "decode" and "mask", so a table lists the inner ones under the outer.
"""

import sys
import time
from contextlib import contextmanager

from machinery import dist


@contextmanager
def timed(timings: dict | None, name: str):
    """Add the seconds spent in the `with` block to `timings[name]` (nothing if timings is None)."""
    if timings is None:
        yield
        return
    _sync()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _sync()
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0


def _sync():
    # CUDA kernels run asynchronously: without waiting for them a section would be charged for
    # the work queued by the one before it. Only when torch is already in use and on a GPU.
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def profile_row(step: int, horizon: int, episodes: int, batch, t0: float, timings: dict) -> dict:
    """One step's line of the profile (train.train's `profile`): its size, its seconds in all since
    `t0`, and each section's."""
    tokens = int(dist.global_sum(int(batch.loss_mask.sum())))  # the agent's own tokens, every process's
    row = {"step": step, "horizon": horizon, "episodes": episodes, "agent_tokens": tokens}
    return {**row, "total": time.time() - t0, **timings}
