"""The training loop under faults: a server killed mid-rollout, a dead --url, a kill while a
checkpoint is being written, and the pool's dropped instances."""

import json
import os

import pytest
import requests
import torch

import train as train_module
from envs import EnvPool, EnvServer, free_port
from machinery.checkpoint import checkpoint_folder
from train import Config, train


def small(out, **kw) -> Config:
    base = dict(
        steps=3,
        tasks_per_step=2,
        group_size=2,
        minibatch_size=2,
        eval_episodes=0,
        rounds="2,3",
        steps_per_stage=1,
        out=str(out),
        save_every=1,
    )
    base.update(kw)
    return Config(**base)


def rows(out) -> list[dict]:
    return [json.loads(x) for x in open(out / "metrics.jsonl")]


def test_episodes_cut_by_a_killed_server_are_left_out_of_the_update_and_counted(
    tmp_path, monkeypatch, capsys
):
    """At step 2's second turn the server is killed: those episodes end in an environment error,
    are counted in metrics.jsonl and warned about, never reach the update; step 3 runs on a
    restarted server."""
    calls = {"reset": 0, "step": 0}
    reset, step = EnvPool.reset, EnvPool.step

    def counting_reset(self, *a):
        calls["reset"], calls["step"] = calls["reset"] + 1, 0
        return reset(self, *a)

    def killing_step(self, *a):
        calls["step"] += 1
        if calls["reset"] == 2 and calls["step"] == 2:
            self.server.proc.kill()
            self.server.proc.wait()
        return step(self, *a)

    batches = []
    make_batch = train_module.make_batch
    monkeypatch.setattr(EnvPool, "reset", counting_reset)
    monkeypatch.setattr(EnvPool, "step", killing_step)
    monkeypatch.setattr(
        train_module,
        "make_batch",
        lambda trajs, *a: (
            batches.append((calls["reset"], len(trajs), sum(bool(t.error) for t in trajs)))
            or make_batch(trajs, *a)
        ),
    )
    train(small(tmp_path))
    m = rows(tmp_path)
    assert [r["step"] for r in m] == [1, 2, 3]
    assert m[0]["charts/env_errors"] == 0 and m[2]["charts/env_errors"] == 0
    assert 0 < m[1]["charts/env_errors"] <= 4
    assert all(errors == 0 for _, _, errors in batches)  # no errored episode reaches an update
    assert {s: n for s, n, _ in batches} == {s: 4 - m[s - 1]["charts/env_errors"] for s, _, _ in batches}
    assert "ended in an environment error and are left out of the update" in capsys.readouterr().out


def test_a_dead_url_is_a_clear_error_before_anything_runs(tmp_path):
    import eval as evaluation

    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RuntimeError, match="no environment server answers at " + dead):
        train(small(tmp_path / "run", url=dead, eval_episodes=4))
    assert not os.path.exists(tmp_path / "run")
    with pytest.raises(RuntimeError, match="no environment server answers"):
        evaluation.main(["--url", dead, "--task-ids", "1", "--out", str(tmp_path / "ev")])
    assert not os.path.exists(tmp_path / "ev")


def test_a_kill_while_checkpointing_keeps_the_previous_checkpoint_and_resume_is_exact(tmp_path, monkeypatch):
    """Run b is killed while writing step 3's checkpoint (its weights written, not its state):
    `checkpoint` is still step 2's, complete; resuming from it re-runs step 3 (metrics.jsonl is
    trimmed, not 1,2,3,3) and ends exactly where an uninterrupted run a ends, its summary holding
    the evaluation before training that the killed run made (a cut run writes no summary.json)."""
    a, b = tmp_path / "a", tmp_path / "b"
    train(small(a, eval_episodes=2))
    save = torch.save

    def killed_at_step_3(obj, path, *args, **kw):
        if isinstance(obj, dict) and obj.get("step") == 3 and "checkpoint.tmp" in str(path):
            raise KeyboardInterrupt("killed while checkpointing")
        return save(obj, path, *args, **kw)

    monkeypatch.setattr(torch, "save", killed_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train(small(b, eval_episodes=2))
    monkeypatch.setattr(torch, "save", save)
    assert not (b / "summary.json").exists() and (b / "eval_before" / "summary.json").exists()
    assert torch.load(b / "checkpoint" / "state.pt", weights_only=False)["step"] == 2
    assert torch.load(b / "checkpoint.prev" / "state.pt", weights_only=False)["step"] == 1
    assert (b / "checkpoint.tmp" / "model.safetensors").exists()  # the half-written one, unused
    assert [r["step"] for r in rows(b)] == [1, 2, 3]
    train(small(b, eval_episodes=2, resume=str(b / "checkpoint")))
    before = [json.load(open(run / "summary.json"))["eval_before"] for run in (a, b)]
    assert before[0] == before[1] and before[0]["n_episodes"] == 2
    ra, rb = rows(a), rows(b)
    assert [r["step"] for r in rb] == [1, 2, 3] and [r["horizon"] for r in rb] == [2, 3, 3]
    assert ra[2]["charts/reward"] == rb[2]["charts/reward"]
    assert abs(ra[2]["losses/loss"] - rb[2]["losses/loss"]) < 1e-6
    from safetensors.torch import load_file

    wa = load_file(str(a / "checkpoint" / "model.safetensors"))
    wb = load_file(str(b / "checkpoint" / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k])
    assert not (b / "checkpoint.tmp").exists()


def test_resume_falls_back_to_the_previous_checkpoint_when_the_last_rename_did_not_happen(tmp_path):
    (tmp_path / "checkpoint.prev").mkdir()
    (tmp_path / "checkpoint.prev" / "state.pt").write_bytes(b"x")
    assert checkpoint_folder(str(tmp_path / "checkpoint")) == str(tmp_path / "checkpoint.prev")
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.pt").write_bytes(b"x")
    assert checkpoint_folder(str(tmp_path / "checkpoint")) == str(tmp_path / "checkpoint")


def test_the_pool_closes_the_instances_it_drops():
    """A step that fails on the client's side (its time-out) ends the episode with an error and
    the pool closes that instance on the server instead of leaking it."""
    server = EnvServer("tests.hang_server", args=["--time-limit", "600"]).start()
    try:
        # One request per instance (a batch that overruns the client's time-out fails as a whole;
        # tests/test_batch_endpoints.py shows a batch item that overruns the server's limit).
        pool = EnvPool(server=server, size=2, timeout=1.0, batched=False)
        assert all(not r.get("error") for r in pool.reset([0, 1], [0, 0]))
        count = lambda: requests.get(server.url + "/instances", timeout=5).json()  # noqa: E731
        assert count() == 2
        out = pool.step([0, 1], ["sleep", "fine"])
        assert out[0]["error"] and out[0]["done"] and not out[1].get("error")
        assert pool.ids[0] is None and count() == 1  # dropped and closed on the server
        assert not pool.reset([0], [0])[0].get("error") and count() == 2  # a fresh one
        pool.close()
        assert count() == 0
    finally:
        server.stop()
