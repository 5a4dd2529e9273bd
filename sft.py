"""Behaviour cloning (SFT): teach a chat model the agent's reply format from expert demonstrations.

    python sft.py --model smollm2 --env babyai --data runs/experts/babyai/trajectories.jsonl \
        --demos 100 --out runs/sft_babyai                 # writes runs/sft_babyai/checkpoint
    python eval.py --model runs/sft_babyai/checkpoint --env babyai --mask-actions off --context-turns 0
    python train.py --model runs/sft_babyai/checkpoint --env babyai ...   # RL on top
    python sft.py --env babyai --valid runs/eval/trajectories.jsonl        # share of valid-action replies
    python sft.py --env babyai --relabel runs/eval/trajectories.jsonl --out runs/dagger   # DAgger's labels

Where it sits: before `train.py`. AgentGym trains its agents on expert conversations (`bc_trainer.py`,
AgentTraj) before RL; a pretrained chat model that has never seen an environment writes almost no
valid action, and RL from a policy that never succeeds has no signal. This file turns
demonstrations into exactly the token rows a rollout of the same policy would have produced, and
maximises their likelihood:

    load_demos     reads eval.py's trajectories.jsonl (the expert episodes `eval.py` writes, or any
                   rollout) and AgentGym's AgentTraj items ({"item_id", "conversations": [{"from":
                   "human"|"gpt", "value"}, ...]}) as they are, into `Demo`s.
    demo_rows      replays a demonstration through agent.py's own conversation builders
                   (`agent.WholeConversation` / `agent.LastTurns`: the same chat template, system
                   instruction, context window and glue tokens as a rollout) with the demonstration's
                   reply in place of a sampled one: `batch.Row`s whose loss mask is 1 exactly on each
                   reply and its end-of-turn token (tests/test_sft.py decodes the masked spans).
    sft            `batch.make_batch` + the RL update's micro-batched gradient accumulation
                   (`update.accumulate_gradients`, the same `LogprobForward` and log-prob machinery
                   as train.py's) with the loss below as its algorithm; LoRA (machinery/lora.py)
                   or all weights. Writes <out>/checkpoint (a plain Hugging Face folder that
                   `train.py --model` and `eval.py --model` load like any other), <out>/metrics.jsonl,
                   <out>/loss.png and <out>/summary.json.
    relabel        DAgger: a policy's own episodes replayed with the expert asked at every state
                   they reached; `relabelled` trains each of those states once on the expert's
                   action, in the context of the policy's own episode (what to do after its own
                   mistakes, which expert episodes never show).

The objective (behaviour cloning = maximum likelihood of the expert's tokens; AgentGym's
bc_trainer.py, the loss on the "gpt" turns and their end-of-turn token), a token-mean over the
agent tokens A of a minibatch, as every loss of the RL update is:

    L_SFT(theta) = - 1/|A| sum_{(b,t) in A} log pi_theta(x_{b,t} | x_{b,<t}),   A = {(b,t): loss_mask = 1}

at temperature 1 (the model's own distribution) and, when the policy samples under the action mask
(the tiny policy), under the same mask as the rollout wherever the available actions can be read
from the observation.
"""

import dataclasses
import glob
import json
import math
import os
import shutil
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

import tiny
from agent import LastTurns, Policy, Trajectory, WholeConversation, action_trie
from algorithm import Algorithm, masked_mean
from batch import Row, make_batch
from config import AgentConfig, flag, load_agent, parse, resolve_device, resolve_precision, set_threads
from envs import ENVS, EnvSpec, close_pool, open_pool
from machinery import dist, lora, signals
from machinery.accounting import step_optimizers
from machinery.logprobs import LogprobForward
from machinery.rng import seed_everything
from update import UpdateConfig, accumulate_gradients, resolve_micro_batch_tokens

SFT_LR = 1e-5
"""A real model's learning rate (AgentGym's bc_trainer: 1e-5 for 7B); the tiny policy's is tiny.LR."""


