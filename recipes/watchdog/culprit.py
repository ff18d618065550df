"""Reading the samples of a stalled run: the likely culprit, and the phase the trainer is in.

A suspect is a process, or one thread of it, that stayed put over the whole window. Ranked, best first:
1. a process stopped in every sample (state T: SIGSTOP, a debugger): nothing in it can run;
2. a thread whose stack is the same in every sample and whose innermost frame is the run's own code (the recipe, a
   tool, a reward function: not a library): it sits in that line (a blocking call, a sleep, a lock);
3. a thread busy in the same own-code function in every sample (a loop that never ends);
4. a thread running (on a CPU) in the same library frame in every sample (a kernel, a spin);
5. a thread with own code on its stack, blocked in the same library call in every sample (a socket read, a
   ray.get), other than the standard library's ways of waiting for its own program (locks, events, queues,
   select, a child process);
6. a thread waiting in a collective (torch.distributed) in every sample: it waits for a peer, so it is the
   culprit only when nothing above is found.
"Every sample" counts the samples py-spy could read (a dump can fail while a process runs; two are the least to
judge by); a process gone by the last sample is no suspect. Ties go to a process that is executing a Ray task (its
title `ray::Class.method`) and whose stack its peers (same class) do not share. Everything else (an event loop
waiting in select, a Ray worker idle in its main loop, a thread waiting on a lock or a queue) is a bystander.

The phase: where the trainer's loop (`RayPPOTrainer.fit`, in Ray's TaskRunner actor) is, from its stack in the
last sample (the innermost frame of verl's trainer, and the source line it is on), refined by the culprit's stack (a
tool call, the reward scored in the agent loop).
"""

from __future__ import annotations

import linecache
import re
from collections import Counter
from dataclasses import dataclass, field

from recipes.constants import REPO_ROOT
from recipes.watchdog.sample import GONE

_STDLIB = re.compile(r"/lib/python3\.\d+/(?!site-packages/|dist-packages/)")
_LIBRARY_MARKS = ("/site-packages/", "/dist-packages/")
_PEER_WAIT = ("/torch/distributed/",)
# the standard library's ways of waiting for another thread or process of the program: a thread waiting there
# (a lock, an event, a queue, select, a child) is a bystander, its own code around it notwithstanding
_SYNC_WAITS = ("/threading.py", "/queue.py", "/selectors.py", "/asyncio/", "/concurrent/futures/", "/subprocess.py",
               "/multiprocessing/")
STOPPED = ("stopped", "tracing-stop")

# the trainer loop's methods that hold the others (a validation generates; a checkpoint follows an update)
_CONTAINING = (("_validate", "validation"), ("_save_checkpoint", "checkpoint"), ("_load_checkpoint", "checkpoint load"),
               ("init_workers", "start-up (workers)"))
# then, in the innermost frame of verl's trainer (its function, or the line it is on: verl runs the rollout manager's
# coroutines to completion from `fit` itself, so a rollout shows as fit's line, not as a frame of its own)
_PHASES = (("update_weights", "weight sync"), ("_update_actor", "update"), ("_update_critic", "update (critic)"),
           ("_compute_old_log_prob", "old log-probs"), ("_compute_ref_log_prob", "reference log-probs"),
           ("_compute_reward_colocate", "reward"), ("extract_reward", "reward"), ("generate_sequences", "rollout"),
           ("sleep_replicas", "rollout"), ("wake_up_replicas", "rollout"))
_TRAINER_FILE = "verl/trainer/ppo/ray_trainer.py"
# a function or a module on the culprit's stack -> the part of the rollout it is in
_ROLLOUT_PARTS = (("score_trajectory", "the reward, scored in the agent loop"), ("_call_tool", "a tool call"))


@dataclass
class Suspect:
    rank: int  # 1 is the strongest (the list above)
    node: str
    pid: int
    command: str
    why: str
    thread: str | None = None
    stack: list = field(default_factory=list)  # innermost first: [function, file, line]
    busy: bool = False
    in_task: bool = False
    unique: bool = True

    def key(self) -> tuple:
        return (self.rank, not self.in_task, not self.unique, self.pid)

    def where(self) -> str:
        thread = f", thread {self.thread!r}" if self.thread else ""
        return f"pid {self.pid} `{_title(self.command)}` on {self.node}{thread}: {self.why}"


def frame_text(frame: list) -> str:
    name, filename, line = frame
    return f"{name} ({short_path(filename)}:{line})"


def short_path(filename: str) -> str:
    for mark in _LIBRARY_MARKS:
        if mark in filename:
            return filename.split(mark, 1)[1]
    if filename.startswith(str(REPO_ROOT) + "/"):
        return filename[len(str(REPO_ROOT)) + 1:]
    match = re.search(r"/_ray_pkg_[0-9a-f]+/(.*)$", filename)  # the repo as a Ray job's working dir
    if match:
        return match.group(1)
    return filename


def is_library(filename: str) -> bool:
    return filename.startswith("<") or any(mark in filename for mark in _LIBRARY_MARKS) or \
        bool(_STDLIB.search(filename))


def suspects(nodes: list[dict]) -> list[Suspect]:
    """Every suspect of every node, strongest first."""
    found: list[Suspect] = []
    for node in nodes:
        label = node_label(node)
        for proc in node["processes"]:
            found.extend(_suspects_in(label, proc))
    _mark_unique(found)
    return sorted(found, key=Suspect.key)


