"""A launched command's output, passed on line by line until the command itself has exited, not until its pipe's
end: any process it started (a Ray worker, a relay, SGLang's scheduler) inherits the pipe and can hold it open long
after the command is gone, and a reader waiting for the end would wait with it.

    status = run_passing_output(["bash", "scripts/run_gsm8k_grpo.sh", ...], cwd=..., env=..., sinks=[sys.stdout, log])

Once the command has exited, what is still in the pipe is read for up to DRAIN_S seconds more; then the processes
that still hold the pipe open (Linux: found through /proc, by the pipe's inode: they can only have inherited it from
the command) are stopped (SIGTERM, then SIGKILL after STOP_S) and named in one line through `note`. Their output
after that point is not read.
"""

from __future__ import annotations

import codecs
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TextIO

DRAIN_S = 5.0  # after the command's exit: the last lines of its own output are in the pipe by then
STOP_S = 5.0  # SIGTERM to SIGKILL for a process still holding the pipe
POLL_S = 0.2


def pipe_holders(read_fd: int, proc_root: Path = Path("/proc")) -> list[int]:
    """The pids of other processes that have the pipe of `read_fd` open (either end), by its inode; [] where there
    is no /proc."""
    link = f"pipe:[{os.fstat(read_fd).st_ino}]"
    holders = []
    for entry in proc_root.iterdir() if proc_root.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if any(os.readlink(fd) == link for fd in (entry / "fd").iterdir()):
                holders.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return sorted(holders)


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    except OSError:
        return "?"


def stop(pids: Iterable[int], wait_s: float = STOP_S) -> None:
    """SIGTERM each, SIGKILL those still there after wait_s."""
    pids = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if _alive(pid)]
            time.sleep(0.1)
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"  # a zombie has let go of everything
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def run_passing_output(command: list[str], *, cwd, env: dict[str, str], sinks: list[TextIO],
                       note: Callable[[str], None], drain_s: float = DRAIN_S) -> int:
    """Run `command` with its stdout and stderr in one pipe, each line written to every sink as it comes; return its
    exit status once it has exited and its output is drained (module docstring)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    partial = ""

    def emit(text: str, final: bool = False) -> None:
        nonlocal partial
        *lines, partial = (partial + text).split("\n")
        if final and partial:
            lines, partial = [*lines, partial], ""
        for line in lines:
            for sink in sinks:
                sink.write(line + "\n")
                sink.flush()

    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        fd = proc.stdout.fileno()
        exited_at = None
        eof = False
        while not eof:
            readable, _, _ = select.select([fd], [], [], POLL_S)
            if readable:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    emit(decoder.decode(chunk))
                else:
                    eof = True  # every writer has closed it
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
            if exited_at is not None and time.monotonic() - exited_at > drain_s and not eof:
                break
        emit(decoder.decode(b"", final=True), final=True)
        if not eof:
            holders = pipe_holders(fd)
            if holders:
                note(f"the command exited {drain_s:.0f} s ago, but {len(holders)} process(es) it started still "
                     f"hold its output open: stopping them ({'; '.join(f'{p} {_name(p)}' for p in holders)})")
                stop(holders)
        return proc.wait()
