"""An environment server as a child process: `python -m servers.<env>` on a free loopback port.

Where it sits: `envs/__init__.py`'s `open_pool` starts an `EnvServer` when no `--url` is given, and
an `EnvPool` restarts it when it crashed (re-exported: `from envs import EnvServer`). The child dies
with its parent, and a SIGTERM to the parent still runs the atexit handler that stops it.
"""

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # servers/ is run from here


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child, before exec: ask Linux to SIGTERM us when the parent dies (no orphans)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _exit_on_sigterm():
    """Turn SIGTERM into SystemExit so that atexit handlers (which stop servers) run."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (a server's JVMs, browsers)."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


class EnvServer:
    """`python -m <module> --port P` as a child process on loopback."""

    def __init__(
        self,
        module: str,
        port: int | None = None,
        startup_timeout: float = 120.0,
        log_path: str | None = None,
        args: list[str] | None = None,
    ):
        self.module, self.port, self.startup_timeout = module, port, startup_timeout
        self.log_path, self.args = log_path, list(args or [])  # args: e.g. ["--max-instances", "8"]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "EnvServer":
        self.port = self.port or free_port()
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "--port", str(self.port), *self.args],
            cwd=ROOT,
            stdout=log,
            stderr=log if self.log_path else subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        if log is not subprocess.DEVNULL:
            log.close()
        atexit.register(self.stop)
        _exit_on_sigterm()
        deadline = time.time() + self.startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.module} exited with code {self.proc.returncode} while "
                    f"starting (log: {self.log_path or 'not kept'})"
                )
            try:
                requests.get(self.url + "/", timeout=2)
                return self
            except requests.RequestException:
                time.sleep(0.05)  # (refused at once until it listens: polling is cheap)
        self.stop()
        raise TimeoutError(f"{self.module} did not answer on {self.url} within {self.startup_timeout}s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # the server closes its instances (and ends itself if that hangs)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:  # never expected: take its children with it
                children = _descendants(self.proc.pid)
                self.proc.kill()
                self.proc.wait()
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        self.proc = None
        atexit.unregister(self.stop)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
