"""Publish validation dumps while training runs: a watcher process beside verl's main_ppo.

The launcher starts `python -m recipes.results.publish --watch --stop_when_pid_exits <trainer pid>` in the
background. It publishes each `<step>.jsonl` once the file has stopped changing, retries what failed at
the next poll, does one last pass when the trainer is gone, and never raises: whatever goes wrong is
logged, and training never waits on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from recipes.results.weave_publish import DumpError, Publisher, describe, read_step_dump, step_files

logger = logging.getLogger(__name__)


def pid_alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (an exited child its parent has not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def watch(folder: str | Path, make_publisher: Callable[[], Publisher], *, stop_pid: int | None = None,
          poll_s: float = 30.0, stop: threading.Event | None = None) -> int:
    """Publish each `<step>.jsonl` once it has stopped changing for one poll, until `stop_pid` has exited
    (then one last pass) or `stop` is set (SIGTERM / SIGINT when run from the command line). Never raises:
    failures are logged and a failed publish is retried at the next poll. Returns how many steps could not
    be published in the end (bad dumps, or the last attempt failed)."""
    folder = Path(folder)
    stop = stop or threading.Event()
    seen: dict[Path, tuple[int, int]] = {}  # file signature at the previous poll
    settled: dict[Path, tuple[int, int]] = {}  # handled at this signature: published, skipped or bad
    failed: set[Path] = set()
    publisher: Publisher | None = None
    while True:
        # the writer has exited (or we were told to stop): every file is as complete as it will get
        last_pass = (stop_pid is not None and not pid_alive(stop_pid)) or stop.is_set()
        for path in step_files(folder) if folder.is_dir() else []:
            try:
                stat = path.stat()
            except OSError:
                continue
            signature = (stat.st_size, stat.st_mtime_ns)
            if settled.get(path) == signature:
                continue
            # verl's dump thread writes the file in one go; one unchanged poll means it is done
            unchanged = seen.get(path) == signature
            seen[path] = signature
            if not (unchanged or last_pass):
                continue
            try:
                dump = read_step_dump(path)
            except (DumpError, OSError) as err:
                logger.error("not publishing %s: %s", path.name, err)
                settled[path] = signature
                failed.add(path)
                continue
            try:
                publisher = publisher or make_publisher()
                logger.info(describe(publisher.publish(dump)))
                settled[path] = signature
                failed.discard(path)
            except Exception as err:  # W&B down, bad credentials...: training goes on, retry next poll
                logger.error("publishing step %s failed (%s: %s); retrying in %.0f s", dump.step,
                             type(err).__name__, err, poll_s)
                failed.add(path)
        if last_pass:
            if failed:
                logger.error("stopping; not published: %s", ", ".join(sorted(p.name for p in failed)))
            else:
                logger.info("stopping; every dump in %s is in Weave", folder)
            return len(failed)
        stop.wait(poll_s)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An Event set by SIGTERM/SIGINT while inside, so a watcher told to stop does one last pass and exits.
    Only the main thread may handle signals; elsewhere the Event is just never set by one."""
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
