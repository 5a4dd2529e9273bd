"""The BabyAI server over real HTTP: the protocol, the high-level actions, bad input."""

import os
import random
import signal
import time
from collections import deque

import pytest
import requests

from envs import ENVS, EnvClient, EnvPool, EnvServer
from servers import babyai
from servers.babyai import DIRS, LEVELS, BabyAIText, moves, path_to, task_of


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("servers.babyai")


def test_data_idx_maps_to_level_and_seed_as_agentgym():
    assert task_of(0) == ("BabyAI-GoToRedBallGrey-v0", 0)
    assert task_of(41) == ("BabyAI-GoToRedBall-v0", 1)
    assert task_of(39) == ("BabyAI-BossLevelNoUnlock-v0", 0)
    assert len(LEVELS) == 40


def one_search_per_target(game, targets):
    """The planner as it was: a breadth-first search of its own for each target."""
    u = game.env.unwrapped
    found = {}
    for target in targets:
        start = (int(u.agent_pos[0]), int(u.agent_pos[1]), int(u.agent_dir))
        parents, queue = {start: None}, deque([start])
        while queue:
            x, y, d = state = queue.popleft()
            if (x + DIRS[d][0], y + DIRS[d][1]) == target:
                found[target] = path_to(parents, state)
                break
            for nxt, act in moves(u, state):
                if nxt not in parents:
                    parents[nxt] = (state, act)
                    queue.append(nxt)
    return found


def minigrid_view(u):
    """`agent_view` as minigrid computes it: `gen_obs_grid`'s copy of the view, cut out, rotated
    and masked."""
    grid, visible = u.gen_obs_grid()
    return [[grid.get(i, j) for j in range(grid.height)] for i in range(grid.width)], visible.tolist()


def test_the_speed_ups_change_no_answer(monkeypatch):
    """minigrid's image observation left out (`text_only`), one search for every object's path
    (`paths_to_face`) and the view read off the grid in place (`agent_view`) give the answers of
    minigrid's full observation, one search per object and minigrid's own view, on every level,
    through random play (the expert's advice on a quarter of them)."""
    rng, played = random.Random(0), []
    fast = BabyAIText()
    for data_idx in range(40):  # one task of each level
        answers, actions = [fast.reset(data_idx)], []
        for turn in range(6):
            actions.append(rng.choice(list(fast.actions) + ["not an action"]))
            answers += [fast.step(actions[-1])] + ([fast.expert()] if turn == 2 and data_idx % 4 == 1 else [])
        played.append((data_idx, actions, answers))
    monkeypatch.setattr(babyai, "text_only", lambda env: env)
    monkeypatch.setattr(BabyAIText, "paths_to_face", one_search_per_target)
    monkeypatch.setattr(babyai, "agent_view", minigrid_view)
    slow = BabyAIText()
    for data_idx, actions, answers in played:
        again = [slow.reset(data_idx)]
        for turn, action in enumerate(actions):
            again += [slow.step(action)] + ([slow.expert()] if turn == 2 and data_idx % 4 == 1 else [])
        assert again == answers


def test_create_reset_step_observation_close(server):
    c = EnvClient(server.url)
    assert "BabyAI" in requests.get(server.url + "/").text
    iid = c.create()
    r = c.reset(iid, 1)
    assert r["done"] is False and r["reward"] == 0 and r["score"] == 0
    assert "Goal: go to the red ball." in r["observation"]
    assert "turn left" in r["available_actions"]
    r2 = c.step(iid, "turn left")
    assert set(r2) >= {"observation", "reward", "score", "done"}
    assert c.observation(iid) == r2["observation"]
    c.close(iid)
    assert requests.post(server.url + "/step", json={"id": iid, "action": "turn left"}).status_code == 404


def test_go_to_action_reaches_the_object_and_succeeds(server):
    """On GoToRedBall, `go to red ball 1` (when visible) plans a path and completes the task."""
    c = EnvClient(server.url)
    iid = c.create()
    solved = 0
    for seed in range(10):
        r = c.reset(iid, 40 * seed + 1)
        for _ in range(4):  # turn until the red ball is in view
            if "go to red ball 1" in r["available_actions"]:
                break
            r = c.step(iid, "turn left")
        if "go to red ball 1" in r["available_actions"]:
            r = c.step(iid, "go to red ball 1")
            assert r["done"] and r["reward"] > 0 and r["score"] == r["reward"]
            assert r["observation"].startswith("The task is completed.")
            solved += 1
    assert solved >= 5


