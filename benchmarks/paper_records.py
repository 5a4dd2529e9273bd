"""A row of the paper's table as a chain of stages whose results live in the repository.

A row needs 4-6 hours of a 2-core machine, longer than one stretch of work, and `runs/` may be gone
when work resumes. What has to last between stretches is each stage's result, which is small, so
every stage that trains or evaluates leaves a record, `docs/paper-table/<env>/<stage>.json`, that
is committed: the command, the code revision it ran at, the recipe's revision (the paper_table.py
that wrote the command), the CPU and the wall time, the summary figures, every sample's outcome by
task id (an evaluation), the per-step metrics (an RL run) and a fingerprint of the checkpoint's
weights (a training stage). No path of the machine: the row's --root is `<root>` (`scrub`). A few
kilobytes a stage; trajectories and checkpoints stay in runs/. `paper_table.py --table` reads only
the records.

A recorded stage is not run again, and it is skipped only if it ran the command the recipe would
run now (`check_command`); an output folder the runner made carries a stamp of the same
(<folder>/stage.json), so a copied folder is recorded with the revision that made it. A lever's
folder takes its row's unchanged stages with `--reuse` (`reuse`), listed in its reused.json.

Checkpoints are never carried between stretches: a stage that needs one missing from runs/
rebuilds it with the recipe at the row's pinned revision (`docs/paper-table/<env>/row.json`), in a
git worktree of that commit, so that a later change to the model code does not change the
rebuild, and checks its fingerprint against the record: a mismatch stops the row. A rebuild
re-chooses nothing (the best imitation checkpoint and the self-training round are read from the
records).

`--budget MINUTES` runs the next stages that fit, estimated from the records' wall times (an RL
seed and its validation count as one unit), and prints what finished and what remains.

Also here: a paired gain's error that counts the seeds (`paired`, `seeds_aware_se`) and the t
quantile its bold mark is judged at (`bar`, `t_quantile`).
"""

import difflib
import functools
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = os.path.join(ROOT, "docs", "paper-table")  # <env>/<stage>.json and <env>/row.json
METRICS = ("success", "reward")  # an evaluation's per-sample outcomes kept by task
# a stage's minutes on the project's 2-core machine, by kind, before any record of its kind exists
# (BabyAI's and Deep Search's earlier rows: docs/studies/paper-table.md)
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
    reuse: tuple | None = None  # a lever's folder: (the row's records, the row's runs) it takes stages from
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


def write_record(
    folder: str, name: str, argv: list[str], seconds: float | None, made: dict | None = None
) -> None:
    """Stage `name`'s record from its output folder, beside the row's other records. `made`: where a
    stage found done came from (its output folder's stamp, `read_stamp`; {} without one): its
    revision, recipe and CPU are that stamp's, or "unknown", never this stretch's."""
    origin = {"revision": STUDY.revision, "recipe": recipe_revision(), "cpu": cpu()}
    if made is not None:
        origin = {key: made.get(key, "unknown") for key in origin}
    rec = {
        "stage": name,
        "command": command_of(argv, os.path.dirname(os.path.dirname(folder))),
        **origin,
        "seconds": seconds,  # a run resumed from its checkpoint (--resume): this stretch's part only
        "resumed": "--resume" in argv,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **scrub(read_outputs(folder) or {}, os.path.dirname(os.path.dirname(folder))),
    }
    os.makedirs(STUDY.records, exist_ok=True)
    with open(record_path(name), "w") as f:
        json.dump(rec, f, indent=0, sort_keys=False)
        f.write("\n")


def command_of(argv: list[str], root: str) -> str:
    """A stage's command as a record keeps it: `python <argv>`, with no path of this machine."""
    return scrub("python " + " ".join(argv), root)


# a path from the file system's root: a "/" that starts a string or follows a space, "=", "," or a quote
ABSOLUTE = re.compile(r"(?<![\w.~<>/:@+-])/[\w.+@-]+(?:/[\w.+@-]+)*")


def scrub(x, root: str):
    """`x` (a record or any part of it) with no path of this machine: the row's --root as <root>,
    this checkout's paths relative to it, any other absolute path as <abs>/<its last part>. Records
    are committed; the machine they ran on is their `cpu`."""
    if isinstance(x, dict):
        return {k: scrub(v, root) for k, v in x.items()}
    if isinstance(x, list):
        return [scrub(v, root) for v in x]
    if not isinstance(x, str):
        return x
    end = r"(?![\w.+@-])"  # a whole path component: runs/paper is not runs/paper_v
    x = re.sub(re.escape(root) + end, "<root>", x) if root else x
    x = re.sub(re.escape(ROOT) + "/", "", x)
    x = re.sub(re.escape(ROOT) + end, ".", x)
    return ABSOLUTE.sub(lambda m: "<abs>/" + os.path.basename(m.group()), x)


