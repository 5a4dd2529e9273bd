"""One step of multi-turn GRPO, plainly: train.py's loop from the horizon to one optimizer step,
the method only, in one file to read top to bottom (AgentGym-RL, section 2; DeepSeekMath, eq. 3).

    python -m plain.one_step             # one real step: the tiny policy on BabyAI, each stage printed
    python -m plain.one_step --seed 3    # any of train.py's flags the plain step covers (`check`)

Where it sits: beside the concept files, above them. train.py runs this same step with the
machinery that makes it fast and lets it scale; this file leaves that machinery out, and
tests/test_plain_step.py shows the two equal on one seed: the same episodes, the same token rows and
loss mask as `batch.make_batch`, the same advantages as grpo.py, the same loss and the same weights
after the optimizer step as `update.update`. Read it after problems 2 and 3 of the course
(docs/course.md): their two functions are called here by name, never shown.

    1. horizon h = schedule(step)                                  ScalingInter-RL (scaling_inter.py)
    2. G episodes per task, at most h turns each: a task's episodes are its group   `rollout`
    3. the token rows, 1 in the loss mask on the agent's sampled tokens            `pad`
       A_i = (R_i - mean_g R) / (std_g R + eps), on every agent token of episode i  grpo.group_advantages
    4. log pi(x_t | x_<t) of each agent token, under the policy and the frozen pi_ref  `token_logprobs`
       loss = -min(r A, clip(r, 1-eps, 1+eps_hi) A) + beta k3(pi, pi_ref) - c H  algorithm.clipped_policy_loss
              (token-means, r = pi / pi_old); then one AdamW step, the gradient clipped

What it leaves out, and where that lives (all of it changes speed, memory or scale, not the step):
- sampling with a KV cache, batched prefill, the action mask's prefix tree: `agent.generate`, the
  one piece of machinery called here, by name; the whole conversation as one row with its cache
  kept across turns (`--context-turns 0`): agent.py's `WholeConversation`;
- the log-probs at the agent tokens only, in chunks, a shared prompt run once, identical rows once:
  machinery/logprobs.py (`full_logprobs` there is this file's `token_logprobs`, tested equal);
- micro-batches, several processes (DDP, FSDP), fp16's loss scaler, skipped steps: update.py and
  machinery/accounting.py; epochs and minibatches: `update.update`;
- timing, metrics, signals and alarms, evaluation, checkpoints: loop/watch.py; set-up: loop/run.py.
It covers the demo's settings: GRPO, a window of the last turns (the tiny policy sees one), one
epoch, one minibatch, float32, one process (`check` says so for any other).
"""

import random
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import grpo
import train
from agent import Trajectory, action_trie, chat_ids, generate
from algorithm import clipped_policy_loss
from batch import Row
from envs import close_pool
from loop.run import setup
from machinery import dist
from update import load_learner


def one_step(run, step: int) -> "Step":
    """Training step `step` of `run` (loop/run.py's `setup`: the policy, its frozen reference, AdamW,
    the environments), as train.py's loop takes it in the settings `check` allows."""
    cfg, learner = run.cfg, run.learner
    policy, model = learner.policy, learner.policy.model
    # 1. the horizon: at most this many turns per episode at this step (ScalingInter-RL's stage)
    horizon = run.schedule.horizon(step, run.history)
    # 2. rollout: tasks_per_step train tasks, each group_size times; the episodes of a task are its group
    tasks = random.sample(run.train_tasks, cfg.tasks_per_step)
    group = [g for g in range(len(tasks)) for _ in range(cfg.group_size)]
    episodes = rollout(policy, run.pool, run.spec, [tasks[g] for g in group], group, horizon)
    trajs = [t for t in episodes if not t.error]  # a crashed server's reward 0 is not the policy's
    # 3. the token rows and their loss mask; GRPO's advantage of each episode on each of its agent tokens
    rows = pad(trajs, policy.tokenizer.pad_token_id, model.get_output_embeddings().weight.shape[0])
    A = grpo.group_advantages(rows.rewards, rows.groups, cfg.group_std_eps)  # (N,): problem 2
    rows.advantages = A[rows.traj].unsqueeze(-1) * rows.loss_mask  # (B, 1) * (B, T)
    with torch.no_grad():  # pi_ref: the run's starting weights, frozen (the KL term's anchor)
        rows.ref_logprobs, _ = token_logprobs(learner.ref_model, rows, cfg.temperature)
    # 4. update: one minibatch, one epoch; pi_old is the policy that sampled (rows.old_logprobs)
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    logp, entropy = token_logprobs(model, rows, cfg.temperature)  # (B, T) under the current weights
    # the loss (problem 3): the clipped surrogate, the k3 KL to pi_ref, the entropy bonus; token-means
    eps, beta, c = cfg.clip_ratio, cfg.kl_coef, cfg.entropy_coef  # (DAPO's clip-higher: cfg.clip_ratio_high)
    loss, stats = clipped_policy_loss(logp, entropy, rows, rows.advantages, eps, beta, c, cfg.clip_ratio_high)
    learner.optimizer.zero_grad()  # AdamW, lr tiny.LR for the tiny policy (update.load_learner built it)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
    learner.optimizer.step()
    ratio = ((logp.detach() - rows.old_logprobs) * rows.loss_mask).exp()  # (B, T): 1 off the agent tokens
    change = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before)])
    out = (horizon, tasks, episodes, trajs, rows, logp.detach(), ratio, loss.item(), stats, float(grad_norm))
    return Step(*out, change)