def test_pickup_and_door_actions(server):
    c = EnvClient(server.url)
    iid = c.create()
    # Pickup: PickupLoc (level 19) missions "pick up the X"; pickup whatever is visible and check we carry it.
    picked = False
    for seed in range(10):
        r = c.reset(iid, 40 * seed + 18)
        picks = [a for a in r["available_actions"] if a.startswith("pickup")]
        if picks:
            name = " ".join(picks[0].split()[1:3])
            r = c.step(iid, picks[0])
            assert f"You carry a {name}." in r["observation"] or r["done"]
            picked = True
            break
    assert picked


def test_toggle_and_go_through_opens_the_door_and_puts_the_agent_past_it():
    """In-process (to see the grid): after `toggle and go through <door>` the door is open and
    the agent stands one cell beyond it, facing away from it."""
    from servers.babyai import BabyAIText

    game, through = BabyAIText(), 0
    try:
        for seed in range(40):  # OpenDoorLoc, GoToObjDoor, GoToDoor
            for level in (13, 10, 9):
                r = game.reset(40 * seed + level)
                doors = [a for a in r["available_actions"] if a.startswith("toggle and go through")]
                if not doors:
                    continue
                name = doors[0][len("toggle and go through ") :]
                door = next(o for o in game.visible_objects() if o["name"] == name)
                assert not door["obj"].is_open
                r = game.step(doors[0])
                if r["done"]:  # opening the mission's door ends the episode before the agent moves
                    continue
                u = game.env.unwrapped
                assert u.grid.get(*door["pos"]).is_open
                assert tuple(int(x) for x in u.agent_pos - u.dir_vec) == door["pos"]
                through += 1
    finally:
        game.close()
    assert through >= 2


def test_unknown_action_gets_a_message_and_nothing_breaks(server):
    c = EnvClient(server.url)
    iid = c.create()
    r0 = c.reset(iid, 1)
    r = c.step(iid, "fly to the moon")
    assert "not an available action" in r["observation"] and r["done"] is False
    r = c.step(iid, "check available actions")
    assert "You can take the following actions" in r["observation"]
    assert c.step(iid, "turn left")["done"] is False  # still playable
    assert r0["available_actions"]


def test_bad_requests_get_4xx_json(server):
    u = server.url
    r = requests.post(u + "/step", json={"id": 12345, "action": "turn left"})
    assert r.status_code == 404 and "error" in r.json()
    r = requests.post(u + "/step", json={"action": "turn left"})  # no id
    assert r.status_code == 422 and "error" in r.json()
    r = requests.post(u + "/step", data="not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    iid = requests.post(u + "/create", json={}).json()["id"]
    r = requests.post(u + "/reset", json={"id": iid, "data_idx": -1})
    assert r.status_code == 422 and "data_idx" in r.json()["error"]  # negative: fails validation
    r = requests.get(u + "/observation", params={"id": "abc"})
    assert r.status_code == 422
    assert (
        requests.post(u + "/reset", json={"env_idx": iid, "data_idx": 1}).status_code == 200
    )  # AgentGym's name


def _png(data_url: str):
    import base64
    import io

    import numpy as np
    from PIL import Image

    assert data_url.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).convert("RGB"))


def test_frames_are_off_by_default(server):
    c = EnvClient(server.url)
    iid = c.create()
    assert "frame" not in c.reset(iid, 4) and "frame" not in c.step(iid, "turn left")


