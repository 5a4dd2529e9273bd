"""Rollout episodes per second with 1 and with N processes (`accelerate launch`, machinery/dist.py).

    python benchmarks/multiprocess_rollout.py                    # 1 and 2 processes, the tiny policy
    python benchmarks/multiprocess_rollout.py --processes 1,2,4 --episodes 128 --horizon 5

Each configuration runs in fresh processes started by `accelerate launch --multi_gpu
--num_processes N` (gloo on a CPU machine): every process loads the policy, starts its own
BabyAI server, rolls out a warm-up batch, then, between two barriers, its share of the same
`--episodes` episodes (tasks from the train split, as train.py shards a step). Printed: wall
seconds of the timed part (the slowest process) and episodes per second over all processes.
On a CPU every process also drives its own server, so N processes want about 2N cores.
"""

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def worker(episodes: int, horizon: int) -> None:
    import torch

    import tiny
    from agent import rollout
    from envs import ENVS, close_pool, open_pool
    from machinery import dist

    dist.start(cpu=True)
    torch.set_num_threads(1)
    torch.manual_seed(dist.process_seed(0))
    spec = ENVS["babyai"]
    tasks = dist.shard(spec.splits["train"][:episodes])
    policy = tiny.load("tiny", "babyai")
    pool = open_pool("babyai", size=len(tasks))
    try:
        rollout(policy, pool, spec, tasks[:8], horizon)  # warm-up: imports, server, first generate
        dist.barrier()
        t0 = time.time()
        rollout(policy, pool, spec, tasks, horizon)
        dist.barrier()
        wall = time.time() - t0
    finally:
        close_pool(pool)
    if dist.is_main():
        print(
            f"RESULT processes={dist.world()} episodes={episodes} seconds={wall:.2f} "
            f"episodes_per_s={episodes / wall:.2f}",
            flush=True,
        )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--processes", default="1,2", help="comma-separated process counts")
    p.add_argument(
        "--episodes", type=int, default=64, help="episodes per configuration (all processes together)"
    )
    p.add_argument("--horizon", type=int, default=5)
    p.add_argument(
        "--repeats", type=int, default=2, help="runs per configuration (the machine may be shared)"
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a.episodes, a.horizon)
    from envs import free_port

    print(f"| processes | episodes | seconds | episodes/s |  (os.cpu_count() = {os.cpu_count()})")
    print("|---|---|---|---|")
    for n in [int(x) for x in a.processes.split(",")]:
        for _ in range(a.repeats):
            cmd = (
                [
                    sys.executable,
                    "-m",
                    "accelerate.commands.launch",
                    "--num_processes",
                    str(n),
                    "--num_machines",
                    "1",
                    "--mixed_precision",
                    "no",
                    "--dynamo_backend",
                    "no",
                    "--main_process_port",
                    str(free_port()),
                ]
                + (["--multi_gpu"] if n > 1 else ["--cpu"])
                + [
                    os.path.abspath(__file__),
                    "--worker",
                    "--episodes",
                    str(a.episodes),
                    "--horizon",
                    str(a.horizon),
                ]
            )
            out = subprocess.run(
                cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
            )
            line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
            if line is None:
                print(out.stdout[-2000:], out.stderr[-2000:])
                raise SystemExit(f"{n} processes: no result")
            r = dict(kv.split("=") for kv in line.split()[1:])
            print(f"| {n} | {r['episodes']} | {r['seconds']} | {r['episodes_per_s']} |", flush=True)


if __name__ == "__main__":
    main()
