"""WebArena server speed and browser memory (issue: reset and step latency, and the browser's memory
with 1, 4 and 8 instances; flat memory over a long run).

Each episode is the offline task 15 ("Add the Copper Kettle to my cart") played by its scripted
solution: reset, click Kitchen, click Copper Kettle, click Add to Cart, stop (which runs the
program_html evaluator and so loads one more page). With N instances, N episodes run at once, one
per thread, as `EnvPool` drives them. Prints the median and 90th-percentile latency of reset, of a
click step and of the stop step, and the memory of the browser (PSS and RSS summed over Playwright's
driver and every Chromium process, from the server's GET /browser). The long run plays
`--long-episodes` episodes on 4 instances and prints the memory every `--block` episodes.

    python benchmarks/webarena_bench.py
    python benchmarks/webarena_bench.py --sizes 1 4 8 --rounds 5 --long-episodes 400
"""

import argparse
import os
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import requests  # noqa: E402

from envs import EnvServer  # noqa: E402

SOLUTION = [("link", "Kitchen"), ("link", "Copper Kettle"), ("button", "Add to Cart")]


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000


def episode(url: str, session: requests.Session, iid: int, times: dict) -> float:
    t = time.perf_counter()
    out = session.post(url + "/reset", json={"id": iid, "data_idx": 15}).json()
    times["reset"].append(time.perf_counter() - t)
    for role, name in SOLUTION:
        bid = re.search(rf"\[(\d+)\] {role} '{name}'", out["observation"]).group(1)
        t = time.perf_counter()
        out = session.post(url + "/step", json={"id": iid, "action": f"```click [{bid}]```"}).json()
        times["click"].append(time.perf_counter() - t)
    t = time.perf_counter()
    out = session.post(url + "/step", json={"id": iid, "action": "```stop []```"}).json()
    times["stop"].append(time.perf_counter() - t)
    return out["reward"]


def run(url: str, n: int, episodes_each: int, times: dict) -> list[float]:
    sessions = [requests.Session() for _ in range(n)]
    ids = [s.post(url + "/create", json={}).json()["id"] for s in sessions]
    with ThreadPoolExecutor(n) as ex:
        rewards = list(
            ex.map(
                lambda k: [episode(url, sessions[k], ids[k], times) for _ in range(episodes_each)], range(n)
            )
        )
    return [r for rs in rewards for r in rs], ids, sessions


def memory(url: str) -> str:
    m = requests.get(url + "/browser").json()
    return f"browser PSS {m['pss_mb']:7.1f} MB  RSS {m['rss_mb']:7.1f} MB  ({len(m['pids'])} processes)"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 8], help="concurrent instances")
    p.add_argument("--rounds", type=int, default=3, help="episodes per instance at each size")
    p.add_argument("--long-episodes", type=int, default=200)
    p.add_argument("--block", type=int, default=40)
    args = p.parse_args()

    server = EnvServer("servers.webarena").start()
    url = server.url
    try:
        print(f"started: {memory(url)}")
        for n in args.sizes:
            times = {"reset": [], "click": [], "stop": []}
            rewards, ids, sessions = run(url, n, args.rounds, times)
            lat = "  ".join(f"{k} {pct(v, 0.5):5.0f}/{pct(v, 0.9):5.0f} ms" for k, v in times.items())
            print(
                f"{n} instance(s): {lat} (median/p90)  success {statistics.mean(rewards):.2f}  {memory(url)}"
            )
            for s, i in zip(sessions, ids):
                s.post(url + "/close", json={"id": i})
        print(f"after closing all: {memory(url)}")
        done, t0 = 0, time.time()
        sessions = [requests.Session() for _ in range(4)]
        ids = [s.post(url + "/create", json={}).json()["id"] for s in sessions]
        while done < args.long_episodes:
            times = {"reset": [], "click": [], "stop": []}
            with ThreadPoolExecutor(4) as ex:
                list(
                    ex.map(
                        lambda k, times=times: [
                            episode(url, sessions[k], ids[k], times) for _ in range(args.block // 4)
                        ],
                        range(4),
                    )
                )
            done += args.block // 4 * 4
            print(
                f"long run, {done:5d} episodes ({time.time() - t0:5.0f} s): reset "
                f"{pct(times['reset'], 0.5):4.0f} ms"
                f"  click {pct(times['click'], 0.5):4.0f} ms  {memory(url)}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
