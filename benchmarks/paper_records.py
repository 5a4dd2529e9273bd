"""A row of the paper's table as a chain of stages whose results live in the repository.

A row needs 4-6 hours of a 2-core machine, longer than one stretch of work, and `runs/` may be gone
when work resumes. What has to last between stretches is each stage's result, which is small, so
every stage that trains or evaluates leaves a record, `docs/paper-table/<env>/<stage>.json`, that
is committed: the command, the code revision it ran at, the CPU and the wall time, the summary
figures, every sample's outcome by task id (an evaluation), the per-step metrics (an RL run) and a
fingerprint of the checkpoint's weights (a training stage). A few kilobytes a stage; trajectories
and checkpoints stay in runs/. `paper_table.py --table` reads only the records.

Checkpoints are never carried between stretches: a stage that needs one missing from runs/
rebuilds it with the recipe at the row's pinned revision (`docs/paper-table/<env>/row.json`), in a
git worktree of that commit, so that a later change to the model code does not change the
rebuild, and checks its fingerprint against the record: a mismatch stops the row. A rebuild
re-chooses nothing (the best imitation checkpoint and the self-training round are read from the
records).

`--budget MINUTES` runs the next stages that fit, estimated from the records' wall times (an RL
seed and its validation count as one unit), and prints what finished and what remains.

Also here: the seeds-aware standard error of a paired gain (`seeds_aware_se`).
"""

import hashlib
import json
import math
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = os.path.join(ROOT, "docs", "paper-table")  # <env>/<stage>.json and <env>/row.json
METRICS = ("success", "reward")  # an evaluation's per-sample outcomes kept by task
# a stage's minutes on the project's 2-core machine, by kind, before any record of its kind exists
# (BabyAI's and Deep Search's earlier rows: docs/paper-table.md)
DEFAULT_MINUTES = {
    "demos": 2, "sft": 12, "dagger_policy": 6, "dagger": 2, "val_sft": 8, "rl_s": 35, "val_rl_s": 5,
    "self_policy": 12, "self": 8, "val_self": 8, "test_sft": 8, "test_self": 8, "test_rl_s": 8,
    "test_base": 15,
}  # fmt: skip


@dataclass
class Study:
    """Where a recipe's stages run and what they leave. The default (no records, this checkout's
    code, no budget) is a plain run: a stage runs unless its output exists."""

    records: str | None = None  # the row's records (<records>/<stage>.json), or none kept
    runs: str = ""  # the row's output folders (<runs>/<stage>/), absolute
    cwd: str = ROOT  # the code the stages run: a worktree at the row's pinned revision
    revision: str = ""  # that revision
    deadline: float = math.inf  # time.time() past which no stage starts
    dry: bool = False  # the budget ran out: the recipe goes on only to list what remains
    stages: dict = field(default_factory=dict)  # name -> (argv, done): how to rebuild its outputs
    derived: dict = field(default_factory=dict)  # a file the recipe makes from a stage's output -> maker
    finished: list = field(default_factory=list)  # (name, seconds) run in this stretch
    left: list = field(default_factory=list)  # (name, estimated seconds) the budget left for later


STUDY = Study()


# ---------------------------------------------------------------------------------------------
# Records


def record_path(name: str) -> str | None:
    return os.path.join(STUDY.records, f"{name}.json") if STUDY.records else None


def load(path: str) -> dict:
    """A record, its task ids back to ints (JSON keys are strings)."""
    rec = json.load(open(path))
    for metric, by_task in rec.get("outcomes", {}).items():
        rec["outcomes"][metric] = {int(t) if t.isdigit() else t: xs for t, xs in by_task.items()}
    return rec