@dataclass
class Config(AgentConfig, UpdateConfig):
    """Every knob of a behaviour-cloning run: the agent's (config.AgentConfig; its settings decide
    the token layout, e.g. --context-turns 0: whole conversations), the update's (update.UpdateConfig:
    learning rate, clipping, micro-batches, precision, LoRA) and the cloning's, below."""

    data: str = ""
    """demonstrations, files or globs, comma-separated: eval.py's trajectories.jsonl or AgentTraj"""
    demos: int = flag(0, at_least=0)
    """train on the first N demonstrations (after --only-success); 0: all"""
    only_success: bool = True
    """keep only the episodes that succeeded (AgentTraj items carry no outcome: all are kept)"""
    epochs: int = flag(3, at_least=1)
    """passes over the demonstrations"""
    batch_size: int = flag(8, at_least=1)
    """demonstrations per optimizer step"""
    max_tokens: int = flag(4096, at_least=0)
    """cut a token row after this many tokens (whole conversation: one row per demonstration); 0: never"""
    merge_lora: bool = True
    """save LoRA merged into full weights; off: the adapters alone (either is train.py's KL reference)"""
    out: str = "runs/sft"
    """output folder: checkpoint/, metrics.jsonl, loss.png, summary.json"""
    valid: str = ""
    """instead of training: print the share of replies with a valid action in these trajectories.jsonl"""
    relabel: str = ""
    """instead of training: replay a policy's episodes (eval.py's trajectories.jsonl) and write them to
    <out>/trajectories.jsonl with the expert's reply at every state they reached (DAgger's labels;
    --data then trains on them)"""
    parallel: int = flag(16, at_least=1)
    """episodes --relabel replays at once (each an environment instance: a JVM, a browser)"""


# ---------------------------------------------------------------------------------------------
# Demonstrations: two formats in, one shape out
# ---------------------------------------------------------------------------------------------


@dataclass
class Demo:
    """One demonstration: the observations the expert saw and its replies, turn by turn."""

    name: str  # eval.py: "task <data_idx>"; AgentTraj: its item_id
    turns: list[tuple[str, str]]  # (observation, reply) per agent turn, in order
    actions: list[str]  # the action each reply sent to the environment
    success: bool | None = None  # the episode's outcome (None: not recorded, AgentTraj)
    learn: list[bool] | None = None  # which replies carry the loss (None: all); the rest are context


def from_episode(rec: dict) -> Demo:
    """An eval.py trajectory record (`eval.write_trajectories`): its conversation, system message
    dropped (the policy being trained brings its own), a trailing observation no reply answered too."""
    msgs = [m for m in rec["conversation"] if m["role"] != "system"]
    turns = _pairs([(m["role"], m["content"]) for m in msgs], "user", "assistant", f"task {rec.get('task')}")
    return Demo(
        name=f"task {rec.get('task')}",
        turns=turns,
        actions=list(rec["actions"])[: len(turns)],
        success=bool(rec.get("success")),
    )


def relabelled(rec: dict, parse_action) -> list[Demo]:
    """DAgger's demonstrations from a policy's episode that `relabel` annotated: every state the
    policy reached, with the expert's action there as the target. Where the policy's action was the
    expert's, its own reply is the target; at each state where it differed, a demonstration ends:
    the episode as it went up to that state (the policy's own replies as context) and the expert's
    reply there. Each state is trained once: a demonstration trains the states since the previous
    one's end. The policy's states, the expert's actions: what it does after its own mistakes,
    which expert episodes never show, without losing the states where it was right."""
    demo = from_episode(rec)
    labels = rec["expert"][: len(demo.turns)]
    out, learn = [], [False] * len(labels)
    for k, label in enumerate(labels):
        if parse_action(label).strip().lower() == demo.actions[k].strip().lower():
            learn[k] = True
            continue
        turns = demo.turns[:k] + [(demo.turns[k][0], label)]
        actions = demo.actions[:k] + [parse_action(label)]
        out.append(Demo(f"{demo.name} turn {k}", turns, actions, None, learn[:k] + [True]))
        learn = [False] * len(labels)
    if any(learn):  # right after the last mistake (or never wrong): the episode itself
        out.append(Demo(demo.name, demo.turns[: len(labels)], demo.actions[: len(labels)], None, learn))
    return out


