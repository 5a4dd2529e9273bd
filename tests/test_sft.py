"""Behaviour cloning (sft.py): demonstrations in both formats, the rollout's own token rows, a loss
that imitates, and checkpoints that the RL loop and the evaluation load."""

import json
import os

import pytest
import torch

import eval as evaluation
import sft
import tiny
from agent import Trajectory, rollout
from batch import make_batch
from envs import ENVS, EnvPool
from tests.test_agent import spans

SPEC = ENVS["babyai"]


@pytest.fixture(scope="module")
def pool(start_server):
    server = start_server("servers.babyai")
    p = EnvPool(url=server.url, size=4)
    yield p
    p.close()


@pytest.fixture(scope="module")
def episodes(tiny_path, pool):
    """Four real BabyAI episodes of the tiny policy (masked sampling, whole conversation)."""
    torch.manual_seed(0)
    policy = tiny.load(tiny_path, "babyai")
    policy.context_turns = 0
    return rollout(policy, pool, SPEC, SPEC.splits["train"][:4], horizon=3)


def as_react(trajs):
    """The same episodes with every reply in the ReAct format a free-writing expert uses."""
    out = []
    for t in trajs:
        msgs = [
            dict(m, content=f"Thought: I will {m['content']}.\nAction: {m['content']}")
            if m["role"] == "assistant"
            else m
            for m in t.messages
        ]
        out.append(
            Trajectory(
                task=t.task,
                group=t.group,
                messages=msgs,
                actions=t.actions,
                observations=t.observations,
                success=True,
            )
        )
    return out


# --- the loader ------------------------------------------------------------------------------------


def test_eval_episodes_round_trip_through_the_loader_and_agenttraj(episodes, tmp_path):
    path = tmp_path / "trajectories.jsonl"
    evaluation.write_trajectories(str(path), as_react(episodes))
    demos = sft.load_demos(str(path), SPEC.parse_action)
    assert len(demos) == len(episodes)
    for d, t in zip(demos, episodes):
        # the k-th observation is the one the k-th reply answered; the system message is not a turn
        assert [o for o, _ in d.turns] == t.observations[: t.turns]
        assert [r for _, r in d.turns] == [f"Thought: I will {a}.\nAction: {a}" for a in t.actions]
        assert d.actions == t.actions and d.name == f"task {t.task}"
    # out to AgentGym's AgentTraj and back in: the same demonstrations, actions read by the parser
    sft.write_agenttraj(str(tmp_path / "agenttraj.json"), demos)
    again = sft.load_demos(str(tmp_path / "agenttraj.json"), SPEC.parse_action)
    assert [(d.name, d.turns, d.actions) for d in again] == [(d.name, d.turns, d.actions) for d in demos]
    # several files and globs at once
    assert len(sft.load_demos(f"{tmp_path}/*.json*", SPEC.parse_action)) == 2 * len(demos)


def test_agenttraj_items_are_read_as_they_are(tmp_path):
    item = {
        "item_id": "babyai_0",
        "conversations": [
            {
                "from": "human",
                "value": "You are an exploration master ... Your response should use the format",
            },
            {"from": "gpt", "value": "OK"},
            {
                "from": "human",
                "value": "In front of you in this room, you can see ... Available actions: [...]",
            },
            {"from": "gpt", "value": "Thought:\nThe ball is ahead.\n\nAction:\ngo to red ball 1"},
        ],
    }
    (tmp_path / "traj.jsonl").write_text(json.dumps(item) + "\n")
    (d,) = sft.load_demos(str(tmp_path / "traj.jsonl"), SPEC.parse_action)
    assert d.name == "babyai_0" and d.success is None
    assert d.turns == [
        (item["conversations"][0]["value"], "OK"),
        (item["conversations"][2]["value"], item["conversations"][3]["value"]),
    ]
    assert d.actions == ["OK", "go to red ball 1"]  # AgentGym's parser: the line after the last Action:
    bad = dict(item, conversations=item["conversations"][:1] * 2 + item["conversations"][1:])
    (tmp_path / "bad.json").write_text(json.dumps([bad]))
    with pytest.raises(ValueError, match="babyai_0"):
        sft.load_demos(str(tmp_path / "bad.json"), SPEC.parse_action)


