"""Environment calls under a time limit: what servers/common.py's instance table runs every reset,
step and close through, so that no environment can hang its server.

Where it sits: an environment's methods are plain blocking Python (a simulator, a JVM, a browser);
the server's endpoints are coroutines. Each call runs on a reused worker thread (`run_limited`,
`run_limited_many`: the awaiting request holds no thread while it waits), or, for quick
pure-Python environments (BabyAI, TextCraft), on the event loop's own thread under a watchdog
(`run_inline`), since a thread hand-off per call costs more than the call. A call that overruns
its limit is answered with CallTimeout; if it is stuck in Python code its thread is interrupted
(an exception raised in it), and whatever it still returns is handed to an `abandoned` callback
to be closed.
"""

import asyncio
import contextlib
import ctypes
import functools
import logging
import queue
import threading
import time
from typing import Any, Callable

log = logging.getLogger("servers")


class CallTimeout(Exception):
    """An environment call overran its time limit (raised to the awaiting request)."""


class _Interrupt(BaseException):
    """Raised inside a timed-out call's thread; a BaseException, so that an environment's own
    `except Exception` cannot swallow it."""


def _interrupt(thread: threading.Thread) -> None:
    """Raise _Interrupt in `thread` at its next Python bytecode (a running C call finishes first)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(_Interrupt))


class _Workers:
    """Daemon threads that run environment calls, reused: starting a thread per request costs
    more server CPU than a TextCraft or BabyAI step. A thread is named `env-call` while it runs a
    call and `env-idle` while it waits; one whose call was given up on (a time-out) is retired,
    not reused, since the interrupt sent to it could land in its next call."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.idle, self.lock = 0, threading.Lock()

    def submit(self, job: Callable[[], bool]) -> None:
        """Run `job` on an idle thread, or a new one; `job()` returns True to retire its thread."""
        with self.lock:
            spawn = self.idle == 0
            self.idle -= not spawn
        if spawn:
            threading.Thread(target=self._run, args=(job,), daemon=True, name="env-call").start()
        else:
            self.jobs.put(job)

    def _run(self, job) -> None:
        me = threading.current_thread()
        while True:
            me.name = "env-call"
            try:
                if job():
                    return
            except _Interrupt:  # a late interrupt (never expected: retired threads take them)
                return
            me.name = "env-idle"
            with self.lock:
                self.idle += 1
            job = self.jobs.get()


WORKERS = _Workers()


class _Watchdog:
    """Interrupts an environment call made on the event loop's own thread (`inline` below) once
    it overruns its limit. It polls (POLL seconds) rather than being woken per call, which would
    cost a thread switch per call, the very thing inline calls save."""

    POLL = 0.05

    def __init__(self):
        self.lock, self.armed, self.fired, self.thread = threading.Lock(), None, False, None

    def arm(self, limit: float) -> None:
        with self.lock:
            self.armed, self.fired = (time.monotonic() + limit, threading.get_ident()), False
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True, name="env-watchdog")
                self.thread.start()

    def disarm(self) -> bool:
        """Whether the call was interrupted."""
        with self.lock:
            self.armed = None
            return self.fired

    def _run(self) -> None:
        while True:
            time.sleep(self.POLL)
            with self.lock:  # the interrupt is sent holding the lock: disarm() cannot slip past it
                if self.armed is not None and not self.fired and time.monotonic() >= self.armed[0]:
                    self.fired = True
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(self.armed[1]), ctypes.py_object(_Interrupt)
                    )


WATCHDOG = _Watchdog()


def run_inline(
    fns: list[Callable[[], Any]], limit: float, abandoned: list[Callable[[Any], None]] | None = None
) -> list[tuple[bool, Any]]:
    """`run_limited_many` on the calling thread (the event loop's), for environments whose calls
    are quick and pure Python (BabyAI, TextCraft): handing a call to another thread and back costs
    several times a step's own time. A call that overruns is interrupted by WATCHDOG (a call
    blocked inside C code would block the server: such environments must not use this)."""
    results = []
    for k, fn in enumerate(fns):
        WATCHDOG.arm(limit)
        try:
            ok, value = True, fn()
        except BaseException as e:  # noqa: BLE001 - _Interrupt included
            ok, value = False, e
        for _ in range(2):  # an interrupt sent just as fn returned lands here, once
            try:
                fired = WATCHDOG.disarm()
                break
            except _Interrupt:
                fired = True
        if fired:
            if abandoned is not None:
                with contextlib.suppress(Exception):
                    abandoned[k](value if ok else None)
            ok, value = False, CallTimeout(f"the call did not finish within {limit:g} s")
        results.append((ok, value))
    return results