def from_agenttraj(item: dict, parse_action) -> Demo:
    """An AgentGym AgentTraj item as it is: every "human" turn an observation, every "gpt" turn a
    reply (AgentGym's first pair, its instruction and the expert's "OK", included)."""
    msgs = [(m["from"], m["value"]) for m in item["conversations"]]
    turns = _pairs(msgs, "human", "gpt", item.get("item_id"))
    return Demo(name=str(item.get("item_id", "")), turns=turns, actions=[parse_action(r) for _, r in turns])


def _pairs(messages: list[tuple[str, str]], user: str, agent: str, name) -> list[tuple[str, str]]:
    """[(user, o1), (agent, r1), (user, o2), ...] -> [(o1, r1), ...]; a last unanswered
    observation is dropped. Anything but strict alternation is an error naming the demonstration."""
    if len(messages) % 2:
        messages = messages[:-1] if messages[-1][0] == user else messages
    roles = [r for r, _ in messages]
    if roles != [user, agent] * (len(messages) // 2) or not messages:
        raise ValueError(f"demonstration {name}: turns must alternate {user}, {agent}, ..., got {roles[:8]}")
    return [(messages[i][1], messages[i + 1][1]) for i in range(0, len(messages), 2)]


def read_records(path: str) -> list[dict]:
    """The JSON objects of a file: a JSON list (AgentGym's AgentTraj files) or one object per line."""
    with open(path) as f:
        text = f.read()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_demos(paths: str, parse_action, only_success: bool = True) -> list[Demo]:
    """Demonstrations from files or globs (comma-separated), each record in either format; a
    record `relabel` annotated gives its DAgger demonstrations (`relabelled`), whatever its outcome.
    `parse_action`: the environment's parser (envs.EnvSpec.parse_action), for AgentTraj replies."""
    files = [f for p in paths.split(",") if p for f in sorted(glob.glob(p)) or [p]]
    demos = []
    for file in files:
        for rec in read_records(file):
            if "conversations" in rec:
                demos.append(from_agenttraj(rec, parse_action))
            elif "expert" in rec:
                demos += relabelled(rec, parse_action)
            elif not only_success or rec.get("success"):
                demos.append(from_episode(rec))
    return demos


def write_agenttraj(path: str, demos: list[Demo]) -> None:
    """Demonstrations as AgentGym's AgentTraj list (for AgentGym's own bc_trainer)."""
    items = [
        {
            "item_id": d.name,
            "conversations": [
                {"from": f, "value": v} for o, r in d.turns for f, v in (("human", o), ("gpt", r))
            ],
        }
        for d in demos
    ]
    with open(path, "w") as f:
        json.dump(items, f, indent=1)


# ---------------------------------------------------------------------------------------------
# Demonstrations as the rollout's token rows
# ---------------------------------------------------------------------------------------------


def demo_rows(policy: Policy, spec: EnvSpec, demo: Demo) -> list[Row]:
    """The rows `agent.rollout` would have stored had `policy` replied as `demo` did: the same
    chat template, system instruction, context window (`policy.context_turns`) and glue, built by
    agent.py's own `WholeConversation` / `LastTurns`. Each reply is its token ids plus the
    end-of-turn token (what the model samples to end its turn), mask 1; everything else mask 0.
    Under the action mask (`policy.mask_actions`) the reply is the bare action, as masked sampling
    writes it, and the allowed ids are the rollout's wherever the observation lists the actions."""
    tok = policy.tokenizer
    tr = Trajectory(task=0, group=0)
    memory = (WholeConversation if policy.context_turns == 0 else LastTurns)(policy)
    if policy.use_instruction:
        tr.messages.append({"role": "system", "content": spec.instruction})
    listed = None  # the episode's action list so far (TextCraft lists it only at the start)
    for k, (observation, reply) in enumerate(demo.turns):
        if policy.mask_actions:
            reply = demo.actions[k]
        reply = reply.strip()  # as the rollout stores a decoded reply
        tr.messages.append({"role": "user", "content": observation})
        context = memory.context(tr)
        ids = tok(reply, add_special_tokens=False)["input_ids"] + [policy.end_of_turn]
        allowed = {}
        if policy.mask_actions and spec.actions_from_text:
            listed = spec.actions_from_text(observation, listed)
            if listed and reply in listed:
                allowed = _allowed_ids(action_trie(policy, listed), ids)
        memory.add_reply(context, ids, [0.0] * len(ids), allowed)
        tr.messages.append({"role": "assistant", "content": reply})
        if k + 1 < len(demo.turns):  # the rollout adds no observation after the last reply either
            memory.add_observation(ids, demo.turns[k + 1][0])
    rows = memory.rows()
    if demo.learn is not None:  # replies that are context only: their span's mask back to 0
        spans = [(r, t) for r in rows for t in range(len(r.mask)) if r.mask[t] and not (t and r.mask[t - 1])]
        for (row, start), learn in zip(spans, demo.learn, strict=True):
            t = start
            while not learn and t < len(row.mask) and row.mask[t]:
                row.mask[t], t = 0, t + 1
    return rows


def _allowed_ids(trie: dict, ids: list[int]) -> dict[int, list[int]]:
    """Per position of a reply (from 0), the ids masked sampling allowed there (agent.action_trie)."""
    allowed = {}
    for p, t in enumerate(ids):
        allowed[p] = [k for k in trie if k is not None]
        trie = trie[t]
    return allowed


def cut(row: Row, n: int) -> Row:
    """The first n tokens of a row (a prefix is a valid training sequence: the model only ever
    conditions on what comes before)."""
    return Row(
        ids=row.ids[:n],
        mask=row.mask[:n],
        logprobs=row.logprobs[:n],
        allowed={p: a for p, a in row.allowed.items() if p < n},
    )


def demo_items(policy: Policy, spec: EnvSpec, demos: list[Demo], max_tokens: int = 0) -> list[Trajectory]:
    """Each demonstration as a `Trajectory` holding its rows (what `batch.make_batch` reads)."""
    items = []
    for i, d in enumerate(demos):
        rows = demo_rows(policy, spec, d)
        rows = [cut(r, max_tokens) if max_tokens and len(r.ids) > max_tokens else r for r in rows]
        items.append(Trajectory(task=i, group=i, rows=[r for r in rows if any(r.mask)]))
    return [t for t in items if t.rows]


# ---------------------------------------------------------------------------------------------
# The loss and the loop
# ---------------------------------------------------------------------------------------------


def sft_loss(logp: torch.Tensor, entropy, mb, cfg, state=None):
    """L_SFT: the negative log-likelihood of the agent tokens, a token-mean over the minibatch.
    logp, entropy: (B, T), 0 off the agent tokens."""
    m = mb.loss_mask.to(logp.device)  # (B, T)
    nll = -masked_mean(logp, m)
    stats = {"losses/nll": nll.item()}
    if entropy is not None:
        stats["losses/entropy"] = masked_mean(entropy, m).item()
    return nll, stats


SFT = Algorithm(advantages=lambda batch, cfg, state: None, loss=sft_loss)
"""Behaviour cloning as an `algorithm.Algorithm` the update runs: no advantage, the NLL as the loss."""


def sft(cfg: Config) -> dict:
    """Train on the demonstrations; returns the summary (also <out>/summary.json)."""
    from accelerate import Accelerator

    seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    set_threads(cfg, device)
    cfg.mixed_precision = resolve_precision(cfg.mixed_precision, cfg.model, device)
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=device == "cpu")
    main = accelerator.is_main_process
    if cfg.batch_size < dist.world():
        raise ValueError(f"--batch-size {cfg.batch_size} < {dist.world()} processes: some would have nothing")
    policy = trainable_policy(cfg, accelerator.device)
    items = training_items(cfg, policy)
    lr = cfg.lr or (tiny.LR if policy.is_tiny else SFT_LR)
    resolve_micro_batch_tokens(cfg, policy)
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=lr)
    forward, optimizer = accelerator.prepare(LogprobForward(policy.model), optimizer)
    os.makedirs(cfg.out, exist_ok=True)
    metrics_path = os.path.join(cfg.out, "metrics.jsonl")
    if main and os.path.exists(metrics_path):  # a previous run's, in the same folder
        os.remove(metrics_path)
    t0 = time.time()
    last = train_epochs(cfg, policy, items, forward, optimizer, accelerator, metrics_path)
    summary = {
        "config": dataclasses.asdict(cfg),
        "demonstrations": len(items),
        "agent_tokens": sum(sum(r.mask) for t in items for r in t.rows),
        "steps": last["step"],
        "lr": lr,
        "seconds": time.time() - t0,
        "final_loss": last["losses/loss"],
        # what the weights' bits depend on beyond the command (docs/sft.md, "The same command ...")
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu": torch.backends.cpu.get_cpu_capability(),  # the kernels' instruction set: AVX2, AVX512, ...
    }
    if main:
        write_results(cfg, policy, summary, metrics_path)
    dist.barrier()
    return summary