def test_failed_episodes_are_left_out_unless_asked(tmp_path):
    recs = [
        {
            "task": i,
            "success": i == 1,
            "actions": ["a"],
            "observations": ["o", "p"],
            "conversation": [
                {"role": "user", "content": "o"},
                {"role": "assistant", "content": "Action: a"},
                {"role": "user", "content": "p"},
            ],
        }
        for i in range(3)
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert [d.name for d in sft.load_demos(str(tmp_path / "t.jsonl"), SPEC.parse_action)] == ["task 1"]
    assert len(sft.load_demos(str(tmp_path / "t.jsonl"), SPEC.parse_action, only_success=False)) == 3


# --- the rows -----------------------------------------------------------------------------------


@pytest.mark.parametrize("context_turns", [0, 1])
def test_demonstration_rows_are_the_rollouts_own_rows(tiny_path, episodes, context_turns, tmp_path, pool):
    """Token in, token out: replayed from eval.py's file, a (masked) rollout's episodes give back
    exactly the rows the rollout stored: ids, loss mask and the action mask's allowed ids."""
    torch.manual_seed(1)
    policy = tiny.load(tiny_path, "babyai")
    policy.context_turns = context_turns
    trajs = rollout(policy, pool, SPEC, SPEC.splits["train"][4:8], horizon=3)
    evaluation.write_trajectories(str(tmp_path / "t.jsonl"), trajs)
    demos = sft.load_demos(str(tmp_path / "t.jsonl"), SPEC.parse_action, only_success=False)
    for d, t in zip(demos, trajs):
        rows = sft.demo_rows(policy, SPEC, d)
        assert [r.ids for r in rows] == [r.ids for r in t.rows]
        assert [r.mask for r in rows] == [r.mask for r in t.rows]
        assert [r.allowed for r in rows] == [r.allowed for r in t.rows]


@pytest.mark.parametrize("context_turns", [0, 2])
def test_the_sft_mask_covers_exactly_the_replies(tiny_path, episodes, context_turns, tmp_path):
    """Free-writing replies (ReAct): each masked span decodes to one reply and its end-of-turn token,
    in order, and the whole row is the chat template's rendering of the conversation."""
    policy = tiny.load(tiny_path, "babyai")
    policy.context_turns, policy.mask_actions = context_turns, False
    tok = policy.tokenizer
    evaluation.write_trajectories(str(tmp_path / "t.jsonl"), as_react(episodes))
    for d in sft.load_demos(str(tmp_path / "t.jsonl"), SPEC.parse_action):
        rows = sft.demo_rows(policy, SPEC, d)
        masked = [tok.decode(r.ids[a:b]) for r in rows for a, b in spans(r.mask)]
        replies = [reply for _, reply in d.turns]
        if context_turns == 0:
            assert len(rows) == 1
            assert masked == [reply + "<|im_end|>" for reply in replies]
            msgs = [{"role": "system", "content": SPEC.instruction}] if policy.use_instruction else []
            for o, r in d.turns:
                msgs += [{"role": "user", "content": o}, {"role": "assistant", "content": r}]
            # the template writes a newline after the last <|im_end|>: the row ends on the agent's token
            assert tok.decode(rows[0].ids) == tok.apply_chat_template(msgs, tokenize=False).rstrip("\n")
        else:  # one row per turn, each training only its own (last) reply
            assert masked == [reply + "<|im_end|>" for reply in replies]
            assert [len(spans(r.mask)) for r in rows] == [1] * len(replies)
            assert all(r.mask[-1] == 1 for r in rows)


def test_rows_longer_than_max_tokens_are_cut(tiny_path, episodes, tmp_path):
    policy = tiny.load(tiny_path, "babyai")
    policy.context_turns, policy.mask_actions = 0, False
    evaluation.write_trajectories(str(tmp_path / "t.jsonl"), as_react(episodes))
    demos = sft.load_demos(str(tmp_path / "t.jsonl"), SPEC.parse_action)
    for d in demos:
        (full,) = sft.demo_items(policy, SPEC, [d])
        n = len(full.rows[0].ids) - 3  # inside the last reply
        (short,) = sft.demo_items(policy, SPEC, [d], max_tokens=n)
        assert short.rows[0].ids == full.rows[0].ids[:n] and short.rows[0].mask == full.rows[0].mask[:n]
    # a demonstration with no reply inside the limit is left out
    assert sft.demo_items(policy, SPEC, demos, max_tokens=5) == []


# --- the loss and the loop ------------------------------------------------------------------


def test_the_sft_loss_is_the_token_mean_nll_of_the_replies(tiny_path, episodes, tmp_path):
    from batch import token_logprobs

    policy = tiny.load(tiny_path, "babyai")
    policy.context_turns, policy.mask_actions = 0, False
    evaluation.write_trajectories(str(tmp_path / "t.jsonl"), as_react(episodes))
    items = sft.demo_items(policy, SPEC, sft.load_demos(str(tmp_path / "t.jsonl"), SPEC.parse_action))
    batch = make_batch(items, policy.tokenizer.pad_token_id)
    logp, _ = token_logprobs(policy.model, batch)
    loss, _ = sft.sft_loss(logp, None, batch, None)
    # the plain computation: every token's log-prob from the full logits, averaged over the replies
    with torch.no_grad():
        logits = policy.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch.input_ids[:, 1:, None])[..., 0]
    m = batch.loss_mask[:, 1:]
    assert torch.allclose(loss, -(lp * m).sum() / m.sum(), atol=1e-5)


