"""FSDP (1, FULL_SHARD) with a bf16 MixedPrecision policy on 2 gloo processes whose rows share
prompts differently: process 0's rows repeat one prompt (the shared-prompt path would run the
decoder twice), process 1's do not (once). Run by tests/test_distributed.py under `accelerate
launch`; a 60 s process-group timeout turns a hang into an error.

    python tests/fsdp_bf16.py OUT      # writes OUT/fsdp_rank<r>.pt
"""

import datetime
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as tdist  # noqa: E402
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP  # noqa: E402
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer  # noqa: E402

from machinery import dist  # noqa: E402
from machinery.logprobs import LogprobForward, full_logprobs, predicting_positions  # noqa: E402

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


def rows_of(rank: int):
    """Rank 0: 4 rows, one prompt of 8 tokens, each answered differently. Rank 1: 3 rows with
    prompts of their own. Right-padded; agent tokens after the prompt."""
    g = torch.Generator().manual_seed(10 + rank)
    prompt = torch.randint(0, V, (8,), generator=g)
    lengths = [14, 11, 16, 12] if rank == 0 else [13, 15, 10]
    ids = torch.zeros((len(lengths), max(lengths)), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(0, V, (n,), generator=g)
        if rank == 0:
            ids[b, :8] = prompt
        attn[b, :n] = 1
    mask = attn.float()
    mask[:, :8] = 0
    return ids, attn, mask


class Gathers:
    """Counts all-gathers (FSDP's weight gathers) while active."""

    def __init__(self):
        self.n, self.on = 0, False
        for name in ("all_gather_into_tensor", "_all_gather_base", "all_gather"):
            if hasattr(tdist, name):
                setattr(tdist, name, self.wrap(getattr(tdist, name)))

    def wrap(self, fn):
        def counted(*a, **k):
            self.n += self.on
            return fn(*a, **k)

        return counted


def main(out: str):
    cuda = torch.cuda.is_available()  # benchmarks/gpu_check.py runs it on one GPU too
    tdist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=60))
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    gathers = Gathers()
    model = small_model().to(dev)
    bf16 = MixedPrecision(
        param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16
    )
    wrapped = FSDP(
        LogprobForward(model),
        use_orig_params=True,
        device_id=dev,
        mixed_precision=bf16,
        auto_wrap_policy=functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer}
        ),
    )
    ids, attn, mask = (x.to(dev) for x in rows_of(dist.rank()))
    rows, cols = predicting_positions(mask)
    logp, _ = wrapped(ids, attn, rows, cols)  # before the fix: rank 0 two decoder passes, rank 1 one: a hang
    logp.float().sum().backward()
    # generation on the gathered weights, decoding token by token as agent.generate does: the
    # gathers happen once, however many tokens each process decodes
    counts = []
    for n in (5, 3 + 10 * dist.rank(), 30):
        gathers.n, gathers.on = 0, True
        with dist.full_weights(wrapped), torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):
            o = model(input_ids=ids[:1, :8], use_cache=True)
            for _ in range(n):
                o = model(
                    input_ids=o.logits[:, -1:].argmax(-1), past_key_values=o.past_key_values, use_cache=True
                )
        gathers.on = False
        counts.append(gathers.n)
    with dist.full_weights(wrapped):
        plain = small_model().to(dev)
        plain.load_state_dict(model.state_dict())
    ref, _ = full_logprobs(plain, ids, attn)
    torch.save(
        {
            "logp": logp.detach().float().cpu(),
            "ref": ref[rows, cols].detach().cpu(),
            "gathers": counts,
            "grad": any(p.grad is not None and p.grad.abs().sum() > 0 for p in wrapped.parameters()),
        },
        os.path.join(out, f"fsdp_rank{dist.rank()}.pt"),
    )
    tdist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
