"""Evaluate an agent: success rate, score, pass@k and turns on a split or explicit task ids.

    python eval.py --model runs/default/checkpoint --split test --n-samples 4 --horizon 20
    python eval.py --model tiny --task-ids 0-99 --out runs/eval_tiny
    python eval.py --model Qwen/Qwen2.5-7B-Instruct --env babyai --split all-test --max-new-tokens 512
    python eval.py --model runs/default/checkpoint --sweep-horizons 1,2,4,8,16   # success vs max turns
    python eval.py --env textcraft --expert true --limit 100 --out demos/textcraft  # the expert plays

Flags: `python eval.py --help`; the agent's settings (`--model`, `--temperature`,
`--max-new-tokens`, `--context-turns`, `--mask-actions`, ...) are train.py's (config.AgentConfig).

Writes <out>/summary.json, the same as tables to <out>/summary.md (also printed), every
trajectory to <out>/trajectories.jsonl (conversation, observations, actions, per-step rewards,
outcome; with `--render true` on BabyAI a picture of every observation) and <out>/report.html,
view.py's report of it all. pass@k is the unbiased estimator of Chen et al. (2021):
1 - C(n-c, k) / C(n, k) per task, averaged over the tasks that have at least k samples, for
k = 1, 2, 4, ... up to n samples; a k that no task has k samples for (after environment errors,
or in a category) is left out rather than reported as 0.

An episode that ended in an environment error (a crashed server, a time-out) is not a failure of
the agent: it is left out of every rate (success, score, turns, pass@k), and `errors` counts these
(each is in trajectories.jsonl with its `error`). A `--url` that does not answer is an error before
anything runs.
"""

import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

import view
from agent import Policy, Trajectory, rollout
from config import (
    AgentConfig,
    autocast,
    check_split,
    flag,
    load_agent,
    parse,
    resolve_device,
    resolve_precision,
    set_threads,
)
from diagnostics.probe import binding
from envs import EnvPool, EnvSpec, close_pool, env_spec, open_pool, server_url
from machinery import dist
from machinery.flags import problem


@dataclass
class EvalConfig(AgentConfig):
    """Every knob of an evaluation: the agent's (config.AgentConfig) and which tasks, how often."""

    split: str = "test"
    """a named split of the env (see envs.ENVS)"""
    task_ids: str = flag("", check=lambda text: check_task_ids(text))
    """explicit data_idx list/ranges instead of a split, e.g. 0-99,200"""
    n_samples: int = flag(1, at_least=1)
    """samples per task (for pass@k)"""
    horizon: int = flag(0, at_least=0)
    """turn limit; 0: the env's default horizon"""
    sweep_horizons: str = flag("", check=lambda text: check_sweep(text))
    """evaluate at each of these turn limits instead (e.g. 1,2,4,8,16): <out>/sweep.json and sweep.png"""
    limit: int = flag(0, at_least=0)
    """use only the first N tasks (0: all)"""
    parallel: int = flag(64, at_least=1)
    """episodes in flight at once"""
    generation_batch_size: int = flag(256, at_least=1)
    """episodes that generate at once (their KV caches share the memory); the rest wait (train.py's flag)"""
    mixed_precision: str = flag("auto", choices=("auto", "no", "fp16", "bf16"))
    """autocast of generation: the precision the policy trained in (train.py's flag; auto as there)"""
    out: str = "runs/eval"
    """output folder: summary.json, summary.md, trajectories.jsonl, report.html"""
    render: bool = False
    """record a picture of every observation for view.py (BabyAI's minigrid frame; other envs have none)"""
    expert: bool = False
    """the env's expert plays instead of a model (POST /expert): its
    ceiling; its episodes are demonstrations"""

    def __post_init__(self):
        super().__post_init__()
        if not self.task_ids:
            check_split(self.env, "split", self.split)
        if self.render and self.env != "babyai":
            raise ValueError(
                f"--render true: only the BabyAI server draws pictures of its observations, not {self.env}"
            )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_ks(trajs, ks: list[int]) -> dict[str, float]:
    """pass@k for each k, averaged over the tasks of `trajs` that have at least k samples (a task
    that lost samples to environment errors counts only for k up to what it has left); a k that
    no task has k samples for is left out (there is nothing to average, and 0 would read as a result)."""
    by_task = defaultdict(list)
    for t in trajs:
        by_task[t.task].append(t.success)
    out = {}
    for k in ks:
        have = [pass_at_k(len(v), sum(v), k) for v in by_task.values() if len(v) >= k]
        if have:
            out[str(k)] = float(np.mean(have))
    return out