def small(tmp_path, data, **kw) -> sft.Config:
    base = {
        "model": "",
        "env": "babyai",
        "data": str(data),
        "out": str(tmp_path / "sft"),
        "epochs": 1,
        "mask_actions": False,
        "context_turns": 0,
        "max_new_tokens": 32,
        "batch_size": 4,
    }
    base.update(kw)
    return sft.Config(**base)


@pytest.fixture(scope="module")
def one_demo(episodes, tmp_path_factory):
    """One episode (the longest) written 16 times as eval.py would, replies in ReAct form."""
    path = tmp_path_factory.mktemp("demo") / "trajectories.jsonl"
    longest = max(episodes, key=lambda t: t.turns)
    evaluation.write_trajectories(str(path), as_react([longest]) * 16)
    return path, longest


@pytest.fixture(scope="module")
def cloned(tiny_path, one_demo, tmp_path_factory):
    """The tiny policy cloned on the one demonstration, free generation, whole conversation."""
    out = tmp_path_factory.mktemp("cloned")
    # lr 3e-3: the shipped policy (200 warm-up steps) moves further from one demonstration than the
    # 5-step build this fixture used to clone (2e-3 left it at a loss of 0.07)
    cfg = small(out, one_demo[0], model=tiny_path, epochs=15, lr=3e-3)
    return sft.sft(cfg), out / "sft"


def test_sft_on_one_demonstration_drives_its_loss_near_zero_and_greedy_decoding_replays_it(
    cloned, one_demo, pool
):
    summary, out = cloned
    _, demo = one_demo
    rows = sft.read_records(str(out / "metrics.jsonl"))
    assert rows[0]["losses/loss"] > 1.0 and summary["final_loss"] < 0.05
    assert len(rows) == summary["steps"] == 15 * 4
    assert os.path.getsize(out / "loss.png") > 0
    # greedy, free text (no action mask), whole conversation: the demonstration's own actions
    policy = tiny.load(str(out / "checkpoint"), "babyai")
    policy.context_turns, policy.mask_actions, policy.temperature, policy.max_new_tokens = 0, False, 0.0, 64
    (replay,) = rollout(policy, pool, SPEC, [demo.task], horizon=demo.turns)
    assert replay.actions == demo.actions
    assert [m["content"] for m in replay.messages if m["role"] == "assistant"] == [
        f"Thought: I will {a}.\nAction: {a}" for a in demo.actions
    ]  # the whole replies, word for word


