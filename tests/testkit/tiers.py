"""The suite's tiers (pyproject.toml's markers, one per test file) and the guard that makes `unit` a fact, not a label.

- unit: in-process logic. No subprocess, no Ray, no socket (no network, no loopback server): the edit loop.
- integration: real processes, Ray clusters, SLURM, loopback servers.
- e2e: verl's main_ppo launched end to end (on the CPU stand-ins).
- repo: the repository's own checks (docs, layout, layers, lint, the lock).
- bench: a benchmark's own check (its --quick run, what it accounts for): not in the suite (pyproject.toml's addopts
  leave it out), `-m bench` runs them.

tests/conftest.py calls `file_tier` on every collected file (a file without exactly one tier fails the collection)
and runs every `unit` test's setup and call inside `unit_guard`: starting a process, opening a socket or starting
Ray there fails the test with what it did, even where the code under test catches the error."""

from __future__ import annotations

import _posixsubprocess
import ast
import contextlib
import functools
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import urllib3  # noqa: F401  its import binds a socket (urllib3.util.connection probes IPv6): not a test's doing

TIERS = ("unit", "integration", "e2e", "repo", "bench")


class TierViolation(RuntimeError):
    """A `unit` test did what only an `integration` (or `e2e`) test may."""


def file_tier(module) -> str:
    """The one tier a test module declares in its module-level `pytestmark`; ValueError saying what is wrong."""
    marks = getattr(module, "pytestmark", [])
    marks = marks if isinstance(marks, list | tuple) else [marks]
    tiers = [mark.name for mark in marks if getattr(mark, "name", None) in TIERS]
    if len(tiers) != 1:
        found = f"{len(tiers)} ({', '.join(tiers)})" if tiers else "none"
        raise ValueError(f"a test file declares exactly one tier in its module-level pytestmark, one of {TIERS} "
                         f"(e.g. `pytestmark = pytest.mark.unit`); found {found}")
    return tiers[0]


@functools.cache
def declared_tier(path: Path) -> str | None:
    """The tier a test file's source declares, read without importing it (pytest-xdist's controller schedules the
    files before any worker has imported them); None where it declares none."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            named = [n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute) and n.attr in TIERS]
            return named[0] if len(named) == 1 else None
    return None


# what a unit test may not do: (owner, attribute, what it is)
_PROCESS = [(subprocess.Popen, "_execute_child", "starts a subprocess"),
            (_posixsubprocess, "fork_exec", "starts a subprocess")]  # multiprocessing's spawn
_PROCESS += [(os, name, "starts a process") for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")
             if hasattr(os, name)]
_SOCKET = [(socket.socket, name, "opens a socket") for name in ("connect", "connect_ex", "bind", "listen", "sendto")]


@contextlib.contextmanager
def unit_guard(test: str) -> Iterator[list[str]]:
    """Inside: what the test's own thread (or a thread it starts) does against the unit tier raises TierViolation and
    is listed in the yielded list, which the caller turns into the test's failure. Threads already running when the
    guard starts (an earlier test's server, pytest-xdist's) pass through: they are not this test's doing."""
    seen: list[str] = []
    before = set(threading.enumerate()) - {threading.current_thread()}  # objects: an ident can be reused

    def refuse(what: str, original):
        def guarded(*args, **kwargs):
            if threading.current_thread() in before:
                return original(*args, **kwargs)
            message = (f"{test} is a unit test but {what} ({_caller()}): mark its file `integration` or move the test "
                       "to one that is")
            seen.append(message)
            raise TierViolation(message)
        return guarded

    patched = []  # (owner, name, what it held itself: None where it inherited the attribute)
    ray = sys.modules.get("ray")
    targets = [*_PROCESS, *_SOCKET, *([(ray, "init", "starts Ray")] if ray is not None else [])]
    try:
        for owner, name, what in targets:
            patched.append((owner, name, vars(owner).get(name)))
            setattr(owner, name, refuse(what, getattr(owner, name)))
        ray_was_on = _ray_on()
        yield seen
        if _ray_on() and not ray_was_on:
            seen.append(f"{test} is a unit test but started Ray: mark its file `integration`")
    finally:
        for owner, name, own in reversed(patched):
            if own is None:
                delattr(owner, name)
            else:
                setattr(owner, name, own)


def _caller() -> str:
    """Where the guarded call came from: the innermost frame outside this module and the standard library's."""
    import traceback

    stdlib = os.path.dirname(os.__file__)
    for frame in reversed(traceback.extract_stack()[:-3]):
        if frame.filename != __file__ and not frame.filename.startswith(stdlib):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def _ray_on() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())