def same_run(command: str) -> list[str]:
    """A command's words, less `--resume <checkpoint>`: a resumed RL run continues the same run."""
    words = command.split()
    return [w for i, w in enumerate(words) if w != "--resume" and (i == 0 or words[i - 1] != "--resume")]


def check_command(name: str, argv: list[str], root: str, rec: dict, where: str) -> None:
    """A stage found done (its record, or its output folder's stamp, at `where`) is skipped only when
    it ran the command this recipe would run; else the row stops and says how they differ. A lever
    folder holding the recipe's rl_s0 record would otherwise run no RL and compare RL with itself."""
    then, now = same_run(rec["command"]), same_run(command_of(argv, root))
    if then == now:
        return
    short = lambda words: " ".join(w if len(w) < 60 else w[:57] + "..." for w in words) or "(nothing)"  # noqa: E731
    changes = difflib.SequenceMatcher(a=then, b=now, autojunk=False).get_opcodes()
    said = "; ".join(
        f"{short(then[i1:i2])} -> {short(now[j1:j2])}" for op, i1, i2, j1, j2 in changes if op != "equal"
    )
    made = f"revision {str(rec.get('revision'))[:12]}, recipe {str(rec.get('recipe', 'not recorded'))[:12]}"
    raise SystemExit(
        f"{name}: {where} ran another command than this recipe would (recorded -> now: {said}; "
        f"recorded at {made}). "
        f"A stage found done is not run again: run the recipe that made it, or give this one its own "
        f"--root and --records (a lever: --reuse takes only the stages whose commands are the same)."
    )


def stamp(folder: str, argv: list[str], revision: str) -> None:
    """What made a stage's output folder, left in it as <folder>/stage.json: its command, the revision
    it ran at, the recipe's revision and the CPU. It travels with a copy of the folder (cp -r), so a
    row that records the copy says where it came from, not where it was copied to."""
    if os.path.isdir(folder):
        root = os.path.dirname(os.path.dirname(folder))
        made = {
            "command": command_of(argv, root),
            "revision": revision,
            "recipe": recipe_revision(),
            "cpu": cpu(),
        }
        json.dump(made, open(os.path.join(folder, "stage.json"), "w"), indent=1)


def read_stamp(folder: str) -> dict | None:
    path = os.path.join(folder, "stage.json")
    return json.load(open(path)) if os.path.exists(path) else None


def reuse(name: str, argv: list[str], folder: str, reads: list[str]) -> bool:
    """A lever's folder (--reuse): stage `name` taken from the row it varies when the row's record ran
    the very command this folder would run and every stage it `reads` was taken too (the lever's
    val_rl_s0 has the row's command, but reads the lever's own RL). The record is copied unchanged
    (its revision, recipe, CPU and time are the row's), its output folder too when the row's runs/
    still has it (else a later stage that reads it rebuilds it), and <records>/reused.json lists the
    stage with the record it came from and that record's revision. Any other stage runs here."""
    records, runs = STUDY.reuse
    source, listed_path = os.path.join(records, f"{name}.json"), os.path.join(STUDY.records, "reused.json")
    listed = json.load(open(listed_path)) if os.path.exists(listed_path) else {}
    if not os.path.exists(source) or any(n not in listed for n in reads):
        return False
    rec = json.load(open(source))
    if same_run(rec["command"]) != same_run(command_of(argv, os.path.dirname(os.path.dirname(folder)))):
        return False
    os.makedirs(STUDY.records, exist_ok=True)
    shutil.copyfile(source, record_path(name))
    if os.path.isdir(os.path.join(runs, name)) and not os.path.exists(folder):
        shutil.copytree(os.path.join(runs, name), folder, symlinks=True)
    listed[name] = {"from": scrub(os.path.abspath(source), ""), "revision": rec["revision"]}
    json.dump(listed, open(listed_path, "w"), indent=1)
    return True


