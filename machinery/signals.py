"""Is the run learning, and if not, why? Per-step learning signals, alarms with their fixes, and
the credit each turn got (issue 28).

Where it sits: after each update `train.py` calls `step_signals()` on the step's episodes (every
process's, `episode_facts` gathered) and the batch the algorithm filled; its numbers join the
step's metrics (metrics.jsonl, TensorBoard, curves.png, report.html, a few on the progress bar).
Then `check()` reads the logged history and returns the alarms whose condition holds at this
step, each as one line that says what is wrong and the fix to try: train.py prints an alarm the
first time it fires (tqdm.write), logs `alarm/<name>` = 1 on every step it holds, and stops only
under `--stop-on-alarm`; view.py draws one banner per alarm from those flags, with the same text
(`describe`). The thresholds are train.Config's `alarm_*` fields (docs/signals.md).

Credit: when a step's rollouts are saved, `turn_credit()` sums the advantages the run's algorithm
gave each agent token per turn (and PPO's values); `credit_on_episodes()` runs several
algorithms' own `advantages()` on the same saved episodes (`view.py --credit grpo,gigpo,ppo`).

The signals, per step (`signals/...`):
    flat_groups        share of groups whose rewards are all equal: GRPO gives them no advantage
    flat_failed        share of groups that are flat because every rollout failed (too hard)
    flat_succeeded     share of groups that are flat because every rollout succeeded (too easy)
    identical_replies  share of replies that some other rollout of the group also gave at the
                       same turn (RAGEN's "echo trap": replies collapsing into one template)
    invalid_actions    share of turns whose reply held no valid action (none parsed, or refused)
    cut_replies        share of replies cut at --max-new-tokens
    reply_tokens       mean reply length in tokens
    adv_std            advantage spread: std of the advantages over the batch's agent tokens
    env_error_share    share of episodes that ended in an environment error
    nonfinite_skips    optimizer steps skipped for a non-finite loss or gradient
and `success/<category>` per task category. Entropy, KL and clip fraction are the algorithms'
(`losses/entropy`, `losses/kl`, `losses/approx_kl`, `losses/clipfrac`).

This file imports no torch at the top (view.py reads its texts without loading a model).
"""

import math
import re
from collections import defaultdict

# What each server answers when it refuses an action (the reply parsed, but no such action):
# BabyAI, TextCraft, SciWorld, WebArena, Deep Search. view.py marks such a turn "refused".
REFUSALS = re.compile(
    r"is not an available action|^Could not execute|No known action matches|^Invalid action"
    r"|Your reply holds no complete tag",
    re.MULTILINE,
)

TOKEN_LEVEL = ("ppo", "reinforce_pp")  # their advantage differs per token: a turn's credit is the sum
"""Algorithms whose advantage varies within a turn; a turn's credit is their sum over its tokens
(GRPO, RLOO and GiGPO give every token of a turn the same advantage: the turn's credit is it)."""


# ---------------------------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------------------------


def invalid_turns(actions: list[str], observations: list[str]) -> int:
    """Turns whose reply held no valid action: nothing parsed, or the environment refused it
    (`observations[k + 1]`, what came back after turn k, says so)."""
    after = observations[1:] + [""] * len(actions)
    return sum(not a.strip() or bool(REFUSALS.search(o or "")) for a, o in zip(actions, after))


def episode_facts(trajs) -> list[dict]:
    """What the signals need of each episode (agent.Trajectory), small enough to gather from
    every process."""
    return [
        {
            "group": t.group,
            "reward": float(t.reward),
            "success": bool(t.success),
            "category": t.category,
            "error": bool(t.error),
            "turns": t.turns,
            "cut": int(t.truncated),
            "tokens": sum(sum(r.mask) for r in t.rows),  # the agent's own tokens: its replies
            "replies": [m["content"] for m in t.messages if m["role"] == "assistant"],
            "invalid": invalid_turns(t.actions, t.observations),
        }
        for t in trajs
    ]


