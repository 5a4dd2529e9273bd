"""The tiny policy ships with the code (policies/tiny-babyai-v2): loading a model only reads files,
and the shipped files are what `python -m tiny build` makes from the same seed."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

import config
import envs
import tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def no_servers(monkeypatch):
    """Starting an environment server or opening a pool fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("loading a model started an environment server")

    monkeypatch.setattr(envs, "open_pool", refuse)
    monkeypatch.setattr(envs.EnvServer, "start", refuse)


def test_loading_the_tiny_policy_opens_no_environment_pool(no_servers):
    policy = config.load_agent(config.AgentConfig(), "cpu")
    assert policy.is_tiny and policy.path == tiny.tiny_policy_path("babyai")
    assert policy.path.startswith(os.path.join(ROOT, "policies"))


def test_a_missing_tiny_policy_names_its_build_command_and_builds_nothing(no_servers, monkeypatch, tmp_path):
    monkeypatch.setattr(tiny, "POLICIES_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="python -m tiny build --env textcraft"):
        config.load_agent(config.AgentConfig(env="textcraft"), "cpu")
    assert not os.listdir(tmp_path)


def test_the_shipped_policy_equals_a_fresh_build_with_the_same_seed(tmp_path):
    """Bit for bit: the tokenizer, the config and every tensor (one torch thread; ~2 min on 2 cores)."""
    out = str(tmp_path / "built")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "tiny", "build", "--env", "babyai", "--seed", "0", "--out", out]
    r = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    shipped = tiny.tiny_policy_path("babyai")
    read = lambda folder, name: open(os.path.join(folder, name)).read()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert read(out, name) == read(shipped, name), name
    model_config = lambda folder: {
        k: v for k, v in json.loads(read(folder, "config.json")).items() if k != "transformers_version"
    }
    assert model_config(out) == model_config(shipped)
    built = load_file(os.path.join(out, "model.safetensors"))
    ours = load_file(os.path.join(shipped, "model.safetensors"))
    assert sorted(built) == sorted(ours)
    differ = [name for name in ours if not torch.equal(built[name], ours[name])]
    assert not differ, f"tensors that differ: {differ}"
