"""One train.py command on two or more checkouts (or with extra flags), interleaved: the ratio of
seconds per step, and the peak memory, measured in one run.

    git worktree add /tmp/base <commit before>
    python benchmarks/side_by_side.py \
        --arms "before=/tmp/base;after=.;after+bf16=.:--generation-dtype bfloat16 \
        --mixed-precision bf16" --rounds 1 -- --model smollm2 --steps 1 ...   # train.py's flags after --

Each arm is NAME=CHECKOUT[:EXTRA FLAGS]; each round runs every arm once, in order, with the same
flags (and so the same seed), each in its own process and output folder. Printed per run: the
seconds per step train.py logged (charts/seconds_per_step), generation and update tokens/s, the
peak RSS, and the load average before and after; then each arm's median seconds per step and its
ratio to the first arm's. On a shared machine the load moves: read the ratios of runs that ran
next to each other.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(checkout: str, script: str, flags: list[str], out: str, log: str) -> list[dict]:
    cmd = [sys.executable, script, *flags, "--out", out]
    with open(log, "w") as f:
        subprocess.run(cmd, cwd=checkout, check=True, stdout=f, stderr=subprocess.DEVNULL)
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arms", required=True, help="NAME=CHECKOUT[:FLAGS];... (the first is the baseline)")
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds")
    p.add_argument(
        "--script",
        default="train.py",
        help="what each arm runs (benchmarks/rollout_profile.py: "
        "train.py with its profile table, which each arm's log then holds)",
    )
    p.add_argument("--logs", default="side_by_side_logs", help="folder for each run's output")
    p.add_argument("flags", nargs=argparse.REMAINDER, help="-- then train.py's flags")
    a = p.parse_args()
    flags = a.flags[1:] if a.flags[:1] == ["--"] else a.flags
    arms = []
    for spec in a.arms.split(";"):
        name, rest = spec.split("=", 1)
        checkout, _, extra = rest.partition(":")
        arms.append((name, os.path.abspath(checkout), extra.split()))
    secs: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    for r in range(a.rounds):
        for name, checkout, extra in arms:
            load0 = os.getloadavg()[0]
            os.makedirs(a.logs, exist_ok=True)
            with tempfile.TemporaryDirectory() as out:
                log = os.path.abspath(f"{a.logs}/{name}_{r}.txt")
                rows = run(checkout, a.script, flags + extra, out, log)
            for m in rows:
                secs[name].append(m["charts/seconds_per_step"])
                print(
                    f"round {r} {name:12s} step {m['step']}: {m['charts/seconds_per_step']:7.1f} s/step, "
                    f"generation {m['charts/tokens_per_s']:6.1f} tokens/s, update "
                    f"{m['perf/update_tokens_per_s']:6.1f} tokens/s, "
                    f"peak {m['perf/peak_memory_gb']:.2f} GB, "
                    f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    base = statistics.median(secs[arms[0][0]])
    print()
    for name, _, _ in arms:
        s = statistics.median(secs[name])
        print(f"{name:12s} median {s:7.1f} s/step  {base / s:.2f}x the {arms[0][0]}")


if __name__ == "__main__":
    main()