def _give_up(abandoned: list[Callable[[Any], None]] | None, k: int, value) -> None:
    """Hand what an overrun fn still returned to its `abandoned` callback, to close it."""
    if abandoned is not None:
        try:
            abandoned[k](value)
        except Exception:  # best effort after a time-out
            log.exception("cleaning up after a timed-out call")


def _settle(fut, ok, value):
    if not fut.done():
        fut.set_result((ok, value))


def _work(fns, first, futs, lock, state, loop, abandoned) -> bool:  # True: retire this thread
    """The worker thread's part of one round of `run_limited_many`: fns[first:] in turn, each
    result settled on its future, until the awaiting coroutine gives up on one (`state["late"]`)."""
    with lock:
        state["thread"] = threading.current_thread()
    for k in range(first, len(fns)):
        with lock:
            if state["late"] is not None:  # given up on before it started
                _give_up(abandoned, k, None)
                return True
        try:
            ok, value = True, fns[k]()
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            ok, value = False, e
        for _ in range(2):  # an interrupt that arrives just after fns[k] returned lands here, once
            try:
                with lock:
                    state["finished"] = k
                    late = state["late"] == k
                if late:
                    _give_up(abandoned, k, value if ok else None)
                    return True
                with contextlib.suppress(RuntimeError):  # the loop is gone (shutting down)
                    loop.call_soon_threadsafe(_settle, futs[k], ok, value)
                break
            except _Interrupt:
                continue
    return False


async def _await_each(futs, first: int, n: int, limit: float, lock, state, results: list) -> None:
    """The coroutine's part of one round: each fn's result awaited for at most `limit` seconds and
    appended to `results`; at the first overrun its thread is interrupted and the round ends."""
    for k in range(first, n):
        try:
            results.append(await asyncio.wait_for(asyncio.shield(futs[k]), limit))
        except asyncio.TimeoutError:
            with lock:
                late = state["finished"] < k
                if late:
                    state["late"] = k
                thread = state["thread"]
            if not late:  # it finished in the same instant: its answer is on the way
                results.append(await futs[k])
                continue
            if thread is not None:  # (None: not started yet; it will see `late` and not start)
                _interrupt(thread)
            results.append((False, CallTimeout(f"the call did not finish within {limit:g} s")))
            return


async def run_limited_many(
    fns: list[Callable[[], Any]], limit: float, abandoned: list[Callable[[Any], None]] | None = None
) -> list[tuple[bool, Any]]:
    """Each of `fns` in turn on one worker thread (`_Workers`), each awaited for at most `limit`
    seconds from its start. Returns per fn (True, its value) or (False, the exception it raised,
    or CallTimeout if it overran). An overrun fn's thread is interrupted, whatever the fn still
    returns (None if it raised) goes to its `abandoned` callback, to close it, and the fns after it
    go on a new thread (`_work` is the thread's part, `_await_each` the coroutine's). The awaiting
    coroutine holds no thread while it waits."""
    loop = asyncio.get_running_loop()
    results: list[tuple[bool, Any]] = []
    while len(results) < len(fns):  # one round per thread: a round ends at an overrun
        first = len(results)
        futs = {k: loop.create_future() for k in range(first, len(fns))}
        lock = threading.Lock()
        # the last fn finished; the fn given up on; the thread running the round
        state = {"finished": first - 1, "late": None, "thread": None}
        WORKERS.submit(functools.partial(_work, fns, first, futs, lock, state, loop, abandoned))
        await _await_each(futs, first, len(fns), limit, lock, state, results)
    return results


async def run_limited(fn: Callable[[], Any], limit: float, abandoned: Callable[[Any], None] | None = None):
    """`fn()` under `limit` (see run_limited_many): its value, or what it raised, or CallTimeout."""
    [(ok, value)] = await run_limited_many([fn], limit, [abandoned] if abandoned else None)
    if not ok:
        raise value
    return value