def training_items(cfg: Config, policy: Policy) -> list[Trajectory]:
    """The demonstrations of --data (the first --demos of them) as the rollout's token rows
    (`demo_items`); none with a reply to train on is an error."""
    spec = ENVS[cfg.env]
    demos = load_demos(cfg.data, spec.parse_action, cfg.only_success)
    demos = demos[: cfg.demos] if cfg.demos else demos
    items = demo_items(policy, spec, demos, cfg.max_tokens)
    if not items:
        raise SystemExit(f"no demonstrations with a reply in {cfg.data!r}")
    return items


def train_epochs(
    cfg: Config, policy: Policy, items: list[Trajectory], forward, optimizer, accelerator, metrics_path
):
    """--epochs passes over the demonstrations, each in a fresh order, --batch-size of them per
    optimizer step (each process trains its share); each step's metrics are appended to
    `metrics_path` by the main process. Returns the last step's metrics."""
    run = dataclasses.replace(cfg, temperature=1.0)  # the log-probs of the model's own distribution
    main = accelerator.is_main_process
    per_epoch = math.ceil(len(items) / cfg.batch_size)
    t0, step = time.time(), 0
    bar = tqdm(
        total=cfg.epochs * per_epoch, desc=f"sft on {len(items)} {cfg.env} demonstrations", disable=not main
    )
    # a process with no share of an uneven last batch still runs every pass the others run (DDP
    # communicates in each): on this filler, at weight 0 (update.accumulate_gradients)
    filler = make_batch(items[:1], policy.tokenizer.pad_token_id)
    for _ in range(cfg.epochs):
        order = torch.randperm(len(items)).tolist()
        for s in range(0, len(items), cfg.batch_size):
            step += 1
            mine = dist.shard([items[i] for i in order[s : s + cfg.batch_size]])  # this process's share
            batch = (
                make_batch(mine, policy.tokenizer.pad_token_id) if mine else filler.select(torch.arange(0))
            )
            st, grad_norm = sft_step(run, policy, forward, optimizer, accelerator, batch, filler)
            m = {
                "step": step,
                "epoch": step / per_epoch,
                "losses/loss": st["losses/loss"],
                "losses/entropy": st.get("losses/entropy", float("nan")),
                "losses/grad_norm": grad_norm,
                "charts/seconds": time.time() - t0,
            }
            if main:
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(m) + "\n")
            bar.update(1)
            bar.set_postfix(loss=f"{m['losses/loss']:.3f}")
    bar.close()
    optimizer.zero_grad(set_to_none=True)
    return m


