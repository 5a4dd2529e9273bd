"""Several processes, one run: the few collective operations the training loop needs.

Where it sits: `accelerate launch --multi_gpu --num_processes N train.py` starts N copies of
train.py (one per GPU, or N CPU processes with the gloo backend). Accelerate wraps the trained
models in DistributedDataParallel (or FSDP), which averages the gradients in backward; everything
else that must agree between the processes goes through this file, and every function here is the
identity when there is one process, so train.py reads the same either way:

    shard(items)            this process's contiguous share of a list (whole groups stay together)
    global_sum(x)           the sum of x over the processes (a float or a tensor)
    global_max(x)           the largest x of any process
    gather(items)           every process's list, concatenated in process order (= the order of
                            the list that `shard` split: gather(shard(xs)) == xs)
    process_seed(seed)      the seed of this process's sampling stream
    full_weights(model)     FSDP: the whole weights on every process while it generates

Statistics over the whole batch (REINFORCE++'s and PPO's whitening, the loss's token mean) need
only sums and counts: each process sums its part, `global_sum` adds the parts, so N processes get
the same numbers as one process holding the whole batch (to float rounding).
"""

import contextlib

import torch
import torch.distributed as tdist


def active() -> bool:
    return tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1


def world() -> int:
    return tdist.get_world_size() if active() else 1


def rank() -> int:
    return tdist.get_rank() if active() else 0


def is_main() -> bool:
    return rank() == 0


def start(cpu: bool):
    """The process group of an `accelerate launch` run (a no-op in a plain `python` run); returns
    Accelerate's PartialState, whose `.device` is this process's device."""
    from accelerate import PartialState

    return PartialState(cpu=cpu)


def _device() -> torch.device:
    # NCCL reduces CUDA tensors only; gloo CPU tensors
    return (
        torch.device("cuda", torch.cuda.current_device())
        if tdist.get_backend() == "nccl"
        else torch.device("cpu")
    )


def global_sum(x):
    """The sum of `x` (a float or a tensor) over the processes, in float64, returned as `x` came."""
    if not active():
        return x
    t = torch.as_tensor(x).to(_device(), torch.float64).clone()
    tdist.all_reduce(t, op=tdist.ReduceOp.SUM)
    return t.to(x.device, x.dtype) if isinstance(x, torch.Tensor) else type(x)(t.item())


def global_max(x):
    """The largest `x` (a number) of any process."""
    if not active():
        return x
    t = torch.tensor(float(x), device=_device(), dtype=torch.float64)
    tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
    return type(x)(t.item())


def gather(items: list) -> list:
    """Every process's `items` (picklable), concatenated in process order; all processes get it."""
    if not active():
        return list(items)
    parts = [None] * world()
    tdist.all_gather_object(parts, list(items))
    return [x for part in parts for x in part]


def barrier() -> None:
    if active():
        tdist.barrier()


def shard(items: list, r: int | None = None, n: int | None = None) -> list:
    """Process r's contiguous share of `items` (of n processes): sizes differ by at most one, and
    the shares in process order are `items` again."""
    r, n = rank() if r is None else r, world() if n is None else n
    k, extra = divmod(len(items), n)
    lo = r * k + min(r, extra)
    return items[lo : lo + k + (r < extra)]


def process_seed(seed: int, r: int | None = None) -> int:
    """The seed of process r's sampling stream: the run's seed for process 0 (so one process
    samples what it always did), a different stream for each other process."""
    r = rank() if r is None else r
    return seed + 1_000_003 * r


@contextlib.contextmanager
def full_weights(model):
    """Under FSDP (accelerate_configs/fsdp_7b.yaml) each process holds 1/N of every weight, and a wrapped
    layer all-gathers its weights in each forward: a collective, so every process would have to run
    the same number of forwards, which generation does not (episodes end when they end). Here the
    whole weights are gathered once (FSDP's summon_full_params, read-only) and, while they are,
    each wrapped layer's forward is its inner module's: with a MixedPrecision policy FSDP's own
    forward would all-gather the bf16 copy again at every decoding step (a hang when processes
    decode different numbers of tokens; tests/fsdp_bf16.py). Generation then runs on the full
    weights under the run's autocast, with no collective, and they are freed after. `model`: what
    Accelerate prepared; anything else than FSDP: nothing to do."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if not isinstance(model, FSDP):
        yield
        return
    wrapped = [m for m in model.modules() if isinstance(m, FSDP)]
    with FSDP.summon_full_params(model, writeback=False):
        for m in wrapped:
            m.forward = m._fsdp_wrapped_module.forward  # an instance attribute shadows FSDP.forward
        try:
            yield
        finally:
            for m in wrapped:
                del m.forward


def global_masked_moments(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (biased) variance of x over the positions where mask is 1, in float64, over the
    GLOBAL batch: with several processes each adds its sums, so N processes whiten
    exactly as one process holding every trajectory would. Two passes (mean, then the squared
    deviations from it) rather than sum of squares: equal values give a variance of 0."""
    x, m = x.double(), mask.double()
    n = global_sum(m.sum()).clamp(min=1.0)
    mean = global_sum((x * m).sum()) / n
    var = global_sum(((x - mean) ** 2 * m).sum()) / n
    return mean, var