def identical_share(groups: list[list[list[str]]]) -> float:
    """groups -> rollouts -> replies by turn: the share of replies that another rollout of the
    same group gave at the same turn (all rollouts alike: 1; all different: 0)."""
    same = total = 0
    for rollouts in groups:
        for k in range(max((len(r) for r in rollouts), default=0)):
            at_k = [r[k] for r in rollouts if k < len(r)]
            counts = defaultdict(int)
            for reply in at_k:
                counts[reply] += 1
            same += sum(c for c in counts.values() if c > 1)
            total += len(at_k)
    return same / total if total else 0.0


def step_signals(facts: list[dict], batch=None) -> dict:
    """The step's signals from every episode's facts (`episode_facts`, gathered) and the batch the
    algorithm filled (its advantages; None: no update this step)."""
    ok = [f for f in facts if not f["error"]]  # what the update learned from
    by_group = defaultdict(list)
    for f in ok:
        by_group[f["group"]].append(f)
    groups = list(by_group.values())
    flat = [g for g in groups if len(g) > 1 and len({f["reward"] for f in g}) == 1]
    turns = sum(f["turns"] for f in ok)
    out = {
        "signals/flat_groups": len(flat) / len(groups) if groups else 0.0,
        "signals/flat_failed": sum(not any(f["success"] for f in g) for g in flat) / max(len(groups), 1),
        "signals/flat_succeeded": sum(all(f["success"] for f in g) for g in flat) / max(len(groups), 1),
        "signals/identical_replies": identical_share([[f["replies"] for f in g] for g in groups]),
        "signals/invalid_actions": sum(f["invalid"] for f in ok) / max(turns, 1),
        "signals/cut_replies": sum(f["cut"] for f in ok) / max(turns, 1),
        "signals/reply_tokens": sum(f["tokens"] for f in ok) / max(turns, 1),
        "signals/env_error_share": (len(facts) - len(ok)) / max(len(facts), 1),
    }
    by_cat = defaultdict(list)
    for f in ok:
        by_cat[f["category"] or "(none)"].append(f["success"])
    if len(by_cat) > 1 or "(none)" not in by_cat:
        out.update({f"success/{c}": sum(v) / len(v) for c, v in sorted(by_cat.items())})
    if batch is not None and batch.advantages is not None:
        from algorithm import global_masked_moments  # over every process's agent tokens

        _, var = global_masked_moments(batch.advantages.float().cpu(), batch.loss_mask)
        out["signals/adv_std"] = float(var) ** 0.5
    return out


# ---------------------------------------------------------------------------------------------
# Alarms
# ---------------------------------------------------------------------------------------------

ALARMS = {  # name -> (what went wrong, the fix to try)
    "non_finite": (
        "a non-finite loss or gradient: the optimizer step was skipped (the weights kept)",
        "lower --lr or --max-grad-norm; with --mixed-precision fp16 try bf16 or no",
    ),
    "no_signal": (
        "no learning signal: the groups' rewards are all equal, so GRPO's advantages are 0",
        "",
    ),  # the fix depends on the direction: `describe`
    "echo": (
        "entropy collapse or echo: the rollouts of a group give the same replies",
        "raise --entropy-coef or --temperature, lower --lr, or raise --kl-coef",
    ),
    "kl": (
        "KL blow-up: the policy moves too far (from the reference, or in one update)",
        "lower --lr, raise --kl-coef, fewer --epochs, a smaller --clip-ratio",
    ),
    "invalid": (
        "invalid actions: replies hold no valid action (format drift)",
        "check the prompt and the parser (envs.py), --mask-actions true, a few SFT steps (sft.py), "
        "or raise --kl-coef",
    ),
    "cut": (
        "replies cut at the token limit: they are sent unfinished",
        "raise --max-new-tokens, or ask for shorter replies in the instruction",
    ),
    "env_errors": (
        "environment errors: episodes left out of the update",
        "read <out>/server.log; check --url; fewer episodes at once (--generation-batch-size)",
    ),
}