def read_outputs(folder: str) -> dict | None:
    """What a stage's output folder holds, as a record keeps it (None: nothing finished there):
    the summary, each sample's success and reward by task (environment errors left out, as
    eval.py's rates leave them out) and the valid-reply count of an evaluation; the checkpoint's
    fingerprint; an RL run's per-step metrics; a file of labels' hash (a DAgger relabelling)."""
    path = lambda f: os.path.join(folder, f)  # noqa: E731
    rec = {}
    if os.path.exists(path("summary.json")):
        rec["summary"] = json.load(open(path("summary.json")))
        if os.path.exists(path("trajectories.jsonl")):
            rec.update(episodes(path("trajectories.jsonl")))
    elif os.path.exists(path("trajectories.jsonl")):
        rec["data"] = sha256_of([path("trajectories.jsonl")])
    saved = os.listdir(path("checkpoint")) if os.path.isdir(path("checkpoint")) else []
    if any(f.endswith(".safetensors") for f in saved):
        rec["fingerprint"] = fingerprint(path("checkpoint"))
    if os.path.exists(path("metrics.jsonl")):
        rec["metrics"] = [rounded(json.loads(line)) for line in open(path("metrics.jsonl")) if line.strip()]
    return rec or None


def episodes(trajectories: str) -> dict:
    from sft import read_records, valid_replies

    kept = [e for e in read_records(trajectories) if not e.get("error")]
    outcomes = {m: {} for m in METRICS}
    for e in kept:
        for m in METRICS:
            outcomes[m].setdefault(e["task"], []).append(round(float(e.get(m, 0.0)), 6))
    return {"outcomes": outcomes, "valid": list(valid_replies(kept))}


def rounded(row: dict) -> dict:
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}


def fingerprint(checkpoint: str) -> str:
    """The sha256 of a checkpoint's weight files (its *.safetensors, in name order): the same
    weights, bit for bit, saved the same way, give the same fingerprint."""
    files = sorted(f for f in os.listdir(checkpoint) if f.endswith(".safetensors"))
    return sha256_of([os.path.join(checkpoint, f) for f in files])


def sha256_of(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def write_record(folder: str, name: str, argv: list[str], seconds: float | None) -> None:
    """Stage `name`'s record from its output folder, beside the row's other records."""
    rec = read_outputs(folder) or {}
    rec = {
        "stage": name,
        "command": "python " + " ".join(argv).replace(os.path.dirname(os.path.dirname(folder)), "<root>"),
        "revision": STUDY.revision,
        "cpu": cpu(),
        "seconds": seconds,  # a run resumed from its checkpoint (--resume): this stretch's part only
        "resumed": "--resume" in argv,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **rec,
    }
    os.makedirs(STUDY.records, exist_ok=True)
    with open(record_path(name), "w") as f:
        json.dump(rec, f, indent=0, sort_keys=False)
        f.write("\n")


def check_rebuild(folder: str, name: str) -> None:
    """A rebuilt stage gives what its record says (the same weights, the same outcomes, the same
    labels), or the row stops: its later stages were measured on what the record describes."""
    rec, now = load(record_path(name)), read_outputs(folder) or {}
    for key in ("fingerprint", "outcomes", "data"):
        if key in rec and rec[key] != now.get(key):
            raise SystemExit(
                f"{name} rebuilt at {STUDY.revision[:12]} on {cpu()} differs from its record "
                f"({key}; recorded at {rec['revision'][:12]} on {rec['cpu']}): the row's later stages "
                f"were measured on the recorded one. Rebuild on a machine like the record's, or start "
                f"the row again (a new --root and records folder)."
            )


def cpu() -> str:
    """The CPU's model name, its widest vector unit and its cores: what a result ran on."""
    info = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    name = re.search(r"model name\s*:\s*(.*)", info)
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split()) if "flags" in info else set()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{name.group(1).strip() if name else 'unknown CPU'} ({isa}, {os.cpu_count()} cores)"


# ---------------------------------------------------------------------------------------------
# The pinned revision


def pin(records: str, wanted: str | None, runs: str) -> tuple[str, str]:
    """The row's pinned revision (its row.json; a new row pins `wanted` or this checkout's HEAD)
    and a worktree of it under `runs`/worktrees/ where the stages run."""
    row_path = os.path.join(records, "row.json")
    row = json.load(open(row_path)) if os.path.exists(row_path) else None
    rev = git("rev-parse", f"{wanted or (row or {}).get('revision') or 'HEAD'}^{{commit}}")
    if row and row["revision"] != rev:
        raise SystemExit(f"{records}: the row is pinned at {row['revision'][:12]}, not {rev[:12]}")
    if not row:
        os.makedirs(records, exist_ok=True)
        json.dump({"revision": rev, "cpu": cpu()}, open(row_path, "w"), indent=1)
    tree = os.path.join(runs, "worktrees", rev[:12])
    if not os.path.exists(os.path.join(tree, ".git")):
        git("worktree", "add", "--detach", tree, rev)
    return rev, tree


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


