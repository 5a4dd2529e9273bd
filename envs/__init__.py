"""Environments as the agent sees them: server processes, an HTTP client, a concurrent pool, splits.
This file holds the client and the pool; beside it, `process.py` the server process and `tasks.py`
each environment's spec and splits (both re-exported here: `from envs import ENVS, EnvServer`).

Where it sits: `agent.py` rolls out episodes through an `EnvPool`; the pool talks HTTP to an
environment server (`servers/<env>.py`, or any AgentGym server given by URL). AgentGym-RL's
Environment module (paper section 2): each environment is a separate service, so that
environment code never blocks or crashes the learner.

    EnvServer   (process.py) start `python -m servers.<env>` on a free loopback port, wait
                until it answers, stop it at exit (also on Ctrl-C, SIGTERM or an exception; the
                child also dies with its parent), restart it if it crashed.
    EnvClient   the protocol (/create /reset /step /observation /close) with timeouts, in the
                dialect of AgentGym's client for the environment (every server here accepts it),
                and every answer read into one shape: AgentGym's answers lack `available_actions`,
                so they are read from the observation text where it lists them.
                `expert(iid)` asks the server's expert for its next action (POST /expert,
                docs/experts.md): the trainer's call, never made on the agent's path.
    EnvPool     many instances stepped together: where the server offers `/reset_batch` and
                `/step_batch` (every server here), one HTTP round trip per turn for the whole batch;
                otherwise (AgentGym's servers) one round trip per live episode per turn, all in
                flight at once on a thread pool. Connections are kept alive either way (one
                `requests.Session` per client). A failed request or batch item ends that episode
                with `error` set (the trainer leaves such episodes out); the instance it drops is
                closed on the server, so that failures never leak instances (JVMs, browsers).
    open_pool   a pool on a fresh local server, or on `--url` after checking that it answers.
    ENVS        (tasks.py) per environment, an `EnvSpec`: its server module, named task splits
                (train and test never overlap), how to read an action out of a reply, the
                instruction given to the agent.
    env_spec    ENVS[env], or for `--env openenv` the spec any OpenEnv server describes
                (openenv.py, whose OpenEnvPool `open_pool` then opens: a WebSocket per slot).
"""

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import requests

from envs.openenv import OpenEnvPool, describe, http_url, spec_of
from envs.process import EnvServer, _descendants, free_port  # noqa: F401 (re-exported)
from envs.tasks import (  # noqa: F401 (re-exported: `from envs import ENVS`)
    ENVS,
    EnvSpec,
    babyai_actions,
    babyai_tasks,
    textcraft_actions,
)


def read_answer(
    answer, spec: "EnvSpec | None", episode_actions: list[str] | None, at_reset: bool = False
) -> dict:
    """An answer of either dialect in the one shape the agent reads: a dict with `observation`,
    `reward`, `done` and, where they can be known, `available_actions`.

    AgentGym's Deep Search server answers /reset with the observation string alone; its WebArena
    server says `terminated` for `done`; its SciWorld server sends `task_description` beside the
    first `observation`, which its client joins with a newline; none sends `available_actions`,
    which `spec.actions_from_text` then reads from the observation text."""
    out = {"observation": answer, "reward": 0.0, "done": False} if isinstance(answer, str) else dict(answer)
    if "done" not in out and "terminated" in out:
        out["done"] = bool(out["terminated"])
    if at_reset and out.get("task_description"):
        out["observation"] = f"{out['task_description']}\n{out['observation']}"
    if "available_actions" not in out and spec is not None and spec.actions_from_text is not None:
        found = spec.actions_from_text(str(out.get("observation", "")), episode_actions)
        if found:
            out["available_actions"] = found
    return out


