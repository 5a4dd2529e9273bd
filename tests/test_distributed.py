"""Several processes, one run (machinery/dist.py, `accelerate launch`), on this CPU machine: two gloo
processes started the way a user starts them. N processes roll out N shares of the step and make
one update: the same advantages and the same parameter change as one process holding every
trajectory, and one set of files."""

import json
import os
import subprocess
import sys
import uuid

import psutil
import torch

from envs import free_port
from machinery import dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import distributed_update  # noqa: E402


def launch(script: str, *args: str, marker: str = "") -> subprocess.CompletedProcess:
    """`accelerate launch` with 2 CPU processes: --multi_gpu is the form that starts two (gloo;
    `--cpu --num_processes 2` starts one); a free port, so that parallel runs do not collide."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        script,
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGENTGYM_TEST_MARKER": marker}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_shares_are_contiguous_cover_the_list_and_one_process_is_the_identity():
    items = list(range(7))
    shares = [dist.shard(items, r, 3) for r in range(3)]
    assert shares == [[0, 1, 2], [3, 4], [5, 6]]
    assert dist.shard(items) == items and dist.gather(items) == items  # one process: no-ops
    assert dist.global_sum(2.5) == 2.5 and dist.process_seed(7) == 7
    assert len({dist.process_seed(7, r) for r in range(4)}) == 4


def test_two_processes_give_the_same_advantages_and_update_as_one(tmp_path):
    launch(os.path.join("tests", "distributed_update.py"), str(tmp_path))
    parts = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert [p["world"] for p in parts] == [2, 2]
    for name in distributed_update.ALGOS_CHECKED:
        one = distributed_update.run(name)  # here: one process, every trajectory
        # each process held whole groups, different ones, and together all of them
        g0, g1 = parts[0][name]["groups"], parts[1][name]["groups"]
        assert not set(g0) & set(g1) and g0 + g1 == one["groups"]
        adv = parts[0][name]["advantages"] + parts[1][name]["advantages"]
        assert [len(a) for a in adv] == [len(a) for a in one["advantages"]]
        for a, b in zip(adv, one["advantages"]):  # REINFORCE++ and PPO whiten over the global batch
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5), name
        for p in parts:  # the update: the token mean over the global batch, on both processes
            for d, ref in zip(p[name]["delta"], one["delta"]):
                assert torch.allclose(d, ref, rtol=1e-4, atol=1e-6), name
        assert max(d.abs().max() for d in one["delta"]) > 1e-3  # there was an update to compare
    # FSDP: each process generated a different number of tokens on the gathered weights (no
    # collective inside generation), and trained through the sharded forward, twice
    assert [p["fsdp_lengths"] for p in parts] == [[9, 9], [19, 19]]


def test_a_two_process_training_run_writes_one_set_of_files_and_leaves_no_server(tmp_path):
    marker = uuid.uuid4().hex  # in the environment of every process the run starts
    launch(
        "train.py",
        "--steps",
        "2",
        "--tasks-per-step",
        "2",
        "--group-size",
        "2",
        "--minibatch-size",
        "2",
        "--eval-episodes",
        "4",
        "--rounds",
        "2,3",
        "--steps-per-stage",
        "1",
        "--save-every",
        "1",
        "--save-rollouts-every",
        "1",
        "--out",
        str(tmp_path),
        marker=marker,
    )
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]  # one writer
    for step in (1, 2):  # the step's rollouts: both processes' episodes, gathered in task order
        eps = [json.loads(x) for x in open(tmp_path / "rollouts" / f"step_{step:06d}.jsonl")]
        tasks = [e["task"] for e in eps]
        assert len(eps) == 4 and tasks[0] == tasks[1] and tasks[2] == tasks[3] and tasks[0] != tasks[2]
    for name in ("eval_before", "eval_after"):  # the test tasks shared out, every episode gathered
        assert len(open(tmp_path / name / "trajectories.jsonl").readlines()) == 4
    summary = json.load(open(tmp_path / "summary.json"))
    assert {"eval_before", "eval_after"} <= set(summary)
    saved = torch.load(tmp_path / "checkpoint" / "state.pt", weights_only=False)
    assert saved["step"] == 2 and len(saved["rng"]) == 2  # each process's sampling stream
    assert os.path.exists(tmp_path / "server.log") and os.path.exists(
        tmp_path / "server.1.log"
    )  # a server each
    left = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("AGENTGYM_TEST_MARKER") == marker:
                left.append(p.cmdline())
        except psutil.Error:
            pass
    assert not left


def test_the_fsdp_config_is_fsdp_1_wrapping_the_qwen2_layer_with_original_parameters():
    from accelerate.commands.config.config_args import load_config_from_file
    from transformers.models.qwen2 import modeling_qwen2

    cfg = load_config_from_file(os.path.join(ROOT, "accelerate_configs", "fsdp_7b.yaml"))
    fsdp = cfg.fsdp_config
    assert (
        str(cfg.distributed_type).endswith("FSDP") and fsdp["fsdp_version"] == 1
    )  # dist.full_weights: FSDP 1
    assert fsdp["fsdp_use_orig_params"] and fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert hasattr(modeling_qwen2, fsdp["fsdp_transformer_layer_cls_to_wrap"])


def test_fsdp_in_bf16_with_ranks_sharing_prompts_differently_neither_hangs_nor_regathers(tmp_path):
    """tests/fsdp_bf16.py on 2 gloo processes, FULL_SHARD with a bf16 MixedPrecision policy: process
    0's rows share one prompt, process 1's do not, and the training forward still issues the same
    collectives on both (before: two decoder passes on one, one on the other: a hang) and gives the
    float32 plain pass's log-probs to bf16 rounding, with gradients. Generation decoding 3, 13 and 30
    tokens all-gathers each of the 3 FSDP units once, not at every step (before: FSDP's bf16
    forward gathered again per token, so processes decoding different lengths fell out of step)."""
    launch(os.path.join("tests", "fsdp_bf16.py"), str(tmp_path))
    for r in (0, 1):
        d = torch.load(tmp_path / f"fsdp_rank{r}.pt", weights_only=False)
        assert d["gathers"] == [3, 3, 3] and d["grad"]
        assert len(d["logp"]) == len(d["ref"]) > 0
        torch.testing.assert_close(d["logp"], d["ref"].float(), atol=2e-2, rtol=0)


def test_sft_on_two_processes_with_an_uneven_last_batch_gives_the_one_process_weights(tiny_path, tmp_path):
    """9 demonstrations in batches of 8 on 2 processes: the last batch's shares are [[1 item], []].
    The process with none runs its passes on a weight-0 filler (before: make_batch([]) raised, and
    the other process would hang in its collectives), and the weights equal one process's for the
    same global batches (each step is the token mean over the global batch)."""
    import sft

    records = [
        {
            "task": i,
            "success": True,
            "actions": ["turn left", "go forward"],
            "observations": [f"room {i}", f"room {i} again", "done"],
            "conversation": [
                {"role": "user", "content": f"You see a red ball {i} steps ahead."},
                {"role": "assistant", "content": "turn left" + " and think" * (i % 3)},
                {"role": "user", "content": "You turned left."},
                {"role": "assistant", "content": "go forward"},
            ],
        }
        for i in range(9)
    ]
    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    flags = [
        "--model",
        tiny_path,
        "--env",
        "babyai",
        "--data",
        str(data),
        "--epochs",
        "2",
        "--batch-size",
        "8",
    ]
    flags += ["--mask-actions", "off", "--context-turns", "0", "--lr", "1e-3", "--threads", "1"]
    launch("sft.py", *flags, "--out", str(tmp_path / "two"))
    sft.main(flags + ["--out", str(tmp_path / "one")])
    from safetensors.torch import load_file

    two = load_file(tmp_path / "two" / "checkpoint" / "model.safetensors")
    one = load_file(tmp_path / "one" / "checkpoint" / "model.safetensors")
    start = load_file(os.path.join(tiny_path, "model.safetensors"))
    assert two.keys() == one.keys()
    for k in one:
        torch.testing.assert_close(two[k], one[k], rtol=1e-3, atol=5e-5)  # AdamW moves a weight ~lr = 1e-3
    assert max((one[k] - start[k]).abs().max() for k in one) > 1e-3  # there was an update to compare