# ---------------------------------------------------------------------------------------------
# The time budget


class OutOfBudget(Exception):
    pass


def kind(name: str) -> str:
    """A stage's kind, for its time estimate: val_sft2 -> val_sft, rl_s1 -> rl_s, self2_policy ->
    self_policy."""
    return re.sub(r"\d+", "", name)


def estimate(name: str) -> float:
    """Seconds stage `name` should take: its kind's mean wall time in this row's records, else
    DEFAULT_MINUTES. An RL seed counts with its validation (one unit)."""
    seen = {}
    for f in os.listdir(STUDY.records) if STUDY.records and os.path.isdir(STUDY.records) else []:
        rec = json.load(open(os.path.join(STUDY.records, f))) if f != "row.json" else {}
        if rec.get("seconds"):
            seen.setdefault(kind(rec["stage"]), []).append(rec["seconds"])
    guess = lambda k: statistics.mean(seen[k]) if k in seen else 60 * DEFAULT_MINUTES.get(k, 15)  # noqa: E731
    return guess(kind(name)) + (guess("val_rl_s") if kind(name) == "rl_s" else 0)


def fits(name: str) -> bool:
    """Whether stage `name` can start: its estimate ends before the deadline. Once one does not,
    the rest of the recipe only lists what remains (STUDY.dry)."""
    if not STUDY.dry and time.time() + estimate(name) > STUDY.deadline:
        STUDY.dry = True
    if STUDY.dry:
        STUDY.left.append((name, estimate(name)))
    return not STUDY.dry


def report() -> str:
    done = ", ".join(f"{n} ({s / 60:.0f} min)" for n, s in STUDY.finished) or "nothing"
    left = sum(s for n, s in STUDY.left if not n.startswith("val_rl_s"))  # (counted with their RL seed)
    rest = ", ".join(n for n, _ in STUDY.left) or "nothing"
    return f"finished in this stretch: {done}\nleft: {rest} (about {left / 3600:.1f} h at the records' pace)"


# ---------------------------------------------------------------------------------------------
# Errors that count the seeds


def seeds_aware_se(rl: list[dict], base: dict) -> float | None:
    """The standard error of the paired gain (RL's per-task figure averaged over its k seeds, minus
    the base's, averaged over the tasks) over a fresh draw of tasks, episodes and seeds:

        SE^2 = SE_tasks^2 + sigma_seeds^2 / k

    SE_tasks is the over-tasks error of the per-task differences (it holds the episode noise and the
    task draw); sigma_seeds^2, the spread between what seeds reach on the whole task set, is the
    variance of the per-seed gains less their episode noise (a two-way ANOVA's seed term: the
    per-seed gains' variance holds the residual mean square / tasks as well, which SE_tasks already
    counts: counting it twice inflated the error by 15% with no spread between seeds). A two-level
    bootstrap instead kept (k - 1) / k of the seeds' variance and counted the noise twice: 1.15x,
    0.85x, 0.81x the true SE at seed spreads 0, 0.6, 1.0 (tests/test_paper_table.py simulates it)."""
    import numpy as np

    tasks = sorted(set(base).intersection(*rl)) if rl else []
    if len(tasks) < 2:
        return None
    y = np.array([[seed[t] for t in tasks] for seed in rl])  # (k, n)
    b = np.array([base[t] for t in tasks])  # (n,)
    k, n = y.shape
    se_tasks2 = np.var(y.mean(0) - b, ddof=1) / n
    if k == 1:
        return float(math.sqrt(se_tasks2))
    resid = y - y.mean(0, keepdims=True) - y.mean(1, keepdims=True) + y.mean()
    ms_resid = (resid**2).sum() / ((k - 1) * (n - 1))
    seeds2 = max(0.0, np.var(y.mean(1), ddof=1) - ms_resid / n)
    return float(math.sqrt(se_tasks2 + seeds2 / k))