def check_rebuild(folder: str, name: str) -> None:
    """A rebuilt stage gives what its record says (the same weights, the same outcomes, the same
    labels), or the row stops: its later stages were measured on what the record describes."""
    rec, now = load(record_path(name)), read_outputs(folder) or {}
    for key in ("fingerprint", "outcomes", "data"):
        if key in rec and rec[key] != now.get(key):
            raise SystemExit(
                f"{name} rebuilt at {STUDY.revision[:12]} on {cpu()} differs from its record "
                f"({key}; recorded at {str(rec['revision'])[:12]} on {rec['cpu']}): the row's later stages "
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
    and a worktree of it under `runs`/worktrees/ where the stages run. The pin covers the code the
    commands run, not the commands: those come from this checkout's paper_table.py, whose revision
    every record keeps as its `recipe` (`recipe_revision`)."""
    row_path = os.path.join(records, "row.json")
    row = json.load(open(row_path)) if os.path.exists(row_path) else None
    rev = git("rev-parse", f"{wanted or (row or {}).get('revision') or 'HEAD'}^{{commit}}")
    if row and row["revision"] != rev:
        raise SystemExit(f"{records}: the row is pinned at {row['revision'][:12]}, not {rev[:12]}")
    if not row:
        os.makedirs(records, exist_ok=True)
        json.dump({"revision": rev, "cpu": cpu()}, open(row_path, "w"), indent=1)
    return rev, worktree(rev, runs)


def worktree(rev: str, runs: str = os.path.join(ROOT, "runs")) -> str:
    """A git worktree of revision `rev` under `runs`/worktrees/, made once."""
    tree = os.path.join(runs, "worktrees", rev[:12])
    if not os.path.exists(os.path.join(tree, ".git")):
        git("worktree", "add", "--detach", tree, rev)
    return tree


def code_for(name: str) -> tuple[str, str]:
    """(revision, worktree) where stage `name` is rebuilt: its record's revision (a stage a lever
    reused from its row keeps the row's), which is the row's pin unless the record says otherwise."""
    path = record_path(name)
    rev = json.load(open(path)).get("revision", "") if path and os.path.exists(path) else ""
    if not rev or rev == "unknown" or rev == STUDY.revision:
        return STUDY.revision, STUDY.cwd
    return rev, worktree(rev)


@functools.lru_cache(maxsize=1)
def recipe_revision() -> str:
    """The revision of the paper_table.py that wrote the stages' commands: this checkout's HEAD,
    with "+changes" when the files that make a command (paper_table.py, paper_records.py,
    envs/tasks.py) differ from it; "unknown" outside a git checkout."""
    try:
        head = git("rev-parse", "HEAD")
        files = ("benchmarks/paper_table.py", "benchmarks/paper_records.py", "envs/tasks.py")
        changed = git("status", "--porcelain", "--", *files)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if changed else "")


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
# Errors that count the seeds, and the bar a gain is marked at


@dataclass
class Paired:
    """One arm minus another, paired over the tasks both have (each arm's per-task figure averaged
    over its runs): the mean difference, its seeds-aware standard error, and `bar`, the t quantile
    it is judged at (bold when |mean| > bar * se)."""

    mean: float
    se: float  # SE^2 = SE_tasks^2 + sum over the arms of sigma_seeds^2 / k
    se_tasks: float  # the over-tasks part alone: how sure we are about these seeds' runs
    bar: float  # t quantile (0.975) for this error's degrees of freedom (`bar`)
    tasks: int


def seed_term(y) -> float:
    """sigma_seeds^2 / k for one arm's per-task figures y, (k seeds, n tasks): the spread between
    what its seeds reach on the whole task set, less their episode noise (a two-way ANOVA's seed
    term, (MS_seeds - MS_resid) / n, never negative: the per-seed means' variance holds the residual
    mean square / n as well, which SE_tasks already counts). One run: 0 (its spread is not known)."""
    import numpy as np

    k, n = y.shape
    if k == 1:
        return 0.0
    resid = y - y.mean(0, keepdims=True) - y.mean(1, keepdims=True) + y.mean()  # (k, n)
    ms_resid = (resid**2).sum() / ((k - 1) * (n - 1))
    return max(0.0, float(np.var(y.mean(1), ddof=1)) - ms_resid / n) / k


def paired_arrays(a, b) -> Paired:
    """`paired` on arrays: a (k_a seeds, n tasks) minus b (k_b runs, n tasks), tasks in the same order.

        SE^2 = SE_tasks^2 + s_a + s_b,   s = sigma_seeds^2 / k of each arm (`seed_term`)

    SE_tasks^2 = var_tasks(a_t - b_t) / n holds the episode noise and the task draw; the seed terms
    hold what a fresh set of seeds would move. The bar is a t quantile (`bar`)."""
    import numpy as np

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diffs = a.mean(0) - b.mean(0)  # (n,)
    n = diffs.size
    se_tasks2 = float(np.var(diffs, ddof=1)) / n
    seeds = [(seed_term(y), y.shape[0] - 1) for y in (a, b) if y.shape[0] > 1]
    se2 = se_tasks2 + sum(s for s, _ in seeds)
    return Paired(float(diffs.mean()), math.sqrt(se2), math.sqrt(se_tasks2), bar(se_tasks2, n - 1, seeds), n)


def bar(tasks2: float, tasks_dof: int, seeds: list[tuple[float, int]]) -> float:
    """The t quantile a paired gain is judged at (bold when |gain| > bar * SE). Each part of SE^2
    gets its own quantile, and the bar in points is their root sum of squares:

        (bar * SE)^2 = SE_tasks^2 * t(n - 1)^2 + (s_a + s_b) * t(nu)^2,   t(f) = t_{0.975, f}

    nu is Welch-Satterthwaite's over the arms' seed terms s = sigma_seeds^2 / k, (sum s)^2 /
    sum(s^2 / (k - 1)): 2 for one arm of 3 seeds (t = 4.30), up to 4 for two. With no seed spread the
    bar is t(n - 1), about 2; where the seeds' spread is all of SE^2 it is t(nu). Satterthwaite's nu
    over all three parts at once fired up to 10% of the time under the null with 3 seeds (its nu
    grows just when the seed term is underestimated); this bar held 3-6% (tests/test_paper_table.py
    simulates both; docs/studies/paper-table.md, "How the marks are computed")."""
    spread = sum(s for s, _ in seeds)
    if spread == 0:
        return t_quantile(0.975, tasks_dof)
    nu = spread**2 / sum(s**2 / dof for s, dof in seeds if s > 0)
    both = tasks2 * t_quantile(0.975, tasks_dof) ** 2 + spread * t_quantile(0.975, nu) ** 2
    return math.sqrt(both / (tasks2 + spread))


def paired(a: list[dict], b: list[dict]) -> Paired | None:
    """Arm a's runs (task -> figure, one dict a seed) minus arm b's, paired over the tasks all of them
    have; None with fewer than 2 such tasks. An arm of one run (a fixed checkpoint) adds no seed term:
    RL against the best imitation checkpoint counts RL's seeds; a lever against the recipe's RL,
    both arms' (`paired_arrays`)."""
    tasks = sorted(set.intersection(*(set(run) for run in a + b))) if a and b else []
    if len(tasks) < 2:
        return None
    return paired_arrays([[run[t] for t in tasks] for run in a], [[run[t] for t in tasks] for run in b])


def seeds_aware_se(rl: list[dict], base: dict) -> float | None:
    """The standard error of the paired gain (RL's per-task figure averaged over its k seeds, minus
    the base's, averaged over the tasks) over a fresh draw of tasks, episodes and seeds:

        SE^2 = SE_tasks^2 + sigma_seeds^2 / k

    (`paired` with the base as one run). A two-level bootstrap instead kept (k - 1) / k of the seeds'
    variance and counted the noise twice: 1.15x, 0.85x, 0.81x the true SE at seed spreads 0, 0.6, 1.0
    (tests/test_paper_table.py simulates it)."""
    gain = paired(rl, [base])
    return gain.se if gain else None


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, dof: float) -> float:
    """Student's t quantile, t_{p, dof} (dof may be fractional): t_{0.975, 2} = 4.303,
    t_{0.975, 4} = 2.776, t_{0.975, 30} = 2.042. Newton's method on `t_cdf` from the normal
    quantile, which lies between 0 and the root (t's tails are heavier); above 0 the CDF is concave,
    so every step stays below the root and the steps shrink to it."""
    if p < 0.5:
        return -t_quantile(1 - p, dof)
    t = statistics.NormalDist().inv_cdf(p)
    for _ in range(200):
        step = (p - t_cdf(t, dof)) / t_pdf(t, dof)
        t += step
        if step < 1e-10 * max(1.0, t):
            return t
    raise ArithmeticError(f"t_quantile({p}, {dof}) did not converge")


def t_pdf(t: float, dof: float) -> float:
    """Student's t density."""
    log_norm = math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    return math.exp(log_norm - (dof + 1) / 2 * math.log1p(t * t / dof))


def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom: 1 - I_x(dof/2, 1/2) / 2 with
    x = dof / (dof + t^2), for t >= 0 (symmetric below)."""
    tail = betainc(dof / 2, 0.5, dof / (dof + t * t)) / 2
    return 1 - tail if t >= 0 else tail


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz's
    method; Numerical Recipes 6.4), which converges fast for x < (a + 1) / (a + b + 2); beyond it,
    I_x(a, b) = 1 - I_{1-x}(b, a)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1 - betainc(b, a, 1 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(1000):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:  # d_{2m}
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:  # d_{2m+1}
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1 + num * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1 - c * d) < 1e-14:
            return math.exp(log_front) * (f - 1) / a
    raise ArithmeticError(f"betainc({a}, {b}, {x}) did not converge")