class EnvClient:
    """The protocol for one instance slot on one server, in the dialect of AgentGym's client for
    `spec`'s environment (`id` + `data_idx` for BabyAI, TextCraft, SciWorld; `env_idx` for Deep
    Search and WebArena), which AgentGym's servers and every server here understand. Without a
    spec: `id` + `data_idx`."""

    def __init__(self, url: str, timeout: float = 60.0, spec: "EnvSpec | None" = None):
        self.url, self.timeout, self.spec = url.rstrip("/"), timeout, spec
        self.key = spec.instance_key if spec else "id"
        self.session = requests.Session()
        self.episode_actions: list[str] | None = None  # kept across an episode's answers

    def _post(self, path: str, body: dict):
        r = self.session.post(self.url + path, json=body, timeout=self.timeout)
        if r.status_code >= 400:
            raise RuntimeError(f"POST {path} -> {r.status_code}: {r.text[:500]}")
        out = r.json()
        if isinstance(out, dict) and "error" in out and "observation" not in out:
            raise RuntimeError(f"POST {path}: {out['error']}")  # AgentGym servers answer 200 + error
        return out

    def _read(self, answer, at_reset: bool = False) -> dict:
        out = read_answer(answer, self.spec, self.episode_actions, at_reset)
        self.episode_actions = out.get("available_actions")
        return out

    def create(self, **body) -> int:
        out = self._post("/create", body)
        return out if isinstance(out, int) else out.get("id", out.get("env_idx"))  # bare: Deep Search

    def reset_body(self, iid: int, data_idx: int) -> dict:
        task_key = self.spec.task_key if self.spec else "data_idx"
        extra = self.spec.reset_extra if self.spec else {}
        return {self.key: iid, task_key: data_idx, **extra}

    def step_body(self, iid: int, action: str) -> dict:
        return {self.key: iid, "action": action}

    def reset(self, iid: int, data_idx: int) -> dict:
        self.episode_actions = None
        return self._read(self._post("/reset", self.reset_body(iid, data_idx)), at_reset=True)

    def step(self, iid: int, action: str) -> dict:
        return self._read(self._post("/step", self.step_body(iid, action)))

    def observation(self, iid: int):
        r = self.session.get(self.url + "/observation", params={self.key: iid}, timeout=self.timeout)
        r.raise_for_status()
        return r.json()

    def expert(self, iid: int) -> dict:
        """The server's expert's next action for this instance: {"action", "thought", ...}."""
        return self._post("/expert", {self.key: iid})

    def close(self, iid: int, timeout: float | None = None) -> None:
        try:
            r = self.session.post(self.url + "/close", json={self.key: iid}, timeout=timeout or self.timeout)
            r.close()
        except requests.RequestException:
            pass  # closing is best effort: the server may already be gone


