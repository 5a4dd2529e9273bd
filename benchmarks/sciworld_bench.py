"""SciWorld server benchmark: reset and step latency, parallel JVM start-up, memory over episodes.

    python benchmarks/sciworld_bench.py [--instances 4] [--episodes 1000]

1. Step latency on the boil gold path (task 1-1, variation 0): ScienceWorld's Python `env.step()`
   (which also recomputes valid actions, look and inventory), the simulator's own step as
   servers/sciworld.py calls it, and a full HTTP round trip to the server.
2. Reset latency over HTTP (load + `look around`).
3. Wall time of N `/create`s sent at once (one JVM each) vs one alone.
4. RSS of the server process and of its JVMs over many short episodes (reset + 2 steps) on two
   reused instances.
"""

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import requests

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs import EnvServer  # noqa: E402
from servers.sciworld import GAMES, JVM_OPTIONS  # noqa: E402


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def ms(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"median {1000 * statistics.median(xs):6.1f} ms, p90 {1000 * xs[int(0.9 * len(xs))]:6.1f} ms"


def gold_path():
    from scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv()
    env.load("boil", 0, "", generateGoldPath=True)
    return env, env.get_gold_action_sequence()


def bench_direct(reps: int):
    """Both ways of stepping, in one JVM, on the same actions."""
    env, gold = gold_path()
    full, raw = [], []
    for _ in range(reps):
        env.load("boil", 0, "")
        env.step("look around")
        for action in gold[:30]:  # before the win, so that every step is a real one
            t = time.perf_counter()
            env.step(action)
            full.append(time.perf_counter() - t)
        env.load("boil", 0, "")
        env.server.step("look around")
        for action in gold[:30]:
            t = time.perf_counter()
            env.server.step(action)
            env.server.getScore(), env.server.getCompleted(), env.server.getNumMoves()
            raw.append(time.perf_counter() - t)
    env.close()
    n = len(full) // reps  # drop the first repetition: JIT warm-up
    print(f"ScienceWorld env.step()            {ms(full[n:])}")
    print(f"simulator step + score/done/moves  {ms(raw[n:])}   (what servers/sciworld.py does)")
    return gold


def bench_http(url: str, gold: list[str], reps: int):
    s = requests.Session()
    iid = s.post(url + "/create", json={}).json()["id"]
    resets, steps = [], []
    for _ in range(reps):
        t = time.perf_counter()
        s.post(url + "/reset", json={"id": iid, "data_idx": 0}).json()
        resets.append(time.perf_counter() - t)
        for action in gold[:30]:
            t = time.perf_counter()
            s.post(url + "/step", json={"id": iid, "action": action}).json()
            steps.append(time.perf_counter() - t)
    n = len(steps) // reps
    print(f"HTTP /step (boil)                  {ms(steps[n:])}")
    print(f"HTTP /reset (boil, warm JVM)       {ms(resets[1:])}")
    other = []
    for k in range(40):  # every task, warm JVM
        t = time.perf_counter()
        s.post(url + "/reset", json={"id": iid, "data_idx": (k * 977) % len(GAMES)}).json()
        other.append(time.perf_counter() - t)
    print(f"HTTP /reset (40 tasks spread)      {ms(other)}")
    s.post(url + "/close", json={"id": iid})


def bench_create(url: str, n: int):
    def create(_):
        return requests.post(url + "/create", json={}).json()["id"]

    t = time.perf_counter()
    one = create(0)
    t_one = time.perf_counter() - t
    requests.post(url + "/close", json={"id": one})
    t = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        ids = list(pool.map(create, range(n)))
    t_n = time.perf_counter() - t
    print(
        f"/create: one JVM {t_one:.2f} s; {n} in parallel {t_n:.2f} s "
        f"({n * t_one / t_n:.1f}x faster than one after another)"
    )
    for i in ids:
        requests.post(url + "/close", json={"id": i})


def bench_memory(server: EnvServer, episodes: int):
    url = server.url
    ids = [requests.post(url + "/create", json={}).json()["id"] for _ in range(2)]
    jvms = [requests.get(url + "/detail", params={"id": i}).json()["jvm_pid"] for i in ids]
    tasks = [i for i, (name, _, _) in enumerate(GAMES) if name == "lifespan-longest-lived"]

    def episodes_of(slot: int, lo: int, hi: int):
        s = requests.Session()
        for k in range(lo, hi):
            task = tasks[(2 * k + slot) % len(tasks)]
            s.post(url + "/reset", json={"id": ids[slot], "data_idx": task})
            s.post(url + "/step", json={"id": ids[slot], "action": "look around"})
            s.post(url + "/step", json={"id": ids[slot], "action": "go to outside"})

    options = os.environ.get("JAVA_TOOL_OPTIONS", JVM_OPTIONS)
    print(f"episodes  server RSS  JVM RSS (MB)   [JAVA_TOOL_OPTIONS={options}]")
    done, t0 = 0, time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        for mark in (0, 50, 100, 250, 500, 750, 1000, 1500, 2000):
            if mark > episodes:
                break
            list(pool.map(episodes_of, [0, 1], [done // 2] * 2, [mark // 2] * 2))
            done = mark
            print(f"{done:8d}  {rss_mb(server.proc.pid):10.0f}  {[round(rss_mb(p)) for p in jvms]}")
    print(f"{done} episodes in {time.perf_counter() - t0:.1f} s on 2 instances")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=4, help="JVMs created at once")
    p.add_argument("--episodes", type=int, default=1000, help="episodes for the memory curve")
    p.add_argument("--reps", type=int, default=5, help="repetitions of the 30-step boil path")
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    gold = bench_direct(args.reps)
    with EnvServer("servers.sciworld") as server:
        bench_http(server.url, gold, args.reps)
        bench_create(server.url, args.instances)
        bench_memory(server, args.episodes)


if __name__ == "__main__":
    main()
