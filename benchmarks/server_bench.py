"""Our environment servers against AgentGym's own, side by side on loopback: steps per second, p99
latency and server CPU per step, at 1 and 16 concurrent clients.

    python benchmarks/server_bench.py --agentgym /tmp/agentgym           # BabyAI and TextCraft
    python benchmarks/server_bench.py --agentgym /tmp/agentgym --envs babyai --clients 1,16,32

`--agentgym` is a folder holding AgentGym's server packages `agentenv-babyai/` and
`agentenv-textcraft/` as in github.com/WooooDyy/AgentGym (never part of this project; their
BabyAI needs the old `gym` package, e.g. `pip install --target <folder>/deps gym==0.26.2
cloudpickle gym_notices`, found through `<folder>/deps`). Without it the benchmark says so and
skips. AgentGym's servers are started as their `launch()` does (`uvicorn.run(app)`, its default
logging), ours as `python -m servers.<env>`; the same uvicorn, so both get uvloop and httptools
when installed.

Each client is a thread with its own keep-alive connection (http.client, cheap on the client's
side): it creates an instance, resets it, then steps it with a fixed valid action (BabyAI `turn
left`, TextCraft `inventory`), resetting every RESET_EVERY steps. Steps per second counts steps
over the whole wall time (resets included, alike for both); latency percentiles are of the steps;
server CPU is the server process's user + system time over the trial, per step. Trials of both
servers are interleaved round by round; printed are medians over rounds and our/their ratios.
On a shared machine read the ratios.
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from envs import free_port  # noqa: E402

RESET_EVERY = 30
ENVS = {  # env -> (our module, AgentGym package folder, its module, action, data_idx)
    "babyai": ("servers.babyai", "agentenv-babyai", "agentenv_babyai", "turn left", 1),
    "textcraft": ("servers.textcraft", "agentenv-textcraft", "agentenv_textcraft", "inventory", 0),
}


def start(cmd: list[str], cwd: str, port: int, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/")
            c.getresponse().read()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd} exited with {proc.returncode}") from None
            time.sleep(0.3)
    proc.kill()
    raise TimeoutError(f"{cmd} did not answer on port {port}")


def post(conn: http.client.HTTPConnection, path: str, body: dict):
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{path} -> {r.status}: {data[:200]!r}")
    return json.loads(data)


def client(port: int, action: str, data_idx: int, until: float, lat: list, counts: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    iid = post(conn, "/create", {})["id"]
    post(conn, "/reset", {"id": iid, "data_idx": data_idx})
    n = 0
    while time.perf_counter() < until:
        t0 = time.perf_counter()
        out = post(conn, "/step", {"id": iid, "action": action})
        lat.append(time.perf_counter() - t0)
        if "error" in out:
            raise RuntimeError(out["error"])
        n += 1
        if n % RESET_EVERY == 0:
            post(conn, "/reset", {"id": iid, "data_idx": data_idx})
    counts.append(n)
    post(conn, "/close", {"id": iid})
    conn.close()


def trial(
    proc: subprocess.Popen, port: int, action: str, data_idx: int, clients: int, seconds: float
) -> dict:
    server = psutil.Process(proc.pid)
    lat, counts = [], []
    cpu0 = sum(server.cpu_times()[:2])
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=client, args=(port, action, data_idx, t0 + seconds, lat, counts))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu = sum(server.cpu_times()[:2]) - cpu0
    steps = sum(counts)
    lat.sort()
    return {
        "steps/s": steps / wall,
        "p50 ms": 1000 * lat[len(lat) // 2],
        "p99 ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "cpu ms/step": 1000 * cpu / steps,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--agentgym",
        default=os.environ.get("AGENTGYM_DIR", "/tmp/agentgym"),
        help="folder with AgentGym's agentenv-babyai/ and agentenv-textcraft/",
    )
    p.add_argument("--envs", default="babyai,textcraft")
    p.add_argument("--clients", default="1,16")
    p.add_argument("--seconds", type=float, default=4.0, help="per trial")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    envs = args.envs.split(",")
    missing = [ENVS[e][1] for e in envs if not os.path.isdir(os.path.join(args.agentgym, ENVS[e][1]))]
    if missing:
        print(
            f"SKIPPED: AgentGym's server packages {missing} are not in {args.agentgym}; copy them "
            "there from github.com/WooooDyy/AgentGym (see this file's docstring)."
        )
        return
    clients = [int(c) for c in args.clients.split(",")]
    for env in envs:
        ours_module, folder, their_module, action, data_idx = ENVS[env]
        ports = {"ours": free_port(), "AgentGym": free_port()}
        their_env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                [os.path.join(args.agentgym, "deps"), os.path.join(args.agentgym, folder)]
            ),
        )
        procs = {
            "ours": start(
                [sys.executable, "-m", ours_module, "--port", str(ports["ours"])], ROOT, ports["ours"]
            ),
            # (`import minigrid` registers the BabyAI levels with gymnasium, which the minigrid
            # of AgentGym's day did through gym's entry points)
            "AgentGym": start(
                [
                    sys.executable,
                    "-c",
                    f"import minigrid, uvicorn; uvicorn.run('{their_module}:app', "
                    f"host='127.0.0.1', port={ports['AgentGym']})",
                ],
                os.path.join(args.agentgym, folder),
                ports["AgentGym"],
                their_env,
            ),
        }
        try:
            for name in procs:  # warm up
                trial(procs[name], ports[name], action, data_idx, 2, 1.0)
            res = {(n, c): [] for n in procs for c in clients}
            for _ in range(args.rounds):
                for c in clients:
                    for name in procs:
                        res[name, c].append(
                            trial(procs[name], ports[name], action, data_idx, c, args.seconds)
                        )
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(timeout=30)
        print(f"\n{env}: {args.rounds} interleaved rounds of {args.seconds:g} s per trial (medians)")
        keys = ["steps/s", "p50 ms", "p99 ms", "cpu ms/step"]
        print(f"  {'clients':>7} {'server':>9} " + " ".join(f"{k:>12}" for k in keys))
        for c in clients:
            med = {n: {k: statistics.median(r[k] for r in res[n, c]) for k in keys} for n in procs}
            for n in procs:
                print(f"  {c:>7} {n:>9} " + " ".join(f"{med[n][k]:12.2f}" for k in keys))
            print(
                f"  {c:>7} {'ratio':>9} {med['ours']['steps/s'] / med['AgentGym']['steps/s']:11.2f}x "
                f"throughput, {med['AgentGym']['cpu ms/step'] / med['ours']['cpu ms/step']:.2f}x less CPU "
                f"per step (per round: "
                + " ".join(
                    f"{a['steps/s'] / b['steps/s']:.2f}" for a, b in zip(res["ours", c], res["AgentGym", c])
                )
                + ")"
            )


if __name__ == "__main__":
    main()