def test_an_sft_checkpoint_loads_in_train_and_eval(cloned, tmp_path):
    from train import Config, train

    _, out = cloned
    ckpt = str(out / "checkpoint")
    assert not os.path.exists(os.path.join(ckpt, "state.pt"))  # a starting point, not a run to resume
    flags = {"mask_actions": False, "context_turns": 0, "max_new_tokens": 16}
    run = Config(
        model=ckpt,
        steps=1,
        tasks_per_step=2,
        group_size=2,
        minibatch_size=4,
        eval_episodes=2,
        rounds="2",
        out=str(tmp_path / "rl"),
        save_every=1,
        **flags,
    )
    summary = train(run)
    assert "eval_after" in summary
    state = torch.load(tmp_path / "rl" / "checkpoint" / "state.pt", weights_only=False)
    assert state["ref_path"] == ckpt  # the KL reference is the SFT model
    resumed = train(Config(**{**run.__dict__, "steps": 2, "resume": str(tmp_path / "rl" / "checkpoint")}))
    assert [r["step"] for r in sft.read_records(str(tmp_path / "rl" / "metrics.jsonl"))] == [1, 2]
    assert "eval_after" in resumed
    got = evaluation.main(
        [
            "--model",
            ckpt,
            "--limit",
            "2",
            "--horizon",
            "2",
            "--out",
            str(tmp_path / "ev"),
            "--mask-actions",
            "off",
            "--context-turns",
            "0",
            "--max-new-tokens",
            "16",
        ]
    )
    assert got["n_episodes"] == 2


@pytest.mark.parametrize("merge", [True, False])
def test_lora_sft_saves_a_folder_eval_loads(tiny_path, one_demo, tmp_path, merge):
    cfg = small(tmp_path, one_demo[0], model=tiny_path, lora_rank=4, merge_lora=merge, demos=4, lr=1e-3)
    sft.sft(cfg)
    ckpt = tmp_path / "sft" / "checkpoint"
    assert os.path.exists(ckpt / "adapter_config.json") != merge
    got = evaluation.main(
        [
            "--model",
            str(ckpt),
            "--limit",
            "1",
            "--horizon",
            "1",
            "--out",
            str(tmp_path / "ev"),
            "--mask-actions",
            "off",
            "--context-turns",
            "0",
            "--max-new-tokens",
            "8",
        ]
    )
    assert got["n_episodes"] == 1


# --- the format, measured -------------------------------------------------------------------


def test_valid_replies_counts_the_servers_invalid_answers():
    recs = [
        {
            "actions": ["go", "jump", "go"],
            "success": False,
            "observations": ["o0", "ok", '"jump" is not an available action; choose one', "ok"],
        },
        {"actions": ["x"], "success": True, "observations": ["o0", "done"]},
    ]
    assert sft.valid_replies(recs) == (3, 4)
    crafts = [
        {
            "actions": ["get 1 oak log", "get 1 dragon", "fly", "craft 1 x using 2 y"],
            "success": False,
            "observations": [
                "o0",
                "Got 1 oak log",
                "Could not find dragon.",
                "Could not execute 'fly'.",
                "Wrong quantities: crafting x needs 1 y.",
            ],
        }
    ]
    assert sft.valid_replies(crafts) == (1, 4)


# --- DAgger: the expert's labels on the policy's own states -----------------------------------------


