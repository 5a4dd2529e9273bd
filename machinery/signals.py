"""Is the run learning, and if not, why? Per-step learning signals, alarms with their fixes, and
the invalid replies they count.

Where it sits: after each update `train.py` calls `step_signals()` on the step's episodes (every
process's, `episode_facts` gathered) and the batch the algorithm filled; its numbers join the
step's metrics (metrics.jsonl, TensorBoard, curves.png, report.html, a few on the progress bar).
Then `check()` reads the logged history and returns the alarms whose condition holds at this
step, each as one line that says what is wrong and the fix to try: train.py prints an alarm the
first time it fires (tqdm.write), logs `alarm/<name>` = 1 on every step it holds, and stops only
under `--stop-on-alarm`; view.py draws one banner per alarm from those flags, with the same text
(`describe`). The thresholds are `Alarms`' fields, which train.Config extends (docs/signals.md).
The credit each turn got is diagnostics/credit.py's.

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
    nonfinite_skips    optimizer steps skipped for a non-finite loss or gradient (fp16's loss scaler's
                       overflows are charts/fp16_overflow_*: the alarm reads them when they never stop)
and `success/<category>` per task category. Entropy, KL and clip fraction are the algorithms'
(`losses/entropy`, `losses/kl`, `losses/approx_kl`, `losses/clipfrac`).

This file imports no torch at the top (view.py reads its texts without loading a model).
"""

import math
import re
from collections import defaultdict
from dataclasses import dataclass

from machinery.flags import flag

# What each server answers to a reply whose action it did not carry out: no action in it, or one
# the environment cannot do. BabyAI; TextCraft (an unknown item or command, missing ingredients,
# ingredients no recipe uses, the wrong amounts of them); SciWorld; WebArena; Deep Search.
# The one definition of an invalid reply: the signals, the report's "refused" mark, sft.py --valid
# and eval.py's tables all ask `refused`.
REFUSALS = re.compile(
    r"is not an available action|^Could not |^Wrong quantities|^Wrong ingredients"
    r"|No known action matches|^Invalid action|Your reply holds no complete tag",
    re.MULTILINE,
)


def refused(observation: str | None) -> bool:
    """Whether `observation`, the environment's answer to a reply, says it did not carry it out."""
    return bool(REFUSALS.search(observation or ""))


@dataclass
class Alarms:
    """When an alarm fires (`check`), and whether it stops the run."""

    stop_on_alarm: bool = False
    """stop the run (after logging the step) when an alarm fires (machinery/signals.py); default: warn and go
    on"""
    alarm_patience: int = flag(3, at_least=1)
    """steps in a row a slow condition (no signal, echo, invalid actions) must hold before its alarm fires"""
    alarm_flat_share: float = flag(0.9, at_least=0, at_most=1)
    """no-signal alarm: a step has no signal when at least this share of its groups have all-equal rewards"""
    alarm_identical: float = flag(0.95, at_least=0, at_most=1)
    """echo alarm: share of a group's replies identical to another rollout's at the same turn"""
    alarm_entropy_drop: float = flag(0.1, at_least=0, at_most=1)
    """echo alarm, entropy collapse: entropy below this fraction of its level over the first steps"""
    alarm_kl: float = flag(0.5, at_least=0)
    """KL alarm: bound on the KL to the reference model (losses/kl)"""
    alarm_kl_jump: float = flag(0.15, at_least=0)
    """KL alarm: bound on the KL to the reference's rise from one step to the next (one update's blow-up)"""
    alarm_approx_kl: float = flag(0.1, at_least=0)
    """KL alarm: bound on one update's approx KL, old to new policy (losses/approx_kl)"""
    alarm_invalid: float = flag(0.3, at_least=0, at_most=1)
    """invalid-action alarm: share of turns without a valid action"""
    alarm_invalid_rise: float = flag(0.2, at_least=0, at_most=1)
    """invalid-action alarm: also fires when that share rose this much above its level over the first steps"""
    alarm_cut: float = flag(0.1, at_least=0, at_most=1)
    """cut alarm: share of replies cut at --max-new-tokens"""
    alarm_env_errors: float = flag(0.05, at_least=0, at_most=1)
    """environment-error alarm: fires above this share of a step's episodes ending in an environment error"""


# ---------------------------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------------------------


def invalid_turns(actions: list[str], observations: list[str]) -> int:
    """Turns whose reply held no valid action: nothing parsed, or the environment refused it
    (`observations[k + 1]`, what came back after turn k, says so)."""
    after = observations[1:] + [""] * len(actions)
    return sum(not a.strip() or refused(o) for a, o in zip(actions, after))


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
        from machinery.dist import global_masked_moments  # over every process's agent tokens (torch)

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
        "check the prompt and the parser (envs/tasks.py), --mask-actions true, a few SFT steps (sft.py), "
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
    step's last), in ALARMS' order. `cfg`: an `Alarms` (train.Config extends it)."""
    last, n = history[-1] if history else {}, max(1, cfg.alarm_patience)
    fired = []
    if last.get("signals/nonfinite_skips", 0) > 0 or fp16_stalled(history, n):
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


FP16_SCALE_FLOOR = 1.0
"""Below this loss scale fp16 cannot hold the gradients even unscaled: the scaler has halved it at
every overflow since its 65,536 (16 halvings at least), so the run is not training."""


def fp16_stalled(history: list[dict], n: int) -> bool:
    """An fp16 run whose loss scaler skipped every optimizer step of the last n steps, or whose scale
    fell below FP16_SCALE_FLOOR: its weights do not move, though every loss is finite (each skip
    is routine at fp16's first scales; all of them, step after step, is not)."""
    scale = history[-1].get("charts/fp16_loss_scale") if history else None
    return _held(history, "charts/fp16_overflow_share", lambda v: v >= 1, n) or (
        scale is not None and scale < FP16_SCALE_FLOOR
    )


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
                "the rollouts of a group are alike: sampling has no spread (a --temperature near 0 is "
                "near-greedy: raise it; a collapsed policy: raise --entropy-coef)"
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
    elif get("signals/nonfinite_skips", 0):
        numbers = f"{get('signals/nonfinite_skips', 0):g} optimizer steps skipped"
    else:  # fp16_stalled
        numbers = (
            f"fp16's loss scaler skipped {_pct(get('charts/fp16_overflow_share'))} of the optimizer steps, "
            f"its scale now {get('charts/fp16_loss_scale', float('nan')):g}: the weights are not moving"
        )
    return f"alarm [{name}] step {last.get('step', '?')}: {what} ({numbers}). Fix: {fix}"


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
    """The signal shares per step on a matplotlib axis (machinery/metrics.py' "learning signals"
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