def summarise(trajs, n_samples: int) -> dict:
    """Rates over the episodes that did not end in an environment error; `errors` counts those."""
    errors = sum(bool(t.error) for t in trajs)
    if errors:
        tqdm.write(
            f"warning: {errors} of {len(trajs)} episodes ended in an environment error and are left "
            f"out of the rates (first: {next(t.error for t in trajs if t.error)[:200]})"
        )
    trajs = [t for t in trajs if not t.error]
    by_task = defaultdict(list)
    for t in trajs:
        by_task[t.task].append(t)
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n_samples]
    out = {
        "n_tasks": len(by_task),
        "n_samples": n_samples,
        "n_episodes": len(trajs),
        "success_rate": float(np.mean([t.success for t in trajs])) if trajs else 0.0,
        "avg_score": float(np.mean([t.score for t in trajs])) if trajs else 0.0,
        "avg_reward": float(np.mean([t.reward for t in trajs])) if trajs else 0.0,
        "avg_turns": float(np.mean([t.turns for t in trajs])) if trajs else 0.0,
        "pass_at_k": pass_at_ks(trajs, ks),
        "errors": errors,
        "truncated_replies": sum(t.truncated for t in trajs),  # cut at max_new_tokens
    }
    cats = defaultdict(list)
    for t in trajs:
        cats[t.category or "all"].append(t.success)
    if len(cats) > 1:
        out["success_by_category"] = {c: float(np.mean(v)) for c, v in sorted(cats.items())}
        out["by_category"] = {}
        for c in sorted(cats):
            ts = [t for t in trajs if (t.category or "all") == c]
            out["by_category"][c] = {
                "n_tasks": len({t.task for t in ts}),
                "n_episodes": len(ts),
                "success_rate": float(np.mean([t.success for t in ts])),
                "avg_score": float(np.mean([t.score for t in ts])),
                "avg_turns": float(np.mean([t.turns for t in ts])),
                "pass_at_k": pass_at_ks(ts, ks),
            }
    return out


def summary_table(summary: dict) -> str:
    """The summary as aligned Markdown tables: overall and per category, then pass@k. Reads
    well in a terminal, in summary.md, and in view.py's report."""
    rows = [("all", summary)] + list(summary.get("by_category", {}).items())
    head = ["", "tasks", "episodes", "success", "score", "turns"]
    body = [
        [
            name,
            str(r.get("n_tasks", "")),
            str(r.get("n_episodes", "")),
            f"{r.get('success_rate', 0):.3f}",
            f"{r.get('avg_score', 0):.3f}",
            f"{r.get('avg_turns', 0):.2f}",
        ]
        for name, r in rows
    ]
    out = [_markdown(head, body)]
    ks = list(summary.get("pass_at_k", {}))
    if ks:
        cell = lambda v: "-" if v is None else f"{v:.3f}"  # "-": no task of that row has k samples
        body = [[name] + [cell(r.get("pass_at_k", {}).get(k)) for k in ks] for name, r in rows]
        out.append(_markdown(["pass@k"] + [f"k={k}" for k in ks], body))
    if summary.get("errors"):
        out.append(f"{summary['errors']} episode(s) ended in an environment error (left out of the rates).")
    return "\n\n".join(out)


def _markdown(head: list[str], body: list[list[str]]) -> str:
    width = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    line = lambda row: (
        "| "
        + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, width)))
        + " |"
    )
    rule = "|" + "|".join("-" * (w + 1) + ("-" if i == 0 else ":") for i, w in enumerate(width)) + "|"
    return "\n".join([line(head), rule] + [line(r) for r in body])


def evaluate(
    policy: Policy,
    pool: EnvPool,
    spec: EnvSpec,
    task_ids: list[int],
    n_samples: int = 1,
    horizon: int = 20,
    desc: str = "eval",
    batch_size: int = 256,
):
    """Roll out every task n_samples times (sampling at the policy's temperature), at most
    `batch_size` episodes generating at once (--generation-batch-size: the KV caches of an
    evaluation are as large as a training step's). With N processes (`accelerate launch`,
    machinery/dist.py) each rolls out its share of the episodes and every process gets all of them
    back, in task order. Call it under the run's autocast (config.autocast)."""
    tasks = [t for t in task_ids for _ in range(n_samples)]
    trajs = rollout(
        policy,
        pool,
        spec,
        dist.shard(tasks),
        horizon,
        batch_size=batch_size,
        desc=desc if dist.is_main() else None,
    )
    trajs = dist.gather(trajs)
    return summarise(trajs, n_samples), trajs