@pytest.fixture(scope="module")
def strayed(start_server):
    """A BabyAI episode as eval.py records a policy's: an action the level does not have, then two
    turns; and the server it ran on."""
    server = start_server("servers.babyai")
    task, actions = SPEC.splits["test"][0], ["go to the moon", "turn left", "turn left"]
    p = EnvPool(url=server.url, size=1)
    observations = [p.reset([0], [task])[0]["observation"]]
    observations += [p.step([0], [a])[0]["observation"] for a in actions]
    p.close()
    conversation = [{"role": "system", "content": SPEC.instruction}]
    for o, a in zip(observations, actions):
        conversation += [
            {"role": "user", "content": o},
            {"role": "assistant", "content": f"Thought: I go.\nAction: {a}"},
        ]
    rec = {"task": task, "success": False, "actions": actions, "observations": observations}
    return {**rec, "conversation": conversation}, server.url


def test_relabel_asks_the_expert_at_every_state_the_policy_reached(strayed):
    """sft.relabel replays the episode on a fresh instance and records the expert's reply at each of
    its states: each an action available there (the one after the mistake too); a replay whose
    observations differ from the recorded ones stops labelling where they part."""
    rec, url = strayed
    (out,), diverged = sft.relabel([rec], "babyai", url=url)
    assert diverged == 0 and len(out["expert"]) == 3
    for observation, label in zip(rec["observations"], out["expert"]):
        assert SPEC.parse_action(label) in SPEC.actions_from_text(observation, None)
    assert "is not an available action" in rec["observations"][1]
    changed = {**rec, "observations": rec["observations"][:2] + ["something else"] + rec["observations"][3:]}
    (out,), diverged = sft.relabel([changed], "babyai", url=url)
    assert diverged == 1 and len(out["expert"]) == 2


@pytest.mark.parametrize("context_turns", [0, 2])
def test_relabelled_demonstrations_train_every_state_once_on_the_experts_action(
    tiny_path, strayed, context_turns
):
    """DAgger's demonstrations (sft.relabelled): every state the policy reached is trained exactly
    once, on the expert's action: the policy's own reply where it was the expert's, else the
    expert's reply, which ends a demonstration whose context is the episode as it went. Only those
    replies are masked in the rollout's own rows."""
    rec, url = strayed
    (out,), _ = sft.relabel([rec], "babyai", url=url)
    demos = sft.relabelled(out, SPEC.parse_action)
    replies = [m["content"] for m in rec["conversation"] if m["role"] == "assistant"]
    differ = [k for k, e in enumerate(out["expert"]) if SPEC.parse_action(e) != rec["actions"][k]]
    assert 0 in differ  # "go to the moon" is no expert's action
    trained = []  # (state, reply) over all demonstrations
    for d in demos:
        assert [r for _, r in d.turns[:-1]] == replies[: len(d.turns) - 1]  # the episode as it went
        trained += [(k, r) for k, ((_, r), learn) in enumerate(zip(d.turns, d.learn)) if learn]
    assert sorted(k for k, _ in trained) == list(range(len(out["expert"])))
    for k, reply in trained:
        assert reply == (out["expert"][k] if k in differ else replies[k])
    policy = tiny.load(tiny_path, "babyai")
    policy.context_turns, policy.mask_actions = context_turns, False
    for d in demos:
        rows = sft.demo_rows(policy, SPEC, d)
        masked = [policy.tokenizer.decode(r.ids[a:b]) for r in rows for a, b in spans(r.mask)]
        assert masked == [r + "<|im_end|>" for (_, r), learn in zip(d.turns, d.learn) if learn]


def test_every_flag_is_a_documented_field():
    from config import field_docs

    cfg = sft.main.__globals__["parse"](
        sft.Config, ["--data", "a.jsonl,b.json", "--lora-rank", "8", "--merge-lora", "off", "--demos", "50"]
    )
    assert (cfg.data, cfg.lora_rank, cfg.merge_lora, cfg.demos) == ("a.jsonl,b.json", 8, False, 50)
    docs = field_docs(sft.Config)
    assert all(docs.get(f) for f in sft.Config.__dataclass_fields__)