class EnvPool:
    """`size` instances of one environment, reset and stepped concurrently.

    `url` is a running server (ours or AgentGym's); or give `server`, an `EnvServer` the pool may
    restart when it crashed. A request that fails ends that episode (done, reward 0, `error` set)
    instead of the whole batch; the instance is created afresh at its next reset.

    `batched`: True sends each turn's resets and steps as one `/reset_batch` or `/step_batch`
    request, False one request per instance; None (the default) asks the server once, at the first
    reset, whether it has the batch endpoints (an empty batch: `[]` back, or AgentGym's 404).
    """

    def __init__(
        self,
        url: str | None = None,
        size: int = 1,
        server: EnvServer | None = None,
        timeout: float = 60.0,
        spec: EnvSpec | None = None,
        create: dict | None = None,
        batched: bool | None = None,
    ):
        self.server, self.batched = server, batched
        self.url = url or server.url
        self.timeout, self.create_body = timeout, {**(spec.extra_create if spec else {}), **(create or {})}
        self.clients = [EnvClient(self.url, timeout, spec) for _ in range(size)]  # one session each
        self.ids: list[int | None] = [None] * size
        self.executor = ThreadPoolExecutor(max_workers=min(64, max(1, size)))
        self.session = requests.Session()  # the batch requests' keep-alive connection

    def __len__(self):
        return len(self.clients)

    def _failed(self, slot: int, e) -> dict:
        """End this slot's episode with an error; drop its instance (recreated at the next reset)
        and free it on the server (if it is still there)."""
        dropped, self.ids[slot] = self.ids[slot], None
        if dropped is not None:
            self.clients[slot].close(dropped, timeout=5.0)
        return {
            "observation": f"[environment error: {e}]",
            "reward": 0.0,
            "score": 0.0,
            "done": True,
            "error": str(e),
        }

    def _call(self, slot: int, fn: Callable[[], dict]) -> dict:
        try:
            return fn()
        except (requests.RequestException, RuntimeError, ValueError) as e:
            return self._failed(slot, e)

    def has_batch_endpoints(self) -> bool:
        """Whether the server answers `/reset_batch` (asked once: an empty batch)."""
        if self.batched is None:
            try:
                r = self.session.post(self.url + "/reset_batch", json=[], timeout=self.timeout)
                self.batched = r.status_code == 200 and r.json() == []
            except (requests.RequestException, ValueError):
                self.batched = False
        return self.batched

    def _batch(self, path: str, slots: list[int], bodies: list[dict], at_reset: bool = False) -> list[dict]:
        """One request for all `slots`; each answer read by its slot's client, in order."""
        try:
            r = self.session.post(self.url + path, json=bodies, timeout=self.timeout)
            if r.status_code >= 400:
                raise RuntimeError(f"POST {path} -> {r.status_code}: {r.text[:500]}")
            answers = r.json()
            if not isinstance(answers, list) or len(answers) != len(bodies):
                raise RuntimeError(f"POST {path}: expected a list of {len(bodies)} answers")
        except (requests.RequestException, RuntimeError, ValueError) as e:
            return [self._failed(slot, e) for slot in slots]
        out = []
        for slot, a in zip(slots, answers):
            if isinstance(a, dict) and "error" in a and "observation" not in a:
                out.append(
                    self._failed(slot, RuntimeError(f"POST {path} -> {a.get('status')}: {a['error']}"))
                )
                continue
            client = self.clients[slot]
            if at_reset:
                client.episode_actions = None
            out.append(client._read(a, at_reset))
        return out

    def _reset_one(self, slot: int, data_idx: int) -> dict:
        client = self.clients[slot]
        if self.ids[slot] is None:
            self.ids[slot] = client.create(**self.create_body)
        return client.reset(self.ids[slot], data_idx)

    def reset(self, slots: list[int], data_idxs: list[int]) -> list[dict]:
        if self.server is not None and not self.server.alive():
            self.server.restart()  # a crashed server: start it again, instances are gone with it
            self.ids = [None] * len(self.ids)
        if not self.has_batch_endpoints():
            return list(
                self.executor.map(
                    lambda sd: self._call(sd[0], lambda: self._reset_one(*sd)), zip(slots, data_idxs)
                )
            )
        missing = [s for s in slots if self.ids[s] is None]  # creates stay one request each
        created = dict(
            zip(missing, self.executor.map(lambda s: self._call(s, lambda: self._create(s)), missing))
        )
        out: dict[int, dict] = {s: r for s, r in created.items() if r is not None}  # the failed creates
        todo = [(s, d) for s, d in zip(slots, data_idxs) if s not in out]
        answers = self._batch(
            "/reset_batch",
            [s for s, _ in todo],
            [self.clients[s].reset_body(self.ids[s], d) for s, d in todo],
            at_reset=True,
        )
        out.update(zip([s for s, _ in todo], answers))
        return [out[s] for s in slots]

    def _create(self, slot: int) -> None:
        self.ids[slot] = self.clients[slot].create(**self.create_body)

    def step(self, slots: list[int], actions: list[str]) -> list[dict]:
        if self.has_batch_endpoints():
            out = {
                s: self._failed(s, RuntimeError("no instance: reset first"))
                for s in slots
                if self.ids[s] is None
            }
            todo = [(s, a) for s, a in zip(slots, actions) if s not in out]  # (a None id would fail them all)
            answers = self._batch(
                "/step_batch",
                [s for s, _ in todo],
                [self.clients[s].step_body(self.ids[s], a) for s, a in todo],
            )
            out.update(zip([s for s, _ in todo], answers))
            return [out[s] for s in slots]
        return list(
            self.executor.map(
                lambda sa: self._call(sa[0], lambda: self.clients[sa[0]].step(self.ids[sa[0]], sa[1])),
                zip(slots, actions),
            )
        )

    def expert(self, slots: list[int]) -> list[dict]:
        """The expert's next action for each slot's episode (POST /expert, all in flight at once):
        {"action", "thought", ...}, or an answer with `error` set that ends that episode, as a
        failed step does. For the trainer (demonstrations, relabelling); the agent never asks."""

        def ask(slot: int) -> dict:
            if self.ids[slot] is None:
                return self._failed(slot, RuntimeError("no instance: reset first"))
            return self._call(slot, lambda: self.clients[slot].expert(self.ids[slot]))

        return list(self.executor.map(ask, slots))

    def close(self, free: bool = True) -> None:
        """`free`: close each instance on the server (one request each); a server about to be
        stopped frees them all at once."""
        for slot, iid in enumerate(self.ids):
            if iid is not None and free:
                self.clients[slot].close(iid)
        self.ids = [None] * len(self.ids)
        self.session.close()
        self.executor.shutdown(wait=False)


