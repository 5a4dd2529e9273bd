"""Shared test fixtures: environment servers started as real subprocesses on loopback."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs import EnvServer  # noqa: E402


@pytest.fixture(scope="module")
def start_server():
    """Call with a module name (e.g. "servers.babyai"); the server is stopped after the module."""
    started = []

    def start(module: str, **kwargs) -> EnvServer:
        server = EnvServer(module, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory):
    """A small tiny policy for BabyAI (a short warm-up), built once and only read by the tests."""
    from tiny import build_tiny_policy

    path = str(tmp_path_factory.mktemp("tiny"))
    build_tiny_policy("babyai", path, warmup_steps=5, episodes=40)
    return path