def sft_step(
    run: Config, policy: Policy, forward, optimizer, accelerator, batch, filler
) -> tuple[dict, float]:
    """One optimizer step on a batch of demonstration rows (this process's share; empty: `filler` at
    weight 0): L_SFT's gradients accumulated micro-batch by micro-batch (`update.accumulate_gradients`),
    clipped to --max-grad-norm and stepped as the RL update steps (`machinery/accounting.py`: skipped
    when the loss or the norm is not finite; fp16's scaler). Returns the loss's statistics and the
    gradient norm before clipping."""
    policy.model.train()
    optimizer.zero_grad()
    stats = accumulate_gradients(forward, batch, SFT, run, None, accelerator, filler)
    (grad_norm,), _ = step_optimizers(
        [(forward, optimizer)], accelerator, run.max_grad_norm, stats["losses/loss"]
    )
    return stats, grad_norm


def trainable_policy(cfg: Config, device) -> Policy:
    """The model to clone into: --model, with fresh LoRA adapters unless it has some or
    --lora-rank is 0 (all weights), gradient checkpointing on request."""
    policy = load_agent(cfg, device, trainable=True)
    if cfg.lora_rank and not lora.has_adapters(policy.model):
        policy.model = lora.add_adapters(policy.model, cfg.lora_rank, cfg.lora_alpha)
    if cfg.gradient_checkpointing:
        policy.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return policy


