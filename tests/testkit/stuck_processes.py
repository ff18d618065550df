"""Real processes in the shapes a stalled run leaves, for the stall report's tests (py-spy reads them from outside):

    python -m testkit.stuck_processes tree READY_FILE

starts two children and writes their pids to READY_FILE (JSON) once both are in place:
- `blocked`: an event loop in a thread, as a Ray async actor runs one, held by a coroutine that makes a synchronous
  call (a tool that blocks its agent-loop worker): the loop thread sits in `hold_the_loop`;
- `waiting`: an event loop that waits for work and a thread waiting on an event: a bystander, as an idle rollout
  server or agent-loop worker is.
The parent waits for its children. Everything runs until killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def hold_the_loop() -> None:
    time.sleep(10**6)


async def a_tool_call() -> None:
    hold_the_loop()


def blocked(ready: threading.Event) -> None:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="AsyncIO Thread: default", daemon=True).start()
    asyncio.run_coroutine_threadsafe(a_tool_call(), loop)
    ready.set()
    threading.Event().wait()


def waiting(ready: threading.Event) -> None:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="AsyncIO Thread: default", daemon=True).start()
    ready.set()
    threading.Event().wait()


def child(mode: str, ready_file: str) -> None:
    ready = threading.Event()
    threading.Thread(target={"blocked": blocked, "waiting": waiting}[mode], args=(ready,), daemon=True).start()
    ready.wait()
    time.sleep(0.5)  # the loop thread is inside the call by now
    _publish(ready_file, str(os.getpid()))
    threading.Event().wait()


def _publish(path: str, text: str) -> None:
    """Whole or not at all: the test polls for the file."""
    Path(f"{path}.tmp").write_text(text)
    os.replace(f"{path}.tmp", path)


def tree(ready_file: str) -> None:
    folder = Path(ready_file).parent
    children = {mode: subprocess.Popen([sys.executable, "-m", __spec__.name, mode, str(folder / f"{mode}.pid")])
                for mode in ("blocked", "waiting")}
    while not all((folder / f"{mode}.pid").exists() for mode in children):
        time.sleep(0.05)
    _publish(ready_file, json.dumps({mode: proc.pid for mode, proc in children.items()}))
    for proc in children.values():
        proc.wait()


if __name__ == "__main__":
    if sys.argv[1] == "tree":
        tree(sys.argv[2])
    else:
        child(sys.argv[1], sys.argv[2])