@dataclass
class Step:
    """What each stage of `one_step` produced."""

    horizon: int
    tasks: list[int]  # the step's tasks, group g's is tasks[g]
    episodes: list[Trajectory]  # every episode rolled out
    trajs: list[Trajectory]  # those the update learns from (no environment error)
    rows: "Rows"
    logp: torch.Tensor  # (B, T) log pi of each agent token before the optimizer step
    ratio: torch.Tensor  # (B, T) pi / pi_old
    loss: float
    stats: dict  # the loss's parts (CleanRL's names: losses/policy_loss, losses/kl, ...)
    grad_norm: float  # before clipping
    change: torch.Tensor  # every trained parameter's change, flattened


# --- 2. The rollout: every episode in step, one turn at a time ------------------------------------


def rollout(policy, pool, spec, tasks: list[int], groups: list[int], horizon: int) -> list[Trajectory]:
    """One episode per task, all at once (one environment each in `pool`), at most `horizon` agent
    turns: reset; then each turn every live episode's window of the conversation becomes a prompt,
    the policy samples a reply to it, the reply goes to the environment, and the turn's row is
    recorded: the prompt (mask 0), then the sampled reply with its end-of-turn token (mask 1).
    agent.rollout is this loop with the machinery (train.py's; problem 8 asks for it)."""
    trajs = [Trajectory(task=t, group=g) for t, g in zip(tasks, groups)]
    info = pool.reset(list(range(len(tasks))), tasks)
    live = [i for i in range(len(tasks)) if begin(trajs[i], info[i], policy, spec)]
    for _ in range(horizon):
        if not live:
            break
        prompts = [chat_ids(policy.tokenizer, window(trajs[i].messages, policy.context_turns)) for i in live]
        # the action mask: only the environment's available actions can be sampled (the tiny policy's)
        acts = [info[i].get("available_actions") or ["check available actions"] for i in live]
        tries = [action_trie(policy, a) for a in acts] if policy.mask_actions else None
        ids, logprobs, allowed, texts, _ = generate(policy, prompts, tries, keep=False)
        actions = texts if policy.mask_actions else [spec.parse_action(t) for t in texts]
        answers = pool.step(live, actions)
        still = []
        for k, i in enumerate(live):
            n = len(prompts[k])  # the row: what the agent saw, then what it sampled
            trajs[i].rows.append(
                Row(
                    ids=prompts[k] + ids[k],
                    mask=[0] * n + [1] * len(ids[k]),
                    logprobs=[0.0] * n + logprobs[k],
                    allowed={n + p: a for p, a in allowed[k].items()},  # position -> the ids the mask allowed
                )
            )
            info[i] = answers[k]
            if record(trajs[i], answers[k], ids[k], texts[k], actions[k], policy):
                still.append(i)
        live = still
    for tr in trajs:  # the outcome reward: the environment's final score, scaled
        tr.reward = tr.score / spec.score_scale
        tr.success = tr.reward >= spec.success_at
    return trajs


def begin(tr: Trajectory, r: dict, policy, spec) -> bool:
    """The episode's first observation (the reset's answer `r`); whether the episode is live."""
    if policy.use_instruction:  # the environment's instruction (the tiny policy is sent none)
        tr.messages.append({"role": "system", "content": spec.instruction})
    tr.messages.append({"role": "user", "content": r["observation"]})
    tr.observations.append(r["observation"])
    tr.error, tr.done = r.get("error") or "", bool(r.get("error"))
    return not tr.error