def node_label(node: dict) -> str:
    return node.get("label") or f"{node.get('host')} ({node.get('ip')})"


def _suspects_in(node: str, proc: dict) -> list[Suspect]:
    samples = proc["samples"]
    if len(samples) < 2:
        return []
    base = {"node": node, "pid": proc["pid"], "command": proc["command"], "in_task": _in_task(proc["command"])}
    if all(s.get("state") in STOPPED for s in samples):
        return [Suspect(rank=1, why=f"stopped in every sample (state {samples[0]['state']}: SIGSTOP or a debugger)",
                        **base)]
    if samples[-1].get("state") == GONE:
        return []  # it ended within the window: whatever held it no longer does
    # a dump that failed (py-spy reading a process while it runs can miss) leaves the others to judge by
    samples = [s for s in samples if "threads" in s]
    if len(samples) < 2:
        return []
    found = []
    for stacks in _threads(samples).values():
        if len(stacks) < len(samples):
            continue  # a thread that came or went within the window
        name = stacks[0][0]
        frames = [stack for _, stack, _ in stacks]
        active = [act for _, _, act in stacks]
        suspect = _judge(frames, active)
        if suspect is not None:
            rank, why, stack = suspect
            found.append(Suspect(rank=rank, why=why, thread=name, stack=stack, busy=all(active), **base))
    return found


def _judge(frames: list[list], active: list[bool]) -> tuple[int, str, list] | None:
    first = frames[0]
    if not first:
        return None
    same = all(stack == first for stack in frames)
    leaf = first[0]
    own = [f for f in first if not is_library(f[1])]
    n = len(frames)
    if same and not is_library(leaf[1]):
        return 2, f"every sample ({n}) at {frame_text(leaf)}", first
    if not same:
        leaves = {stack[0][0] if stack and not is_library(stack[0][1]) else None for stack in frames}
        if len(leaves) == 1 and None not in leaves and sum(active) * 2 >= n:
            return 3, f"busy in {frame_text(first[0])} in every sample ({n})", first
        return None
    if any(mark in leaf[1] for mark in _PEER_WAIT):
        return 6, f"every sample ({n}) waiting for a peer in {frame_text(leaf)}", first
    if all(active):
        return 4, f"running in {frame_text(leaf)} in every sample ({n})", first
    if own and not any(mark in leaf[1] for mark in _SYNC_WAITS):
        return 5, f"every sample ({n}) in {frame_text(own[0])}, blocked in {frame_text(leaf)}", first
    return None


def _threads(samples: list[dict]) -> dict:
    """thread id -> [(name, frames, active)] across the samples."""
    by_thread: dict = {}
    for sample in samples:
        for thread in sample["threads"]:
            by_thread.setdefault(thread["tid"], []).append((thread["name"], thread["frames"], thread["active"]))
    return by_thread


def _in_task(command: str) -> bool:
    """Ray titles a worker `ray::Class.method` while it executes that method (`ray::Class` when idle)."""
    title = _title(command)
    return title.startswith("ray::") and "." in title[5:] and "IDLE" not in title


def _title(command: str) -> str:
    return command.split(" ")[0] if command.startswith("ray::") else command[:120]


def _role(command: str) -> str:
    return _title(command).split(".")[0]


def _mark_unique(found: list[Suspect]) -> None:
    """A suspect whose innermost frame other processes of the same role share is less telling than one alone."""
    counts = Counter((_role(s.command), tuple(s.stack[0]) if s.stack else s.why) for s in found)
    for s in found:
        s.unique = counts[(_role(s.command), tuple(s.stack[0]) if s.stack else s.why)] == 1


def trainer_phase(nodes: list[dict]) -> str:
    """Where the trainer's loop is in the last sample; 'start-up' before the loop exists."""
    stack = _trainer_stack(nodes)
    if stack is None:
        return "start-up (no trainer loop yet)"
    frames = [frame for frame in stack if frame[1].endswith(_TRAINER_FILE)]  # innermost first
    names = {_name(frame) for frame in frames}
    for name, phase in _CONTAINING:
        if name in names:
            return phase
    innermost = f"{_name(frames[0])} {linecache.getline(frames[0][1], frames[0][2])}" if frames else ""
    return next((phase for key, phase in _PHASES if key in innermost),
                "between phases (advantages, metrics, dumps)" if "fit" in names else "start-up")


def _name(frame: list) -> str:
    return frame[0].rsplit(".", 1)[-1]


def _trainer_stack(nodes: list[dict]) -> list | None:
    for node in nodes:
        for proc in node["processes"]:
            last = proc["samples"][-1] if proc["samples"] else {}
            for thread in last.get("threads", []):
                if any(frame[1].endswith(_TRAINER_FILE) for frame in thread["frames"]):
                    return thread["frames"]
    return None


def phase_of(nodes: list[dict], culprit: Suspect | None) -> str:
    """The trainer's phase, with the part of the rollout the culprit is in when that says more."""
    phase = trainer_phase(nodes)
    if culprit is not None and phase in ("rollout", "validation"):
        # a function's own name and, for a closure (`score_trajectory.<locals>.<lambda>`), the one it is made in
        names = {part for frame in culprit.stack for part in (_name(frame), frame[0].split(".<locals>", 1)[0])}
        part = next((what for name, what in _ROLLOUT_PARTS if name in names), None)
        if part:
            return f"{phase} ({part})"
    return phase
