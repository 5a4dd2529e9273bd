"""Shared test fixtures: environment servers started as real subprocesses on loopback, the tiny
policy, a fresh Accelerate state."""

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


@pytest.fixture
def fresh_accelerate():
    """Accelerate keeps one state per process: a bf16 run after a float32 one in the same test
    process needs it reset (a real run is its own process)."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="session")
def tiny_path():
    """The tiny policy for BabyAI, as shipped (policies/tiny-babyai-v2); the tests only read it."""
    from tiny import tiny_policy_path

    return tiny_policy_path("babyai")
