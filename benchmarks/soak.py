"""Soak test: thousands of episodes per server with random and hostile actions mixed in.

Each server is started as the trainer starts it (`envs.EnvServer`); `--parallel` clients each own
one instance and play episodes: reset on a random task of the train split, then up to `--turns`
steps, each one an available action (when the server lists them), a random string, or, with
probability `--hostile`, a hostile request (odd Unicode, a huge action, a lone surrogate, NaN,
a wrong type, a bad id, a malformed body, a step on a closed instance). After the hostile one the
episode goes on. Every 5xx answer or failed request is printed as it happens; at the end of the
first and the last quarter of the episodes the RSS of the server and its child processes (JVMs,
Chromium) is printed, and a summary line per server.

    python benchmarks/soak.py --servers babyai,textcraft --episodes 5000
    python benchmarks/soak.py --servers sciworld --episodes 1000 --parallel 4
"""

import argparse
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import requests  # noqa: E402
from tqdm import tqdm  # noqa: E402

from envs import ENVS, EnvServer, _descendants  # noqa: E402

FALLBACK = {
    "babyai": "turn left",
    "textcraft": "inventory",
    "searchqa": "<search>river</search>",
    "sciworld": "look around",
    "webarena": "```scroll [down]```",
}


def rss_mb(pid: int) -> float:
    """RSS of `pid` and every process below it, in MB."""
    total = 0
    for p in [pid] + _descendants(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def hostile(url: str, iid: int, rng: random.Random) -> requests.Response:
    """One hostile request on instance `iid` (the instance stays usable)."""
    post = lambda path, data: requests.post(
        url + path,
        data=data,
        timeout=60,  # noqa: E731
        headers={"Content-Type": "application/json"},
    )
    kind = rng.randrange(9)
    if kind == 0:
        return post("/step", f'{{"id": {iid}, "action": "\\ud800"}}')
    if kind == 1:
        return post("/reset", f'{{"id": {iid}, "data_idx": NaN}}')
    if kind == 2:
        return post("/step", '{"id": true, "action": "x"}')
    if kind == 3:
        return post("/step", b"[" * 20_000 + b"]" * 20_000)
    if kind == 4:
        return requests.post(
            url + "/step", json={"id": iid, "action": "a" * rng.choice([1_000, 99_000, 200_000])}, timeout=60
        )
    if kind == 5:
        odd = "".join(
            chr(rng.choice([0, 0x202E, 0x200B, 0x1F600, 0xFFFF, 10, 13, 92, 34])) for _ in range(50)
        )
        return requests.post(url + "/step", json={"id": iid, "action": odd}, timeout=60)
    if kind == 6:
        return requests.post(
            url + "/step", json={"id": 10**6 + rng.randrange(1000), "action": "x"}, timeout=60
        )
    if kind == 7:
        return requests.post(url + "/create", json={"no_such_key": 1}, timeout=60)
    return requests.get(url + "/observation", params={"id": "abc"}, timeout=60)


def create(http, url: str) -> int:
    out = http.post(url + "/create", json={}, timeout=120).json()
    return out if isinstance(out, int) else out["id"]  # Deep Search answers a bare int


def soak(env: str, episodes: int, turns: int, parallel: int, p_hostile: float, seed: int) -> dict:
    server = EnvServer(ENVS[env].module).start()
    url, tasks = server.url, ENVS[env].splits["train"]
    errors, counts = [], {"steps": 0, "hostile": 0, "4xx": 0}
    rss = {}
    done, lock = [0], threading.Lock()
    bar = tqdm(total=episodes, desc=env, leave=False)

    def note(what: str):
        errors.append(what)
        tqdm.write(f"  [{env}] ERROR {what}")

    def client(k: int):
        rng, http = random.Random(seed * 1000 + k), requests.Session()
        iid = create(http, url)
        while True:
            with lock:
                if done[0] >= episodes:
                    break
                done[0] += 1
                n = done[0]
            try:
                r = http.post(url + "/reset", json={"id": iid, "data_idx": rng.choice(tasks)}, timeout=120)
                if r.status_code >= 500:
                    note(f"reset -> {r.status_code} {r.text[:200]}")
                    iid = create(http, url)
                    continue
                out = r.json()
                for _ in range(turns):
                    if rng.random() < p_hostile:
                        counts["hostile"] += 1
                        h = hostile(url, iid, rng)
                        if h.status_code >= 500:
                            note(f"hostile -> {h.status_code} {h.text[:200]}")
                        counts["4xx"] += 400 <= h.status_code < 500
                        continue
                    acts = out.get("available_actions") or [FALLBACK[env]]
                    action = (
                        rng.choice(acts)
                        if rng.random() < 0.8
                        else "".join(
                            rng.choice("abcdefgh ijk[]`<>/0123456789") for _ in range(rng.randrange(1, 60))
                        )
                    )
                    r = http.post(url + "/step", json={"id": iid, "action": action}, timeout=120)
                    counts["steps"] += 1
                    if r.status_code != 200:
                        note(f"step {action[:60]!r} -> {r.status_code} {r.text[:200]}")
                        break
                    out = r.json()
                    if out["done"]:
                        break
            except requests.RequestException as e:
                note(f"request failed: {type(e).__name__}: {e}")
            if n in (episodes // 4, episodes - episodes // 4):
                rss["first quarter" if n == episodes // 4 else "last quarter"] = rss_mb(server.proc.pid)
                tqdm.write(f"  [{env}] after {n} episodes: server RSS {rss_mb(server.proc.pid):.1f} MB")
            bar.update(1)
        http.post(url + "/close", json={"id": iid}, timeout=60)

    start = time.time()
    try:
        with ThreadPoolExecutor(parallel) as ex:
            list(ex.map(client, range(parallel)))
        rss["end"] = rss_mb(server.proc.pid)
    finally:
        bar.close()
        server.stop()
    return {
        "env": env,
        "episodes": episodes,
        "seconds": time.time() - start,
        "errors": len(errors),
        **counts,
        **{f"rss_{k.replace(' ', '_')}_mb": round(v, 1) for k, v in rss.items()},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", default="babyai,textcraft,searchqa,sciworld,webarena")
    p.add_argument("--episodes", type=int, default=2000, help="episodes per server")
    p.add_argument("--turns", type=int, default=10, help="most steps per episode")
    p.add_argument("--parallel", type=int, default=4, help="clients (instances) per server")
    p.add_argument("--hostile", type=float, default=0.2, help="probability that a step is a hostile request")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for env in args.servers.split(","):
        s = soak(env, args.episodes, args.turns, args.parallel, args.hostile, args.seed)
        print(
            f"{env}: {s['episodes']} episodes in {s['seconds']:.0f} s, {s['steps']} steps, "
            f"{s['hostile']} hostile "
            f"requests ({s['4xx']} answered 4xx), errors {s['errors']}; RSS first quarter "
            f"{s.get('rss_first_quarter_mb')} MB, last quarter {s.get('rss_last_quarter_mb')} MB, "
            f"end {s.get('rss_end_mb')} MB"
        )


if __name__ == "__main__":
    main()
