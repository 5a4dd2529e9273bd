"""Environment time per turn for a batch of BabyAI instances: in-process, over HTTP with one
`/step_batch` round trip per turn, and over HTTP with one request per instance (AgentGym's way).

    python benchmarks/env_batch_bench.py                      # 64 instances, 20 turns, 3 rounds
    python benchmarks/env_batch_bench.py --instances 16 --turns 10

Each way plays the same episodes (the test split's first N tasks, the same action script, an
instance reset when its episode ends) and the ways are interleaved round by round, so that load
from other processes falls on all of them alike; printed are the median milliseconds per turn of
the whole batch (resets excluded) and the ratios to in-process. On a shared machine read the ratios.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs import ENVS, EnvPool, EnvServer  # noqa: E402
from servers.babyai import BabyAIText  # noqa: E402

SCRIPT = ["turn left", "move forward", "move forward", "turn right", "move forward", "pickup red ball 1"]


def in_process(envs, tasks, turns) -> float:
    for e, t in zip(envs, tasks):
        e.reset(t)
    spent = 0.0
    for k in range(turns):
        t0 = time.perf_counter()
        answers = [e.step(SCRIPT[k % len(SCRIPT)]) for e in envs]
        spent += time.perf_counter() - t0
        for e, t, a in zip(envs, tasks, answers):
            if a["done"]:
                e.reset(t)
    return spent / turns


def over_http(pool, tasks, turns) -> float:
    slots = list(range(len(tasks)))
    pool.reset(slots, tasks)
    spent = 0.0
    for k in range(turns):
        t0 = time.perf_counter()
        answers = pool.step(slots, [SCRIPT[k % len(SCRIPT)]] * len(slots))
        spent += time.perf_counter() - t0
        assert not any("error" in a for a in answers), answers[0]
        ended = [s for s, a in zip(slots, answers) if a["done"]]
        if ended:
            pool.reset(ended, [tasks[s] for s in ended])
    return spent / turns


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--instances", type=int, default=64)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    tasks = ENVS["babyai"].splits["test"][: args.instances]
    envs = [BabyAIText() for _ in tasks]
    with EnvServer("servers.babyai") as server:
        pools = {
            "HTTP, one /step_batch per turn": EnvPool(
                url=server.url, size=len(tasks), spec=ENVS["babyai"], batched=True
            ),
            "HTTP, one request per instance": EnvPool(
                url=server.url, size=len(tasks), spec=ENVS["babyai"], batched=False
            ),
        }
        ways = {"in-process": lambda: in_process(envs, tasks, args.turns)}
        ways.update({name: (lambda p=pool: over_http(p, tasks, args.turns)) for name, pool in pools.items()})
        for way in ways.values():  # warm up: instances created, first levels generated
            way()
        ms = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, way in ways.items():
                ms[name].append(1000 * way())
        for pool in pools.values():
            pool.close()
    base = statistics.median(ms["in-process"])
    print(
        f"\n{args.instances} BabyAI instances, {args.turns} turns x {args.rounds} interleaved rounds: "
        "ms per turn of the whole batch (median over rounds)"
    )
    for name, v in ms.items():
        med = statistics.median(v)
        print(
            f"  {name:32s} {med:8.2f} ms   {med / base:5.2f}x in-process   "
            f"(rounds: {' '.join(f'{x:.1f}' for x in v)})"
        )


if __name__ == "__main__":
    main()
