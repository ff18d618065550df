"""A tool's CPU-bound work off the agent loop's event loop, in a process its deadline can kill.

verl awaits `tool.execute` in the agent-loop worker's event loop (verl/experimental/agent_loop/tool_agent_loop.py
`_call_tool`), beside every other trajectory of that worker. Work done synchronously inside `execute` never
yields: the recipe's per-call bound (recipes/gsm8k/tool_timeout.py, `asyncio.wait` with `tool_timeout_s`) cannot
fire, and every trajectory of the worker waits for it. Work sent here runs in a child process instead; awaiting it
yields the loop, and when its deadline passes (the pool's own `timeout_s`, or the agent loop cancelling the call
at `tool_timeout_s`) the child is killed, whatever it was doing, and a fresh one serves the next call.

`pool_for("tools.arithmetic:calculate")` is this process's pool for that function: up to MAX_PROCESSES children,
each started when a call finds none idle and kept for the next (starting one costs tens of milliseconds, a call
to a started one a fraction of a millisecond), one call at a time each. Arguments and answers cross as one JSON
line each way, never pickle: the child evaluates a model's text and is not trusted to send code. An exception whose
class is one of the pool's `refusals` comes back as `WorkRefused` (a message for the model); any other, a child that
dies, or an answer that is not one JSON line of at most MAX_ANSWER_BYTES, as `WorkFailed`.

A child is `python -m tools.process_pool <module:function>`, importing what its parent can (the parent's sys.path):
only the work's module, then at most MEMORY_LIMIT_BYTES of address space; it dies with its parent (its stdin closes,
and PR_SET_PDEATHSIG on Linux).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import traceback
from typing import Any

logger = logging.getLogger(__name__)

MAX_PROCESSES = 4  # children per pool: calls take microseconds, so more only wait for a stuck one's deadline
MAX_REQUEST_BYTES = 60_000  # one request fits in an empty pipe (64 KiB on Linux): writing it never blocks
MAX_ANSWER_BYTES = 1 << 20
MEMORY_LIMIT_BYTES = 1 << 30  # each child's address space, once its work's module is imported


class WorkFailed(RuntimeError):
    """The work raised an exception that is not a refusal, its process died, or its answer was not readable."""


class WorkTimedOut(WorkFailed):
    """The work ran past its deadline: its process was killed."""


class WorkRefused(Exception):
    """The work raised one of the pool's refusals; the message is the work's."""


class _Child:
    """One child process and the unread part of its answers."""

    def __init__(self, target: str, refusals: frozenset[str]) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        argv = [sys.executable, "-m", __name__, target, str(os.getpid()), ",".join(sorted(refusals))]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True)
        self.out = self.process.stdout.fileno()
        os.set_blocking(self.out, False)
        self.unread = b""

    def alive(self) -> bool:
        return self.process.poll() is None

    async def ask(self, request: bytes) -> bytes:
        try:
            os.write(self.process.stdin.fileno(), request)
        except OSError as err:
            raise WorkFailed(f"the work process could not be written to ({err})") from None
        loop = asyncio.get_running_loop()
        while b"\n" not in self.unread:
            readable = loop.create_future()
            loop.add_reader(self.out, _resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(self.out)
            try:
                chunk = os.read(self.out, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                raise WorkFailed(f"the work process exited ({_exit_status(self.process)})")
            self.unread += chunk
            if len(self.unread) > MAX_ANSWER_BYTES:
                raise WorkFailed(f"the work's answer is longer than {MAX_ANSWER_BYTES} bytes")
        line, _, self.unread = self.unread.partition(b"\n")
        return line

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1)  # SIGKILL: the kernel reaps it at once


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _exit_status(process: subprocess.Popen) -> str:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=1)
    code = process.returncode
    if code is None:
        return "still running"
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


class KillablePool:
    def __init__(self, target: str, refusals: tuple[str, ...] = (), max_processes: int = MAX_PROCESSES) -> None:
        self.target = target  # "module:function"
        self.refusals = frozenset(refusals)  # exception class names answered as WorkRefused
        self.max_processes = max_processes
        self.idle: list[_Child] = []
        self.busy = 0
        self.waiting: list[asyncio.Future] = []
        self.killed = 0  # children killed at a deadline or on a failure (for tests and benchmarks)

    async def run(self, *args: Any, timeout_s: float | None = None) -> Any:
        """The work's result for these (JSON) arguments. Cancelling this call, or `timeout_s` passing, kills the
        child doing it (WorkTimedOut for the latter)."""
        request = (json.dumps(list(args)) + "\n").encode()
        if len(request) > MAX_REQUEST_BYTES:
            raise WorkFailed(f"the work's arguments are longer than {MAX_REQUEST_BYTES} bytes")
        child = await self._take()
        try:
            line = await asyncio.wait_for(child.ask(request), timeout_s)
        except BaseException as err:  # a deadline, a cancel, a dead child: that child is done for
            self._lose(child)
            if isinstance(err, TimeoutError):
                raise WorkTimedOut(f"the work ran past {timeout_s:g} s and was stopped") from None
            raise
        self._give_back(child)
        return self._answer(line)

    def _answer(self, line: bytes) -> Any:
        try:
            answer = json.loads(line)
            if "value" in answer:
                return answer["value"]
            raised, message = str(answer["raised"]), str(answer["message"])
        except (ValueError, TypeError, KeyError):
            raise WorkFailed(f"the work process answered something unreadable: {line[:200]!r}") from None
        if raised in self.refusals:
            raise WorkRefused(message)
        raise WorkFailed(f"{raised}: {message}")

    async def _take(self) -> _Child:
        while self.idle:
            child = self.idle.pop()
            if child.alive():
                self.busy += 1
                return child
            child.kill()  # died while idle (its parent thread ended, say): reaped, replaced
        if self.busy < self.max_processes:
            self.busy += 1
            try:
                return _Child(self.target, self.refusals)
            except OSError as err:  # no process to be had (a process limit, no memory): this call fails, not the loop
                self.busy -= 1
                raise WorkFailed(f"no work process could be started: {err}") from None
        waiter = asyncio.get_running_loop().create_future()
        self.waiting.append(waiter)
        try:
            return await waiter  # a child handed over by _give_back, already counted busy
        except BaseException:
            if waiter in self.waiting:
                self.waiting.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self._give_back(waiter.result())
            raise

    def _give_back(self, child: _Child) -> None:
        while self.waiting:
            waiter = self.waiting.pop(0)
            if not waiter.done():
                waiter.set_result(child)
                return
        self.busy -= 1
        self.idle.append(child)

    def _lose(self, child: _Child) -> None:
        child.kill()
        self.killed += 1
        self.busy -= 1
        while self.waiting:  # its slot is free: the next waiter starts a child of its own
            waiter = self.waiting.pop(0)
            if not waiter.done():
                self.busy += 1
                try:
                    waiter.set_result(_Child(self.target, self.refusals))
                except BaseException as err:
                    self.busy -= 1
                    waiter.set_exception(WorkFailed(f"no work process could be started: {err}"))
                return

    def close(self) -> None:
        for child in self.idle:
            child.kill()
        self.idle.clear()


_POOLS: dict[str, KillablePool] = {}


def pool_for(target: str, refusals: tuple[str, ...] = ()) -> KillablePool:
    """This process's pool for `target` ("module:function")."""
    if target not in _POOLS:
        _POOLS[target] = KillablePool(target, refusals)
    return _POOLS[target]


# ---- the child ------------------------------------------------------------------------------------------------


def _die_with(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before that took effect
        os._exit(0)


def _serve(target: str, refusals: frozenset[str]) -> None:
    answers = os.fdopen(os.dup(1), "w")  # the protocol's own stdout: what the work prints goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    module, _, name = target.partition(":")
    work = getattr(importlib.import_module(module), name)
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    for line in sys.stdin.buffer:
        try:
            answer = {"value": work(*json.loads(line))}
        except Exception as err:
            if type(err).__name__ not in refusals:  # a bug of the work's: its traceback in the worker's log
                traceback.print_exc()
            answer = {"raised": type(err).__name__, "message": str(err)}
        try:
            reply = json.dumps(answer)
        except (TypeError, ValueError) as err:
            reply = json.dumps({"raised": type(err).__name__, "message": f"the work's result is not JSON: {err}"})
        answers.write(reply + "\n")
        answers.flush()


if __name__ == "__main__":
    _die_with(int(sys.argv[2]))
    _serve(sys.argv[1], frozenset(filter(None, sys.argv[3].split(","))))
