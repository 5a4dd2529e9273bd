"""Advantages and one update on fixed trajectories, as N processes compute them (machinery/dist.py).

Run by tests/test_distributed.py twice: under `accelerate launch --multi_gpu --num_processes 2`
(each process takes its share of the groups, as train.py shards a step's tasks) and inside the
test's own process (one process, every trajectory). The groups are uneven (3, 3, 2, 2 episodes of
1-3 turns of different lengths), so the processes hold different numbers of trajectories, rows,
agent tokens and micro-batches. The optimizers are SGD with lr 1 and no clipping, so the parameter
change IS the gradient (AdamW's first step would hide a wrongly scaled loss).

    python tests/distributed_update.py OUT      # writes OUT/rank<r>.pt
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from agent import Trajectory  # noqa: E402
from algos import ALGOS  # noqa: E402
from batch import Row, make_batch, token_logprobs  # noqa: E402
from machinery import dist  # noqa: E402
from machinery.logprobs import LogprobForward  # noqa: E402
from train import Config  # noqa: E402
from update import reference_logprobs, update  # noqa: E402

V = 120
GROUP_SIZES = [3, 3, 2, 2]  # two processes: groups 0-1 (6 episodes) and 2-3 (4 episodes)
ALGOS_CHECKED = ["grpo", "reinforce_pp", "ppo"]


def small_model(seed: int = 0):
    torch.manual_seed(seed)
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


def trajectories(model) -> list[Trajectory]:
    """Every group's episodes (the same on every process); old log-probs = the model's own."""
    g = torch.Generator().manual_seed(0)
    rnd = lambda lo, hi: int(torch.randint(lo, hi, (1,), generator=g))
    out = []
    for group, size in enumerate(GROUP_SIZES):
        for _ in range(size):
            turns, rows = rnd(1, 4), []
            for _ in range(turns):  # one row per turn: an observation, then the agent's reply
                n, start = rnd(10, 24), rnd(3, 8)
                rows.append(
                    Row(
                        ids=torch.randint(0, V, (n,), generator=g).tolist(),
                        mask=[0] * start + [1] * (n - start),
                        logprobs=[0.0] * n,
                    )
                )
            out.append(
                Trajectory(
                    task=group,
                    group=group,
                    rows=rows,
                    actions=["a"] * turns,
                    observations=[f"state {rnd(0, 2)}" for _ in range(turns)],
                    reward=[0.0, 0.5, 1.0][rnd(0, 3)],
                )
            )
    with torch.no_grad():
        for tr in out:
            for row in tr.rows:
                lp, _ = token_logprobs(model, make_batch([Trajectory(task=0, group=0, rows=[row])], 0))
                row.logprobs = lp[0].tolist()
    return out


def run(algo_name: str) -> dict:
    """This process's share of the groups -> its trajectories' advantages (agent tokens, in order)
    and every parameter's change after one update."""
    accelerator = Accelerator(cpu=True)
    cfg = Config(
        algo=algo_name,
        micro_batch_size=2,
        minibatch_size=1000,
        epochs=1,
        kl_coef=0.1,
        entropy_coef=0.01,
        max_grad_norm=1e9,
    )
    algo, model = ALGOS[algo_name], small_model()
    mine = dist.shard(list(range(len(GROUP_SIZES))))
    trajs = [t for t in trajectories(model) if t.group in mine]
    batch = make_batch(trajs, 0)
    batch.ref_logprobs = reference_logprobs(small_model(seed=1), batch, cfg)
    state = algo.init(model, cfg, 1.0) if algo.init else None
    forward, optimizer = accelerator.prepare(
        LogprobForward(model), torch.optim.SGD(model.parameters(), lr=1.0)
    )
    trained = [(forward, optimizer)]
    if state is not None:
        torch.nn.init.normal_(state.model.head.weight, std=0.1, generator=torch.Generator().manual_seed(2))
        state.optimizer = torch.optim.SGD(state.model.parameters(), lr=1.0)
        state.model, state.optimizer = accelerator.prepare(state.model, state.optimizer)
        trained.append((state.model, state.optimizer))
    algo.advantages(batch, cfg, state)
    adv = [
        batch.advantages[batch.traj == n][batch.loss_mask[batch.traj == n] > 0].tolist()
        for n in range(len(trajs))
    ]
    models = [model] + ([accelerator.unwrap_model(state.model)] if state else [])
    before = [p.detach().clone() for m in models for p in m.parameters()]
    update(forward, batch, len(trajs), algo, cfg, state, accelerator, trained)
    after = [p.detach().clone() for m in models for p in m.parameters()]
    return {
        "groups": [t.group for t in trajs],
        "advantages": adv,
        "delta": [a - b for a, b in zip(after, before)],
    }


def fsdp_generation() -> list[int]:
    """FSDP (1, as accelerate_configs/fsdp_7b.yaml asks; torch's FSDP directly, as Accelerate enables FSDP
    on GPUs only): generate under dist.full_weights, process r for 3 + 10 r new tokens (different
    numbers of forwards: no collective may happen inside), then forward and backward through the
    sharded LogprobForward, then generate again. Returns the generated lengths."""
    import functools

    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    model = small_model()
    wrapped = FSDP(
        LogprobForward(model),
        use_orig_params=True,
        device_id=torch.device("cpu"),
        auto_wrap_policy=functools.partial(
            transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer}
        ),
    )
    assert isinstance(model.model.layers[0], FSDP)  # the policy's layers are sharded
    ids, n = torch.randint(0, V, (1, 6), generator=torch.Generator().manual_seed(0)), 3 + 10 * dist.rank()
    lengths = []
    for _ in range(2):
        with dist.full_weights(wrapped), torch.no_grad():
            lengths.append(model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False).shape[1])
        logp, _ = wrapped(ids, torch.ones_like(ids), torch.tensor([0, 0]), torch.tensor([2, 3]))
        logp.sum().backward()
    return lengths


if __name__ == "__main__":
    out = sys.argv[1]
    results = {name: run(name) for name in ALGOS_CHECKED}
    results["world"] = dist.world()
    results["fsdp_lengths"] = fsdp_generation()
    torch.save(results, os.path.join(out, f"rank{dist.rank()}.pt"))
