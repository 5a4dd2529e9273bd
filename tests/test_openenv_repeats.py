"""Two runs of one command on a deterministic OpenEnv environment log the same metrics, step for
step, on this project's server and on OpenEnv's own (envs/openenv.py's docstring says why they
parted: websockets' keepalive pings drew their payloads from Python's `random`, train.py's stream
of tasks, whenever the clock said so).

The environment is problem 10's reference game (exercises/find_it.py), served as a server of this
project (`build_app` + `add_openenv`) and by OpenEnv's own server code (`create_fastapi_app`).
websockets pings every 20 s, so a run parted after its first 20 s (at step 24 to 40 of the CPU
demo's 80). Here a client that keeps the default pings every 50 ms (`fast_keepalive`): a run of a
few seconds meets as many pings as an 80-step run does, and would part the same way."""

import json
import random
import time

import pytest

import envs.openenv
from envs import EnvServer
from envs.openenv import OpenEnvPool
from train import Config, train

WAYS = ("project", "openenv")  # exercises/find_it.py's two servers


@pytest.fixture(autouse=True)
def fast_keepalive(monkeypatch):
    """websockets' client with its keepalive every 50 ms instead of every 20 s, unless the pool
    asks for none."""
    real = envs.openenv.connect

    def connect(*args, **kwargs):
        kwargs.setdefault("ping_interval", 0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(envs.openenv, "connect", connect)


@pytest.fixture(scope="module", params=WAYS)
def find_it(request):
    """exercises/find_it.py served one way, at ws://127.0.0.1:PORT."""
    if request.param == "openenv":
        pytest.importorskip(
            "openenv.core", reason="OpenEnv's server: pip install --no-deps -r requirements-openenv.txt"
        )
    server = EnvServer("exercises.find_it", args=[request.param]).start()
    try:
        yield server.url.replace("http", "ws")
    finally:
        server.stop()


def test_an_openenv_pool_draws_nothing_from_pythons_random(find_it):
    random.seed(0)
    before = random.getstate()
    pool = OpenEnvPool(find_it, size=4)
    try:
        first = pool.reset([0, 1, 2, 3], [0, 1, 2, 3])
        time.sleep(0.3)  # six keepalive intervals, the sessions open
        answers = pool.step([0, 1, 2, 3], ["open the blue box"] * 4)
        time.sleep(0.3)
    finally:
        pool.close()
    assert not any(a.get("error") for a in first + answers)
    assert random.getstate() == before


def metrics(out) -> list[dict]:
    """metrics.jsonl without what the clock sets (speeds, seconds, memory)."""
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    clock = ("perf/", "charts/tokens_per_s", "charts/seconds_per_step")
    return [{k: v for k, v in r.items() if not k.startswith(clock)} for r in rows]


def test_two_runs_of_one_command_log_the_same_metrics(find_it, tiny_path, tmp_path):
    runs = []
    for name in ("first", "second"):
        flags = dict(env="openenv", url=find_it, model=tiny_path, steps=6, tasks_per_step=2, group_size=4)
        flags.update(minibatch_size=8, eval_episodes=8, rounds="3", threads=1, out=str(tmp_path / name))
        summary = train(Config(**flags))
        runs.append((metrics(tmp_path / name), summary["eval_before"], summary["eval_after"]))
    assert len(runs[0][0]) == 6 and all(r["charts/env_errors"] == 0 for r in runs[0][0])
    assert runs[0] == runs[1]