ALIKE = 0.9
"""A no-signal alarm blames sampling (not the tasks) when at least this share of replies are identical
within groups (the default demo's healthy steps: at most 0.80, docs/signals.md)."""


def _held(history: list[dict], key: str, test, n: int) -> bool:
    """The last step has `key`, and `test` holds on each of the last n steps that have it."""
    if not history or key not in history[-1]:
        return False
    rows = [r for r in history if key in r][-n:]
    return len(rows) == n and all(test(r[key]) for r in rows)


def _start(history: list[dict], key: str, n: int) -> float | None:
    """The mean of `key` over the first n steps that have it: the run's starting level."""
    vals = [r[key] for r in history if key in r and _finite(r[key])][:n]
    return sum(vals) / len(vals) if vals else None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def check(history: list[dict], cfg) -> list[str]:
    """The alarms whose condition holds at the last step of `history` (the logged metrics, this
    step's last), in ALARMS' order. `cfg`: train.Config (its `alarm_*` thresholds)."""
    last, n = history[-1] if history else {}, max(1, cfg.alarm_patience)
    fired = []
    if last.get("signals/nonfinite_skips", 0) > 0:
        fired.append("non_finite")
    if _held(history, "signals/flat_groups", lambda v: v >= cfg.alarm_flat_share, n):
        fired.append("no_signal")
    ent0 = _start(history, "losses/entropy", n)
    echo_at = min(1.0, cfg.alarm_identical)
    if _held(history, "signals/identical_replies", lambda v: v >= echo_at, n) or (
        ent0 and _held(history, "losses/entropy", lambda v: v <= cfg.alarm_entropy_drop * ent0, n)
    ):
        fired.append("echo")
    kls = [r["losses/kl"] for r in history[-2:] if _finite(r.get("losses/kl"))]
    jump = kls[-1] - kls[0] if len(kls) == 2 and "losses/kl" in last else 0.0  # one update's rise
    if jump > cfg.alarm_kl_jump or any(
        _finite(last.get(k)) and last[k] > bound
        for k, bound in (("losses/kl", cfg.alarm_kl), ("losses/approx_kl", cfg.alarm_approx_kl))
    ):
        fired.append("kl")
    inv0 = _start(history, "signals/invalid_actions", n) or 0.0
    if _held(
        history,
        "signals/invalid_actions",
        lambda v: v >= min(cfg.alarm_invalid, inv0 + cfg.alarm_invalid_rise),
        n,
    ):
        fired.append("invalid")
    if last.get("signals/cut_replies", 0) >= cfg.alarm_cut and last.get("signals/cut_replies", 0) > 0:
        fired.append("cut")
    if last.get("signals/env_error_share", 0) > cfg.alarm_env_errors:
        fired.append("env_errors")
    return fired


def _pct(x) -> str:
    return f"{100 * x:.0f}%" if _finite(x) else "?"