def check_server(url: str, timeout: float = 10.0) -> None:
    """A clear error, before anything else runs, when nothing answers at `url`."""
    try:
        r = requests.get(http_url(url) + "/", timeout=timeout)  # (an OpenEnv ws:// address too)
    except requests.RequestException as e:
        raise RuntimeError(
            f"no environment server answers at {url} ({type(e).__name__}); start one "
            "(e.g. python -m servers.babyai --port 36001) or leave out --url"
        ) from None
    if r.status_code >= 500:
        raise RuntimeError(f"the environment server at {url} answers GET / with {r.status_code}")


def server_url(url: str, rank: int = 0) -> str | None:
    """The environment server of process `rank` from an entry point's `--url`: a comma-separated
    list of running servers, every one checked first (a dead one is a clear error before anything
    else runs), of which process i of N (`accelerate launch`) uses the (i mod count)-th; None (an
    empty `--url`): `open_pool` starts a local server."""
    urls = [u for u in url.split(",") if u]
    for u in urls:
        check_server(u)
    return urls[rank % len(urls)] if urls else None


def env_spec(env: str, url: str | None = None, *splits: str) -> EnvSpec:
    """ENVS[env]; for `openenv`, the spec the OpenEnv server at `url` describes, which must have
    the named `splits` (the other environments' are checked when their flags are read)."""
    if env != "openenv":
        return ENVS[env]
    spec = spec_of(describe(url))
    for split in splits:
        if split not in spec.splits:
            raise ValueError(
                f"split {split!r}: the OpenEnv environment at {url} has the splits {', '.join(spec.splits)}"
            )
    return spec


def open_pool(
    env: str, size: int, url: str | None = None, log_path: str | None = None, create: dict | None = None
) -> EnvPool:
    """A pool for `env`: on the server at `url` if given (checked first), else on a fresh local
    server process. `create`: extra fields of POST /create (e.g. BabyAI's {"render": true}). For
    `openenv`, OpenEnv sessions on the server at `url`."""
    if env == "openenv":
        return OpenEnvPool(url, size)
    spec = ENVS[env]
    if url:
        check_server(url)
        return EnvPool(url=url, size=size, spec=spec, create=create)
    server = EnvServer(spec.module, log_path=log_path).start()
    return EnvPool(server=server, size=size, spec=spec, create=create)


def close_pool(pool: EnvPool) -> None:
    pool.close(free=pool.server is None)  # our own server's instances end with it
    if pool.server is not None:
        pool.server.stop()
