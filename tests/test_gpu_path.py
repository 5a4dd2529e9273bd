"""The settings a GPU run depends on hold everywhere the policy generates or resumes: evaluation
generates in --generation-batch-size batches (eval_before and eval.py alike), --resume restores
every random stream (the CUDA generator too), a bf16 LoRA run resumes with its base in bf16, and
--ref-device cpu with LoRA is refused rather than ignored."""

import pytest
import torch

import agent
import train as train_module
from machinery.rng import rng_state, set_rng_state
from train import Config, train


@pytest.fixture
def batch_sizes(monkeypatch):
    """The number of episodes of every generate() call."""
    seen = []
    real = agent.generate

    def spy(policy, contexts, *a, **k):
        seen.append(len(contexts))
        return real(policy, contexts, *a, **k)

    monkeypatch.setattr(agent, "generate", spy)
    return seen


def test_evaluation_generates_in_batches_of_generation_batch_size(tmp_path, batch_sizes):
    """eval_before / eval_after of train.py and eval.py itself (before: always up to 256 at once)."""
    import eval as eval_module

    train(
        Config(
            steps=1,
            tasks_per_step=1,
            group_size=2,
            eval_episodes=6,
            rounds="2",
            generation_batch_size=2,
            out=str(tmp_path / "run"),
        )
    )
    assert batch_sizes and max(batch_sizes) == 2
    batch_sizes.clear()
    eval_module.main(
        [
            "--limit",
            "5",
            "--horizon",
            "2",
            "--generation-batch-size",
            "2",
            "--parallel",
            "5",
            "--out",
            str(tmp_path / "eval"),
        ]
    )
    assert batch_sizes and max(batch_sizes) == 2


def test_episodes_in_flight_rolls_a_step_out_in_chunks_and_learns_from_every_episode(
    tmp_path, batch_sizes, monkeypatch
):
    """--episodes-in-flight 4: the pool holds 4 environment instances, no forward generates for more
    than 4 episodes, and the step still learns from all 3 tasks x 3 samples, whole groups."""
    import json

    import loop.run

    sizes, real = [], loop.run.open_pool
    monkeypatch.setattr(
        loop.run, "open_pool", lambda env, size, **k: sizes.append(size) or real(env, size, **k)
    )
    out = tmp_path / "run"
    train(Config(steps=1, tasks_per_step=3, group_size=3, eval_episodes=5, rounds="2", episodes_in_flight=4,
                 save_rollouts_every=1, out=str(out)))  # fmt: skip
    assert sizes == [4] and batch_sizes and max(batch_sizes) == 4
    tasks = [json.loads(line)["task"] for line in open(out / "rollouts" / "step_000001.jsonl")]
    assert len(tasks) == 9 and sorted(tasks.count(t) for t in set(tasks)) == [3, 3, 3]  # whole groups
    assert json.load(open(out / "summary.json"))["eval_before"]["n_episodes"] == 5


def test_resume_restores_the_cuda_generator_when_there_is_one(monkeypatch):
    """Sampling on a GPU draws from the CUDA generator: rng_state keeps it and set_rng_state
    puts it back (faked here: this machine has no CUDA)."""
    cuda = {"state": torch.tensor([1, 2, 3], dtype=torch.uint8)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: cuda["state"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s: cuda.update(state=s))
    saved = rng_state()
    cuda["state"] = torch.tensor([9, 9, 9], dtype=torch.uint8)  # the run went on drawing
    set_rng_state(saved)
    assert cuda["state"].tolist() == [1, 2, 3]


def test_a_bf16_lora_run_resumes_with_its_base_in_bf16(fresh_accelerate, tmp_path, monkeypatch):
    """The frozen base is cast to bf16 when adapters are added and again when they are loaded on
    --resume (before: fp32 after a resume, twice the memory and another reference model); the
    adapters and the LM head (tied: the embedding) stay float32."""
    dtypes = []
    real = train_module.update

    def spy(forward, *a, **k):
        model = getattr(forward, "model", forward)
        head = {id(p) for p in model.get_output_embeddings().parameters()}  # float32 (logprobs.fp32_head)
        dtypes.append(
            {
                ("adapter" if "lora_" in n else "head" if id(p) in head else "base", p.dtype)
                for n, p in model.named_parameters()
            }
        )
        return real(forward, *a, **k)

    monkeypatch.setattr(train_module, "update", spy)
    cfg = Config(
        steps=1,
        tasks_per_step=1,
        group_size=2,
        eval_episodes=0,
        rounds="2",
        lora_rank=4,
        mixed_precision="bf16",
        out=str(tmp_path / "run"),
    )
    train(cfg)
    train(Config(**{**cfg.__dict__, "steps": 2, "resume": str(tmp_path / "run" / "checkpoint")}))
    assert len(dtypes) == 2
    want = {("base", torch.bfloat16), ("adapter", torch.float32), ("head", torch.float32)}
    assert dtypes[0] == dtypes[1] == want


def test_ref_device_cpu_with_lora_is_refused():
    with pytest.raises(ValueError, match="--ref-device cpu does nothing with --lora-rank"):
        train(Config(lora_rank=4, ref_device="cpu", steps=1, eval_episodes=0))