def evaluate_in_training(run, when: str, step: int = 0) -> dict:
    """The policy of train.py's `run` (its loop.run.Run) on the held-out test tasks (and the binding
    probe, with --probe-every) at one occasion: "before" training (summary's eval_before,
    probe_before), after training ("after": eval_after), or at `step` of it ("step": every
    --eval-every steps but the last, whose evaluation is eval_after, and the probe every
    --probe-every steps, the first and the last).
    Under FSDP the whole weights are gathered once for all of it. Returns the step's metrics."""
    cfg, m = run.cfg, {}
    at_step = when == "step"
    evaluate_now = bool(run.test_tasks) and (
        not at_step or (cfg.eval_every > 0 and step % cfg.eval_every == 0 and step != cfg.steps)
    )
    probe_now = (
        bool(run.probe)
        and when != "after"
        and (not at_step or step % cfg.probe_every == 0 or step in (1, cfg.steps))
    )
    if not (evaluate_now or probe_now):
        return m
    # FSDP: generation needs the whole weights; in the run's precision and generation batches
    with dist.full_weights(run.learner.forward), run.learner.accelerator.autocast():
        if evaluate_now:
            ev, episodes = evaluate(
                run.learner.policy,
                run.pool,
                run.spec,
                run.test_tasks,
                cfg.eval_samples,
                run.eval_horizon,
                "eval" if at_step else f"eval {when}",
                cfg.generation_batch_size,
            )
        if probe_now:
            probed = binding(run.learner.policy, run.probe).__dict__
    if at_step:
        if evaluate_now:
            m["eval/success"], m["eval/turns"] = ev["success_rate"], ev["avg_turns"]
        if probe_now:
            run.summary["probe_after"] = probed
            m.update({f"probe/{k}": v for k, v in probed.items() if k != "n_states"})
        return m
    if evaluate_now:
        run.summary[f"eval_{when}"] = ev
        if run.main:
            folder = os.path.join(cfg.out, f"eval_{when}")
            write_trajectories(os.path.join(folder, "trajectories.jsonl"), episodes)
            with open(os.path.join(folder, "summary.json"), "w") as f:  # for a --resume of a run cut short
                json.dump(ev, f, indent=1)
            before = run.summary.get("eval_before", {}).get("success_rate", float("nan"))
            errors = f" ({ev['errors']} episodes with environment errors left out)" if ev["errors"] else ""
            print(
                f"eval before: success {before:.3f}"
                + (errors if when == "before" else f"  after: success {ev['success_rate']:.3f}")
            )
    if probe_now:
        run.summary["probe_before"] = probed
    return m


def expert_rollout(pool: EnvPool, spec: EnvSpec, tasks: list[int], horizon: int, desc: str = "expert"):
    """Episodes played by the environment's expert (POST /expert), recorded as `agent.rollout`
    records a real model's: the same system prompt and observations, and where the agent's reply
    would be, the expert's thought and action in the environment's reply format (`spec.write_reply`),
    sent as the agent's reply is sent (`spec.parse_action`). No model, no tokens."""
    trajs = []
    for start in tqdm(range(0, len(tasks), len(pool)), desc=desc, leave=False):
        chunk = tasks[start : start + len(pool)]
        slots = list(range(len(chunk)))
        group = [Trajectory(task=t, group=start + i) for i, t in enumerate(chunk)]
        live = []
        for i, (tr, r) in enumerate(zip(group, pool.reset(slots, chunk))):
            tr.category = str(r.get("category", ""))
            tr.messages += [
                {"role": "system", "content": spec.instruction},
                {"role": "user", "content": r["observation"]},
            ]
            tr.observations.append(r["observation"])
            tr.frames.append(r.get("frame", ""))
            if r.get("error"):
                tr.error, tr.done = r["error"], True
            else:
                live.append(i)
        for _ in range(horizon):
            if not live:
                break
            advice = pool.expert(live)
            replies = [spec.write_reply(a.get("thought", ""), a.get("action", "")) for a in advice]
            results = pool.step(live, [spec.parse_action(reply) for reply in replies])
            still = []
            for i, a, reply, r in zip(live, advice, replies, results):
                tr, r = group[i], (a if a.get("error") else r)  # a failed /expert: the episode's error
                tr.messages.append({"role": "assistant", "content": reply})
                tr.actions.append(spec.parse_action(reply))
                tr.rewards.append(float(r.get("reward", 0.0)))
                tr.score = float(r.get("score", sum(tr.rewards)))
                tr.observations.append(r.get("observation", ""))
                tr.frames.append(r.get("frame", ""))
                tr.error = r.get("error", "")
                if r.get("done") or r.get("error"):
                    tr.done = bool(r.get("done"))  # as the env said, as in agent.py's rollouts
                    continue
                tr.messages.append({"role": "user", "content": r.get("observation", "")})
                still.append(i)
            live = still
        for tr in group:
            tr.reward = tr.score / spec.score_scale
            tr.success = tr.reward >= spec.success_at
        trajs += group
    return trajs