def describe(name: str, history: list[dict]) -> str:
    """One line: the alarm, at the last step of `history`, with that step's numbers and the fix.
    The same function writes the console line (train.py) and the report's banner (view.py)."""
    last = history[-1] if history else {}
    what, fix = ALARMS[name]
    get = last.get
    if name == "no_signal":
        failed, succeeded = get("signals/flat_failed", 0.0), get("signals/flat_succeeded", 0.0)
        numbers = (
            f"{_pct(get('signals/flat_groups'))} of groups flat ({_pct(failed)} all failed, "
            f"{_pct(succeeded)} all succeeded)"
        )
        if get("signals/identical_replies", 0.0) >= ALIKE:
            numbers += f", {_pct(get('signals/identical_replies'))} of replies identical within groups"
            fix = (
                "the rollouts of a group are alike: sampling has no spread (--temperature 0 is greedy: "
                "use a temperature > 0; a collapsed policy: raise --entropy-coef)"
            )
        elif failed >= succeeded:
            fix = (
                "all failures: the tasks are too hard or the horizon too short: longer --rounds, easier "
                "tasks (--train-split), a larger --group-size, or a policy that sometimes succeeds (SFT)"
            )
        else:
            fix = "all successes: the tasks are too easy: harder tasks (--train-split), or stop here"
    elif name == "echo":
        numbers = (
            f"{_pct(get('signals/identical_replies'))} of replies identical within groups, entropy "
            f"{get('losses/entropy', float('nan')):.3g}"
        )
    elif name == "kl":
        before = history[-2].get("losses/kl", float("nan")) if len(history) > 1 else float("nan")
        numbers = (
            f"KL to the reference {get('losses/kl', float('nan')):.3g} (the step before: {before:.3g}), "
            f"approx KL {get('losses/approx_kl', float('nan')):.3g}"
        )
    elif name == "invalid":
        numbers = f"{_pct(get('signals/invalid_actions'))} of turns without a valid action"
    elif name == "cut":
        numbers = (
            f"{_pct(get('signals/cut_replies'))} of replies cut, mean reply "
            f"{get('signals/reply_tokens', float('nan')):.1f} tokens"
        )
    elif name == "env_errors":
        numbers = f"{_pct(get('signals/env_error_share'))} of episodes"
    else:
        numbers = f"{get('signals/nonfinite_skips', 0):g} optimizer steps skipped"
    return f"alarm [{name}] step {last.get('step', '?')}: {what} ({numbers}). Fix: {fix}"


# ---------------------------------------------------------------------------------------------
# Credit per turn
# ---------------------------------------------------------------------------------------------


def turn_credit(batch, algo: str) -> list[dict]:
    """Per trajectory of `batch` (after the algorithm's `advantages()`): per turn, its agent
    tokens, its credit (the advantage of its tokens; summed over them for TOKEN_LEVEL algorithms)
    and, with PPO's critic, its values: summed per turn, and per token (what `credit_on_episodes`
    needs to run PPO's GAE again exactly)."""
    from gigpo import turn_of_tokens  # which turn each agent token belongs to, either row layout

    turn = turn_of_tokens(batch)  # (B, T), -1 off the agent tokens
    adv = batch.advantages.float().cpu()
    values = batch.values.float().cpu() if batch.values is not None else None
    out = [{"algo": algo, "tokens": [], "advantage_sum": [], "values": []} for _ in range(len(batch.rewards))]
    for b in batch.traj.argsort(stable=True).tolist():  # rows in trajectory, then turn order
        rec = out[int(batch.traj[b])]
        for c in (turn[b] >= 0).nonzero().squeeze(-1).tolist():
            k = int(turn[b, c])
            while len(rec["tokens"]) <= k:
                rec["tokens"].append(0), rec["advantage_sum"].append(0.0), rec["values"].append([])
            rec["tokens"][k] += 1
            rec["advantage_sum"][k] += float(adv[b, c])
            if values is not None:
                rec["values"][k].append(float(values[b, c]))
    for rec in out:
        rec["credit"] = _credit(rec["advantage_sum"], rec["tokens"], algo)
        if values is not None:
            rec["value_sum"] = [sum(v) for v in rec["values"]]
        else:
            del rec["values"]
    return out


def _credit(sums: list[float], tokens: list[int], algo: str) -> list[float]:
    return list(sums) if algo in TOKEN_LEVEL else [s / max(n, 1) for s, n in zip(sums, tokens)]