def write_results(cfg: Config, policy: Policy, summary: dict, metrics_path: str) -> None:
    """The checkpoint, summary.json and loss.png under --out, and a line saying so."""
    save(policy, os.path.join(cfg.out, "checkpoint"), cfg.merge_lora, summary)
    with open(os.path.join(cfg.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    plot_loss(metrics_path, os.path.join(cfg.out, "loss.png"))
    print(
        f"sft: {summary['demonstrations']} demonstrations, {summary['agent_tokens']} agent tokens, "
        f"{summary['steps']} steps in {summary['seconds']:.0f} s, "
        f"loss {summary['final_loss']:.4f} -> {os.path.join(cfg.out, 'checkpoint')}"
    )


def save(policy: Policy, folder: str, merge_lora: bool, summary: dict) -> None:
    """A checkpoint `config.load_agent` loads like any other: a plain model folder (LoRA merged into
    the weights unless `merge_lora` is off: then the adapter folder naming its base). No state.pt:
    it is a starting point for `train.py --model`, not a run to `--resume`."""
    model = policy.model
    if lora.has_adapters(model) and merge_lora:
        model = model.merge_and_unload()
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)  # a half-written one from a killed run
    model.save_pretrained(tmp)
    policy.tokenizer.save_pretrained(tmp)
    with open(os.path.join(tmp, "sft.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    if model is not policy.model:  # merging changed the weights in place; keep the policy as it was saved
        policy.model = model


def plot_loss(metrics_path: str, png: str) -> None:
    """The SFT loss per step, for people who would rather see than read."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_records(metrics_path)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(
        [r["step"] for r in rows], [r["losses/loss"] for r in rows], label="SFT loss (NLL per agent token)"
    )
    ax.set_xlabel("step")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# The format, measured: does a reply hold an action the environment can carry out?
# ---------------------------------------------------------------------------------------------


def valid_replies(records: list[dict]) -> tuple[int, int]:
    """(replies whose action the environment carried out, replies) over eval.py trajectory records:
    reply k is invalid when the observation that answers it (observations[k + 1]) is the server's
    message for an action it did not carry out (`signals.refused`: no action in the reply, or one the
    environment cannot do, such as TextCraft's unknown item or wrong ingredients)."""
    ok = n = 0
    for rec in records:
        for answer in rec["observations"][1 : len(rec["actions"]) + 1]:
            n += 1
            ok += not signals.refused(answer)
    return ok, n


# ---------------------------------------------------------------------------------------------
# DAgger: the expert's labels on the policy's own states
# ---------------------------------------------------------------------------------------------


def relabel(records: list[dict], env: str, url: str = "", parallel: int = 16) -> tuple[list[dict], int]:
    """DAgger's relabelling (Ross, Gordon and Bagnell, 2011): each of a policy's episodes replayed on a
    fresh instance of its task, the expert (POST /expert) asked at every state the policy reached,
    before the policy's own action is taken again. The environments are deterministic per task, so
    the replay sees what the policy saw; it is checked: where an observation differs from the
    recorded one, that episode's labels stop. They stop too where the expert says its answer is a
    guess (`stale`: SciWorld's gold action after the agent left its path). Returns the records, each
    with `expert` (the expert's reply per turn, in the environment's format), and how many replays
    diverged."""
    spec, records = ENVS[env], [dict(r) for r in records]
    if not records:
        return [], 0
    pool = open_pool(env, size=min(len(records), parallel), url=url)
    diverged = 0
    try:
        for start in tqdm(range(0, len(records), len(pool)), desc=f"relabel {env}"):
            chunk = records[start : start + len(pool)]
            slots = list(range(len(chunk)))
            live = []
            for i, (rec, r) in enumerate(zip(chunk, pool.reset(slots, [rec["task"] for rec in chunk]))):
                rec["expert"] = []
                if r.get("error"):
                    continue
                if r["observation"] == rec["observations"][0]:
                    live.append(i)
                else:
                    diverged += 1
            for k in range(max((len(r["actions"]) for r in chunk), default=0)):
                advice = pool.expert(live)
                advice = [{"error": "stale"} if a.get("stale") else a for a in advice]
                for i, a in zip(live, advice):
                    if not a.get("error"):  # (a failed or stale /expert ends that episode's labels)
                        chunk[i]["expert"].append(spec.write_reply(a.get("thought", ""), a["action"]))
                live = [
                    i for i, a in zip(live, advice) if not a.get("error") and k + 1 < len(chunk[i]["actions"])
                ]
                results = pool.step(live, [chunk[i]["actions"][k] for i in live])
                same = [
                    r.get("observation") == chunk[i]["observations"][k + 1] for i, r in zip(live, results)
                ]
                diverged += sum(not x for x in same)
                live = [i for i, x in zip(live, same) if x]
    finally:
        close_pool(pool)
    return records, diverged


def main(argv=None):
    cfg = parse(Config, argv, description=__doc__.split("\n")[0])
    if cfg.relabel:
        records, diverged = relabel(
            [r for p in cfg.relabel.split(",") for r in read_records(p)], cfg.env, cfg.url, cfg.parallel
        )
        os.makedirs(cfg.out, exist_ok=True)
        with open(os.path.join(cfg.out, "trajectories.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        demos = [d for r in records for d in relabelled(r, ENVS[cfg.env].parse_action)]
        states, wrong = sum(sum(d.learn) for d in demos), sum(d.name.count(" turn ") for d in demos)
        print(
            f"relabelled {len(records)} episodes ({diverged} replays diverged): {states} states, "
            f"{wrong} where the policy left the expert, in {len(demos)} demonstrations "
            f"-> {os.path.join(cfg.out, 'trajectories.jsonl')}"
        )
        return len(demos)
    if cfg.valid:
        records = [r for p in cfg.valid.split(",") for r in read_records(p)]
        ok, n = valid_replies(records)
        success = float(np.mean([bool(r["success"]) for r in records])) if records else 0.0
        print(
            json.dumps(
                {
                    "env": cfg.env,
                    "valid_replies": ok,
                    "replies": n,
                    "valid_share": ok / max(n, 1),
                    "episodes": len(records),
                    "success": success,
                }
            )
        )
        return ok / max(n, 1)
    return sft(cfg)


if __name__ == "__main__":
    main()