def parse_task_ids(text: str) -> list[int]:
    """ "0-99,200,300-310" -> [0..99, 200, 300..310]."""
    ids = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        ids += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return ids


def check_task_ids(text: str) -> str | None:
    """--task-ids: empty, or ids and ranges that parse_task_ids reads, none of them negative."""
    try:
        ids = parse_task_ids(text) if text else [0]
    except ValueError:
        ids = []
    ok = ids and min(ids) >= 0
    return None if ok else "expected comma-separated task ids (data_idx) and ranges a-b, e.g. 0-99,200"


def check_sweep(text: str) -> str | None:
    """--sweep-horizons: empty, or comma-separated turn limits, each at least 1."""
    return problem(text, items=int, at_least=1) if text else None


def write_trajectories(path: str, trajs, step: int | None = None) -> None:
    """One JSON line per trajectory, as view.py reads it; `step`: the training step it came from.
    `observations` holds the first observation and the one after every action."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        for t in trajs:
            rec = {
                "task": t.task,
                "category": t.category,
                "success": t.success,
                "reward": t.reward,
                "score": t.score,
                "turns": t.turns,
                "truncated": t.truncated,
                "done": t.done,
                "error": t.error,
                "actions": t.actions,
                "rewards": t.rewards,
                "conversation": t.messages,
                "observations": t.observations,
            }
            if any(t.frames):
                rec["frames"] = t.frames
            if step is not None:
                rec["step"] = step
                rec["group"] = t.group  # the rollouts of one task in one step: GRPO's group
            if getattr(t, "credit", None):  # a saved training step: per turn, the advantage it got
                rec["credit"] = t.credit
            f.write(json.dumps(rec) + "\n")


def sweep_horizons(
    policy: Policy,
    pool: EnvPool,
    spec: EnvSpec,
    task_ids: list[int],
    horizons: list[int],
    n_samples: int = 1,
    batch_size: int = 256,
) -> list[dict]:
    """Test-time interaction scaling (AgentGym-RL's figure of success vs interaction turns): the
    same policy and tasks evaluated at several turn limits. One summary per horizon, with
    `horizon`, the share of episodes the limit cut (`cut_share`) and each task's success
    (`task_success`, averaged over its samples) added."""
    rows = []
    for h in horizons:
        summary, trajs = evaluate(
            policy, pool, spec, task_ids, n_samples, h, desc=f"max turns {h}", batch_size=batch_size
        )
        summary["horizon"] = h
        summary["cut_share"] = float(np.mean([not t.done and t.turns >= h for t in trajs])) if trajs else 0.0
        per_task: dict[str, list[float]] = {}  # for comparisons paired over tasks
        for t in trajs:
            if not t.error:
                per_task.setdefault(str(t.task), []).append(float(t.success))
        summary["task_success"] = {task: float(np.mean(v)) for task, v in per_task.items()}
        rows.append(summary)
    return rows


def plot_sweep(sweeps: dict[str, list[dict]], png: str, title: str = "") -> None:
    """Success vs max turns, one line per model (a log-2 x axis, as the horizons double)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, rows in sweeps.items():
        ax.plot([r["horizon"] for r in rows], [r["success_rate"] for r in rows], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("max turns at test time")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.set_title(title or "test-time interaction scaling")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def describe_tasks(cfg: EvalConfig, n: int) -> str:
    """A short description of the evaluated tasks, for the summary."""
    if not cfg.task_ids:
        return f"split {cfg.split}" + (f", first {n}" if cfg.limit else "") + f" ({n} tasks)"
    ids = cfg.task_ids if len(cfg.task_ids) <= 40 else cfg.task_ids[:37] + "..."
    return f"task ids {ids} ({n} tasks)"


def main(argv=None):
    cfg = parse(EvalConfig, argv, description="Evaluate an agent on an environment's tasks.")
    import torch

    device = resolve_device(cfg.device)
    here = dist.start(cpu=device == "cpu")  # under `accelerate launch`: N processes share the episodes
    url = server_url(cfg.url, dist.rank())  # a dead --url is a clear error before anything else runs
    torch.manual_seed(dist.process_seed(cfg.seed))
    spec = env_spec(cfg.env, url, *([] if cfg.task_ids else [cfg.split]))  # (openenv: read from its server)
    tasks = parse_task_ids(cfg.task_ids) if cfg.task_ids else spec.splits[cfg.split]
    tasks = tasks[: cfg.limit] if cfg.limit else tasks
    set_threads(cfg, device)
    cfg.mixed_precision = resolve_precision(cfg.mixed_precision, cfg.model, device)
    policy = None if cfg.expert else load_agent(cfg, here.device)
    os.makedirs(cfg.out, exist_ok=True)
    pool = open_pool(
        cfg.env,
        size=max(1, min(cfg.parallel, math.ceil(len(tasks) * cfg.n_samples / dist.world()))),
        url=url,
        create={"render": True} if cfg.render else None,
    )
    try:
        result = run(cfg, policy, pool, spec, tasks, here.device)
    finally:
        close_pool(pool)
    if not dist.is_main():  # every process has every episode (dist.gather); the main one writes
        return result if cfg.sweep_horizons else result[0]
    if cfg.sweep_horizons:
        return write_sweep(cfg, result, len(tasks))
    return write_evaluation(cfg, *result, len(tasks))


def run(cfg: EvalConfig, policy, pool, spec, tasks: list[int], device):
    """The episodes: (summary, trajectories) of the expert or the policy, or a --sweep-horizons's rows."""
    if cfg.expert:  # (one process: the expert needs no accelerator)
        samples = [t for t in tasks for _ in range(cfg.n_samples)]
        trajs = expert_rollout(pool, spec, samples, cfg.horizon or spec.default_horizon)
        return summarise(trajs, cfg.n_samples), trajs
    with autocast(cfg.mixed_precision, device):  # generate in the precision the policy trained in
        if cfg.sweep_horizons:
            horizons = [int(h) for h in cfg.sweep_horizons.split(",")]
            return sweep_horizons(
                policy, pool, spec, tasks, horizons, cfg.n_samples, cfg.generation_batch_size
            )
        horizon = cfg.horizon or spec.default_horizon
        return evaluate(
            policy, pool, spec, tasks, cfg.n_samples, horizon, batch_size=cfg.generation_batch_size
        )


def write_sweep(cfg: EvalConfig, rows: list[dict], n_tasks: int) -> list[dict]:
    """sweep.json and sweep.png under --out, and a line per horizon."""
    with open(os.path.join(cfg.out, "sweep.json"), "w") as f:
        json.dump(
            {"model": cfg.model, "env": cfg.env, "tasks": describe_tasks(cfg, n_tasks), "sweep": rows},
            f,
            indent=2,
        )
    plot_sweep({cfg.model: rows}, os.path.join(cfg.out, "sweep.png"))
    for r in rows:
        print(
            f"max turns {r['horizon']:>3}: success {r['success_rate']:.3f}  turns {r['avg_turns']:.2f}"
            f"  cut by the limit {r['cut_share']:.3f}"
        )
    return rows


def write_evaluation(cfg: EvalConfig, summary: dict, trajs: list, n_tasks: int) -> dict:
    """summary.json, summary.md, trajectories.jsonl and report.html under --out."""
    import torch

    summary.update(
        model="expert" if cfg.expert else cfg.model,
        env=cfg.env,
        tasks=describe_tasks(cfg, n_tasks),
        # what a policy's episodes depend on beyond the command (docs/sft.md, "The same command ...")
        threads=torch.get_num_threads(),
        mixed_precision=cfg.mixed_precision,
        cpu=torch.backends.cpu.get_cpu_capability(),  # the kernels' instruction set: AVX2, AVX512, ...
    )
    with open(os.path.join(cfg.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    write_trajectories(os.path.join(cfg.out, "trajectories.jsonl"), trajs)
    table = f"{summary['model']} on {cfg.env}, {summary['tasks']}\n\n{summary_table(summary)}\n"
    with open(os.path.join(cfg.out, "summary.md"), "w") as f:
        f.write(table)
    print(table)
    print("report:", view.write_report([cfg.out], os.path.join(cfg.out, "report.html")))
    return summary


if __name__ == "__main__":
    main()