def record(tr: Trajectory, r: dict, ids: list[int], text: str, action: str, policy) -> bool:
    """One turn: the reply and the environment's answer `r`; whether the episode goes on."""
    tr.truncated += not (ids[-1:] and ids[-1] in policy.stop_ids)  # cut at max_new_tokens
    tr.messages.append({"role": "assistant", "content": text})
    tr.actions.append(action)
    tr.rewards.append(float(r.get("reward", 0.0)))
    tr.score = float(r.get("score", sum(tr.rewards)))
    tr.observations.append(r.get("observation", ""))
    tr.error = r.get("error") or ""
    if r.get("done") or tr.error:
        tr.done = bool(r.get("done"))
        return False
    tr.messages.append({"role": "user", "content": r.get("observation", "")})
    return True


def window(messages: list[dict], k: int) -> list[dict]:
    """What the agent sees: the system message, if any, and its last k turns (the last observation
    and the k - 1 replies and observations before it)."""
    head = [m for m in messages[:1] if m["role"] == "system"]
    return head + messages[len(head) :][-(2 * k - 1) :]


# --- 3. The token rows ------------------------------------------------------------------------------


@dataclass
class Rows:
    """Every turn of every episode as one right-padded row: B rows, T the longest, V the vocabulary."""

    input_ids: torch.Tensor  # (B, T) the prompt, then the reply; the pad id after the row's end
    attention_mask: torch.Tensor  # (B, T) 1 on the row's tokens
    loss_mask: torch.Tensor  # (B, T) 1.0 exactly on the agent's sampled tokens: its reply and end-of-turn
    old_logprobs: torch.Tensor  # (B, T) log pi_old of each sampled token, at sampling time; 0 elsewhere
    may_sample: torch.Tensor  # (B, T, V) True: the token could be sampled there (the action mask)
    traj: torch.Tensor  # (B,) each row's episode
    rewards: torch.Tensor  # (N,) each episode's outcome reward
    groups: torch.Tensor  # (N,) each episode's group
    ref_logprobs: torch.Tensor | None = None  # (B, T) log pi_ref of each agent token
    advantages: torch.Tensor | None = None  # (B, T) the episode's A on each of its agent tokens


def pad(trajs: list[Trajectory], pad_id: int, vocab_size: int) -> Rows:
    """The episodes' rows, in order, right-padded into tensors (batch.make_batch, tested equal)."""
    rows = [r for tr in trajs for r in tr.rows]
    B, T = len(rows), max(len(r.ids) for r in rows)
    right = lambda xs, fill: list(xs) + [fill] * (T - len(xs))
    may_sample = torch.ones(B, T, vocab_size, dtype=torch.bool)  # no mask: anything
    for b, r in enumerate(rows):
        for t, ok in r.allowed.items():  # where sampling was masked, only the ids it allowed
            may_sample[b, t] = False
            may_sample[b, t, ok] = True
    return Rows(
        input_ids=torch.tensor([right(r.ids, pad_id) for r in rows]),
        attention_mask=torch.tensor([right([1] * len(r.ids), 0) for r in rows]),
        loss_mask=torch.tensor([right(r.mask, 0) for r in rows], dtype=torch.float),
        old_logprobs=torch.tensor([right(r.logprobs, 0.0) for r in rows]),
        may_sample=may_sample,
        traj=torch.tensor([n for n, tr in enumerate(trajs) for _ in tr.rows]),
        rewards=torch.tensor([tr.reward for tr in trajs], dtype=torch.float),
        groups=torch.tensor([tr.group for tr in trajs]),
    )


# --- 4. The log-probs the loss compares -------------------------------------------------------------