def credit_on_episodes(records: list[dict], algos: dict, cfg) -> dict[str, list[list[float] | None]]:
    """Each algorithm's per-turn credit on the same saved episodes (eval.write_trajectories'
    records of one training step), from its own `advantages(batch, cfg, None)`. `algos`: name ->
    algorithm.Algorithm. The episodes become a batch with one row per turn holding that turn's
    agent-token count (saved by `turn_credit`; 1 when not saved) and, for PPO, the run's own
    critic values when the run was PPO (a zero critic otherwise: PPO's first step). Returns, per
    algorithm, per record, the per-turn credit (None for an episode that ended in an error, which
    the update left out)."""
    from types import SimpleNamespace

    import torch

    from batch import Row, make_batch

    keep = [i for i, r in enumerate(records) if not r.get("error") and int(r.get("turns") or 0) > 0]
    eps = []
    for i in keep:
        r = records[i]
        n_turns = int(r["turns"])
        saved = (r.get("credit") or {}).get("tokens") or []
        tokens = [int(saved[k]) if k < len(saved) else 1 for k in range(n_turns)]
        rows = [Row(ids=[0] * (1 + n), mask=[0] + [1] * n, logprobs=[0.0] * (1 + n)) for n in tokens]
        eps.append(
            SimpleNamespace(
                rows=rows,
                reward=float(r.get("reward") or 0.0),
                group=r.get("group", r.get("task")),
                observations=r.get("observations") or [],
                turns=n_turns,
                tokens=tokens,
                values=(r.get("credit") or {}).get("values"),
            )
        )
    out: dict[str, list] = {name: [None] * len(records) for name in algos}
    if not eps:
        return out
    ids = {g: k for k, g in enumerate(dict.fromkeys(str(e.group) for e in eps))}  # any group key -> 0, 1, ...
    for e in eps:
        e.group = ids[str(e.group)]
    for name, algo in algos.items():
        batch = make_batch(eps, pad_id=0)
        if name == "ppo" and all(e.values and [len(v) for v in e.values] == e.tokens for e in eps):
            batch.values = torch.zeros_like(batch.loss_mask)
            for b, (n, k) in enumerate(zip(batch.traj.tolist(), batch.turn.tolist())):
                batch.values[b, 1 : 1 + eps[n].tokens[k]] = torch.tensor(eps[n].values[k])
        algo.advantages(batch, cfg, None)
        adv = batch.advantages.float()
        for b, (n, k) in enumerate(zip(batch.traj.tolist(), batch.turn.tolist())):
            if out[name][keep[n]] is None:
                out[name][keep[n]] = [0.0] * eps[n].turns
            out[name][keep[n]][k] = float((adv[b] * batch.loss_mask[b]).sum())
        for n, i in enumerate(keep):
            out[name][i] = _credit(out[name][i], eps[n].tokens, name)
    return out


def check_finite(model, step: int) -> None:
    """Stop, with a clear message, when any weight of `model` is NaN or infinite: such weights
    are never saved (the last checkpoint stays the last good one)."""
    import torch

    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise RuntimeError(
            f"step {step}: non-finite weights ({len(bad)} tensors, first {bad[0]}); the run stops "
            f"and they are not saved (the last checkpoint is the last good one). Fix: "
            f"{ALARMS['non_finite'][1]}"
        )


def plot(ax, rows: list[dict]) -> None:
    """The signal shares per step on a matplotlib axis (train.plot_curves' "learning signals"
    panel), each alarm's steps marked along the bottom."""
    for key, label in (
        ("signals/flat_groups", "groups with all-equal rewards"),
        ("signals/identical_replies", "identical replies in a group"),
        ("signals/invalid_actions", "turns without a valid action"),
        ("signals/cut_replies", "replies cut at the token limit"),
    ):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            ax.plot(*zip(*pts), label=label)
    for k, name in enumerate(ALARMS):
        steps = [r["step"] for r in rows if r.get(f"alarm/{name}")]
        if steps:
            ax.scatter(steps, [-0.04 - 0.04 * k] * len(steps), marker="|", color="red", s=40)
            ax.annotate(
                f"alarm: {name}",
                (steps[0], -0.04 - 0.04 * k),
                fontsize=6,
                color="red",
                xytext=(3, -2),
                textcoords="offset points",
            )
    ax.set_xlabel("step")
    ax.set_ylim(-0.05 - 0.04 * len(ALARMS), 1)
    ax.legend(fontsize=7)
    ax.set_title("learning signals (share per step)", fontsize=9)
