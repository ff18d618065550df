"""One node's processes of a run, sampled over a window: what a stall report holds for that node.

Which processes: `roots` and all their descendants (on the launcher's node: main_ppo's tree; on a node of a Ray
cluster: the node's raylet's, which started every worker there). For each, over the window: its state at each
sample (a stopped process is evidence in itself), its CPU use across the window, its memory, and for each Python
process its threads' stacks at each sample, taken from outside by py-spy (`py-spy dump --nonblocking`: the
process is read, not paused). nvidia-smi's GPU utilization and memory at each sample, where it exists. Nothing
here touches a GPU itself (no torch, no CUDA): standard library, psutil and two external programs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

WINDOW_S = 60.0  # CPU use is measured across it, stacks taken SAMPLES times within it
SAMPLES = 5
DUMP_TIMEOUT_S = 20.0
PARALLEL_DUMPS = 4
GONE = "gone"  # a sample's state for a process that ended before it (recipes/watchdog/culprit.py reads it)
GPU_QUERY = ["--query-gpu=index,name,utilization.gpu,memory.used,memory.total", "--format=csv,noheader"]
GPU_APPS_QUERY = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]


def py_spy() -> str | None:
    """py-spy beside this interpreter (a venv not activated), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def raylet_pid() -> int | None:
    """The raylet above this process (a Ray worker): it started every worker of its node."""
    try:
        for parent in psutil.Process().parents():
            if parent.name() == "raylet":
                return parent.pid
    except psutil.Error:
        pass
    return None


def launcher_side(launcher_pid: int, main_ppo_pid: int) -> set[int]:
    """The launcher and what it started besides main_ppo's tree (relays, the evaluation watcher, this sampling): on
    a Ray job's head node they too descend from the raylet, and are no part of training."""
    try:
        launcher = psutil.Process(launcher_pid)
        side = {launcher_pid} | {p.pid for p in launcher.children(recursive=True)}
    except psutil.Error:
        return set()
    try:
        main_ppo = psutil.Process(main_ppo_pid)
        side -= {main_ppo_pid} | {p.pid for p in main_ppo.children(recursive=True)}
    except psutil.Error:
        pass
    return side


def tree(roots: list[int], exclude: set[int]) -> dict[int, psutil.Process]:
    """`roots` and their descendants, less `exclude`, this process (the sampler) and py-spy itself."""
    exclude = set(exclude) | {os.getpid()}
    found: dict[int, psutil.Process] = {}
    for pid in roots:
        try:
            root = psutil.Process(pid)
            members = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        found.update({p.pid: p for p in members if p.pid not in exclude and not _is_py_spy(p)})
    return found


def _is_py_spy(proc: psutil.Process) -> bool:
    try:
        return proc.name() == "py-spy"
    except psutil.Error:
        return True


def sample_node(roots: list[int], exclude: set[int] | frozenset = frozenset(), window_s: float = WINDOW_S,
                samples: int = SAMPLES) -> dict:
    """The node's record (JSON-ready): `processes` with states, CPU, memory and stacks; `gpu`; `errors`."""
    spy = py_spy()
    errors = [] if spy else ["py-spy not found on this node: no stacks (pip install py-spy; requirements/gpu.txt "
                             "has it)"]
    procs = tree(roots, set(exclude))
    records = {pid: _describe(p) for pid, p in procs.items()}
    cpu_start = {pid: _cpu_s(p) for pid, p in procs.items()}
    start = time.monotonic()
    gpu = []
    with ThreadPoolExecutor(PARALLEL_DUMPS) as pool:
        for i in range(max(1, samples)):
            _sleep_until(start + i * window_s / max(1, samples - 1))
            offset = round(time.monotonic() - start, 1)
            for pid, proc in tree(roots, set(exclude)).items():  # a process started meanwhile joins from here
                if pid not in procs:
                    procs[pid], records[pid], cpu_start[pid] = proc, _describe(proc), _cpu_s(proc)
            states = {pid: _state(p) for pid, p in procs.items()}
            pids = list(procs)
            dumps = dict(zip(pids, pool.map(lambda pid: _dump(spy, pid, records[pid]["python"]), pids), strict=True))
            for pid, record in records.items():
                record["samples"].append({"t": offset, "state": states[pid], **dumps[pid]})
            gpu.append({"t": offset, **nvidia_smi()})
    elapsed = max(time.monotonic() - start, 1e-6)
    for pid, proc in procs.items():
        end, begin = _cpu_s(proc), cpu_start[pid]
        records[pid]["cpu_percent"] = None if end is None or begin is None else round(100 * (end - begin) / elapsed, 1)
        records[pid]["rss_mb"] = _rss_mb(proc)
    return {"host": socket.gethostname(), "ip": _ip(), "window_s": round(elapsed, 1), "samples": samples,
            "processes": sorted(records.values(), key=lambda r: r["pid"]), "gpu": gpu, "errors": errors}


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _describe(proc: psutil.Process) -> dict:
    try:
        with proc.oneshot():
            command = " ".join(proc.cmdline()) or proc.name()
            ppid, created = proc.ppid(), proc.create_time()
            exe = proc.exe()
    except psutil.Error:
        command, ppid, created, exe = "?", None, None, ""
    return {"pid": proc.pid, "ppid": ppid, "command": command[:300], "create_time": created,
            "python": Path(exe).name.startswith("python"), "samples": []}


def _state(proc: psutil.Process) -> str:
    try:
        return proc.status()
    except psutil.NoSuchProcess:
        return GONE
    except psutil.Error:
        return "?"


def _cpu_s(proc: psutil.Process) -> float | None:
    try:
        times = proc.cpu_times()
        return times.user + times.system
    except psutil.Error:
        return None


def _rss_mb(proc: psutil.Process) -> float | None:
    try:
        return round(proc.memory_info().rss / 2**20, 1)
    except psutil.Error:
        return None


def _dump(spy: str | None, pid: int, python: bool) -> dict:
    """{"threads": [...]} (innermost frame first), or {"error": ...}; {} for a process that is not Python."""
    if not python or spy is None:
        return {}
    try:
        proc = subprocess.run([spy, "dump", "--pid", str(pid), "--nonblocking", "--json"], capture_output=True,
                              text=True, timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"py-spy did not answer in {DUMP_TIMEOUT_S:g} s"}
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": lines[0][:300] if lines else f"py-spy exited {proc.returncode}"}
    try:
        threads = json.loads(proc.stdout)
    except ValueError:
        return {"error": "py-spy printed no JSON"}
    return {"threads": [{"name": t.get("thread_name") or "", "tid": t.get("os_thread_id"),
                         "active": bool(t.get("active")),
                         "frames": [[f["name"], f["filename"], f["line"]] for f in t.get("frames", [])]}
                        for t in threads]}


def nvidia_smi() -> dict:
    """{"gpus": [...csv lines], "apps": [...]} where nvidia-smi exists, else {}."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    out = {}
    for key, query in (("gpus", GPU_QUERY), ("apps", GPU_APPS_QUERY)):
        try:
            proc = subprocess.run([smi, *query], capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
            out[key] = [line.strip() for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 \
                else [f"nvidia-smi failed: {(proc.stderr or proc.stdout).strip()[:200]}"]
        except (OSError, subprocess.TimeoutExpired) as err:
            out[key] = [f"nvidia-smi failed: {err}"]
    return out


def _ip() -> str:
    """The node's address as Ray knows it, in a Ray worker; the host's name elsewhere (Ray is not imported here)."""
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:
        pass
    return socket.gethostname()