def token_logprobs(model, rows: Rows, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) log pi(x_t | x_<t) of each agent token under `model`, from the distribution it was
    sampled from (temperature, action mask), and (B, T) that distribution's entropy; 0 off the
    agent tokens. The whole (B, T, V) logits at once: plain, and what the machinery avoids."""
    logits = model(input_ids=rows.input_ids, attention_mask=rows.attention_mask).logits  # (B, T, V)
    logits = logits[:, :-1].float() / temperature  # position t - 1 predicts token t
    logits = logits.masked_fill(~rows.may_sample[:, 1:], float("-inf"))  # as at sampling
    logp_all = F.log_softmax(logits, dim=-1)  # (B, T-1, V)
    logp = logp_all.gather(-1, rows.input_ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
    p = logp_all.exp()
    entropy = -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)  # 0 log 0 := 0
    agent = rows.loss_mask[:, 1:]
    return F.pad(logp * agent, (1, 0)), F.pad(entropy * agent, (1, 0))  # (B, T): token 0 is no agent's


# --- Running it ------------------------------------------------------------------------------------


def check(run) -> None:
    """The settings this file covers (train.py covers the rest): say which flag is outside them."""
    cfg, policy = run.cfg, run.learner.policy
    episodes = cfg.tasks_per_step * cfg.group_size
    covered = {
        "--algo grpo": cfg.algo == "grpo",
        "--epochs 1": cfg.epochs == 1,
        "--minibatch-size and --generation-batch-size >= tasks x group": episodes
        <= min(cfg.minibatch_size, cfg.generation_batch_size),
        "--context-turns >= 1 (the tiny policy's 1)": policy.context_turns >= 1,
        "--kl-coef > 0": cfg.kl_coef > 0,
        "float32 on one CPU process": cfg.mixed_precision == "no"
        and run.device == "cpu"
        and not dist.world() - 1,
        "no --lora-rank, --dynamic-sampling, --overlong-filter, --horizon-filter, --resume": not (
            cfg.lora_rank or cfg.dynamic_sampling or cfg.overlong_filter or cfg.horizon_filter or cfg.resume
        ),
    }
    if outside := [flag for flag, ok in covered.items() if not ok]:
        raise SystemExit(f"plain.one_step covers only {'; '.join(outside)}: train.py runs the rest")


def show(s: Step, tokenizer, max_norm: float) -> None:
    """Print what each stage produced."""
    print(f"1. horizon: at most {s.horizon} turns per episode")
    print(f"2. rollout: {len(s.tasks)} tasks x {len(s.episodes) // len(s.tasks)} episodes, "
          f"{len(s.episodes) - len(s.trajs)} with an environment error")  # fmt: skip
    for g, task in enumerate(s.tasks):
        mine = [t for t in s.trajs if t.group == g]
        print(f"   group {g} (task {task}): rewards {[round(t.reward, 3) for t in mine]}, "
              f"turns {[t.turns for t in mine]}")  # fmt: skip
    r = s.rows
    print(f"3. rows: {tuple(r.input_ids.shape)} (rows, tokens); row 0, [agent tokens] (loss mask 1):")
    n = int(r.attention_mask[0].sum())
    pieces = [tokenizer.decode([i]) for i in r.input_ids[0, :n].tolist()]
    print("   " + "".join(f"[{p}]" if m else p for p, m in zip(pieces, r.loss_mask[0].tolist())))
    for g in range(len(s.tasks)):  # an episode's advantage sits on each of its agent tokens
        per_episode = [float(r.advantages[r.traj == n][r.loss_mask[r.traj == n] > 0][0])
                       for n, t in enumerate(s.trajs) if t.group == g and t.turns]  # fmt: skip
        print(f"   advantages, group {g}: {[round(a, 3) for a in per_episode]}")
    agent = r.loss_mask > 0
    low, high = float(s.ratio[agent].min()), float(s.ratio[agent].max())
    print(f"4. ratio pi/pi_old on {int(agent.sum())} agent tokens: {low:.7f} to {high:.7f}")
    print("   (1 up to rounding: pi_old is the policy that sampled, the weights before this step, so the")
    print("    clip cannot bind here, and at step 1 pi is pi_ref, so the KL term is 0 too)")
    print(f"   loss {s.loss:.5f} = " + ", ".join(f"{k.split('/')[1]} {v:.5f}" for k, v in s.stats.items()))
    moved, size = float(s.change.abs().max()), float(s.change.norm())
    print(f"   one AdamW step: grad norm {s.grad_norm:.4f} (clipped at {max_norm:g}), every parameter "
          f"moved by at most {moved:.2e} (|change| {size:.4f})")  # fmt: skip


def main(argv: list[str] | None = None) -> Step:
    """`python -m plain.one_step [train.py's flags]`: set up as train.py does, take step 1, print it."""
    argv = sys.argv[1:] if argv is None else argv
    cfg = train.parse_args(["--eval-episodes", "0", "--steps", "1", "--out", "runs/plain", *argv])
    run = setup(cfg, load_learner)
    try:
        check(run)
        s = one_step(run, run.start)
    finally:
        close_pool(run.pool)
        if run.writer:
            run.writer.close()
    show(s, run.learner.policy.tokenizer, cfg.max_grad_norm)
    return s


if __name__ == "__main__":
    main()