def test_render_field_is_the_real_minigrid_frame_at_every_answer(server):
    """With {"render": true} at /create, /reset and /step carry the frame minigrid itself draws
    (decoded pixel for pixel), and it follows the agent's moves."""
    import gymnasium as gym
    import numpy as np

    from servers.babyai import TILE

    iid = requests.post(server.url + "/create", json={"render": True}).json()["id"]
    c = EnvClient(server.url)
    level, seed = task_of(4)
    r = c.reset(iid, 4)
    env = gym.make(level)
    env.reset(seed=seed)
    want = env.unwrapped.get_frame(highlight=True, tile_size=TILE)
    got = _png(r["frame"])
    assert got.shape == want.shape == (env.unwrapped.height * TILE, env.unwrapped.width * TILE, 3)
    assert np.array_equal(got, want)
    r2 = c.step(iid, "turn left")
    env.step(0)  # minigrid's turn left
    assert np.array_equal(_png(r2["frame"]), env.unwrapped.get_frame(highlight=True, tile_size=TILE))
    assert not np.array_equal(_png(r2["frame"]), got)
    # GET /render works on any instance, and refuses politely before a reset or with a bad flag
    plain = c.create()
    assert requests.get(server.url + "/render", params={"id": plain}).status_code == 400
    c.reset(plain, 4)
    assert np.array_equal(
        _png(requests.get(server.url + "/render", params={"id": plain}).json()["frame"]), want
    )
    assert requests.post(server.url + "/create", json={"render": "yes"}).status_code == 422  # its type
    assert requests.get(server.url + "/render", params={"id": 9999}).status_code == 404


def test_every_train_split_has_a_val_and_a_test_split_and_none_overlap():
    """Choices are made on "val", figures reported on "test": each environment's train/val/test
    (and each named subset's <name>-train/-val/-test) exist and are pairwise disjoint."""
    for spec in ENVS.values():
        trains = [n for n in spec.splits if n == "train" or n.endswith("-train")]
        assert "train" in trains, spec.name
        for train in trains:
            prefix = train.removesuffix("train")
            parts = [set(spec.splits[prefix + part]) for part in ("train", "val", "test")]
            assert all(parts), (spec.name, prefix)
            assert not parts[0] & parts[1] and not parts[0] & parts[2] and not parts[1] & parts[2], (
                spec.name,
                prefix,
            )


def test_a_crashed_server_is_restarted():
    server = EnvServer("servers.babyai").start()
    pool = EnvPool(server=server, size=2)
    try:
        assert not pool.reset([0, 1], [1, 2])[0].get("error")
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        out = pool.step([0, 1], ["turn left", "turn left"])  # in-flight episodes end with an error
        assert all(r["done"] and r.get("error") for r in out)
        r = pool.reset([0, 1], [1, 2])  # the pool restarts the server and recreates instances
        assert server.alive() and not r[0].get("error") and "Goal:" in r[0]["observation"]
    finally:
        pool.close()
        server.stop()


def test_pool_keeps_slot_order(server):
    pool = EnvPool(url=server.url, size=16)
    tasks = ENVS["babyai"].splits["test"][:16]
    first = pool.reset(list(range(16)), tasks)
    assert [r["category"] for r in first] == [task_of(t)[0] for t in tasks]
    out = pool.step(list(range(16)), ["turn left"] * 16)
    assert len(out) == 16 and all("observation" in r for r in out)
    pool.close()


def test_pool_round_trips_do_not_serialise_the_batch(start_server):
    """8 instances whose steps take 0.3 s each: one pool step takes about 0.3 s, not 2.4 s."""
    import time

    server = start_server("tests.slow_server")
    pool = EnvPool(url=server.url, size=8)
    pool.reset(list(range(8)), list(range(8)))
    t0 = time.time()
    out = pool.step(list(range(8)), [f"a{i}" for i in range(8)])
    assert time.time() - t0 < 1.2
    assert [r["observation"] for r in out] == [f"a{i}" for i in range(8)]
    pool.close()


def test_a_level_minigrid_cannot_generate_returns_quickly(server):
    """data_idx 304514 (SynthS5R2, seed 7612) spun forever in minigrid's agent placement; with
    bounded placements the reset answers within seconds, a level or a clear 400."""
    iid = requests.post(server.url + "/create", json={}).json()["id"]
    start = time.time()
    r = requests.post(server.url + "/reset", json={"id": iid, "data_idx": 304514}, timeout=30)
    assert time.time() - start < 10
    assert (
        r.status_code == 200
        and "Goal:" in r.json()["observation"]
        or r.status_code == 400
        and "could not generate" in r.json()["error"]
    )
    assert requests.post(server.url + "/reset", json={"id": iid, "data_idx": 1}).status_code == 200


def test_level_generation_gives_up_with_a_clear_error(monkeypatch):
    import servers.babyai as B

    monkeypatch.setattr(B, "MAX_ATTEMPTS", 1)
    env = B.BabyAIText()
    with pytest.raises(B.EnvError, match="could not generate level BabyAI-SynthS5R2-v0 with seed 7612"):
        env.reset(304514)
    assert env.reset(1)["done"] is False
