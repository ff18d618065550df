"""Each process's GPU memory while a step runs, from nvidia-smi once a second, by role: SGLang (its scheduler titles
itself `sglang::scheduler...`), the training worker (verl's `ray::WorkerDict...`, actor and reference) and the
rest; and the GPU's whole use. What the driver reports, allocator caches and CUDA contexts included: more than
torch's own peak (verl's `actor/perf/max_memory_allocated_gb`), which the report gives beside it."""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

ROLES = (("sglang::", "SGLang"), ("ray::WorkerDict", "training worker"))
EVERY_S = 1.0


def role_of(cmdline: str) -> str:
    return next((role for prefix, role in ROLES if cmdline.startswith(prefix)), "other")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _query(smi: str, what: str) -> list[list[str]]:
    out = subprocess.run([smi, f"--query-{what}", "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         timeout=20)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or f"exit {out.returncode}")
    return [[cell.strip() for cell in line.split(",")] for line in out.stdout.splitlines() if line.strip()]


def gpu_name() -> str | None:
    """The first GPU's name, by nvidia-smi; None without one."""
    smi = shutil.which("nvidia-smi")
    try:
        rows = _query(smi, "gpu=name") if smi else []
    except (OSError, RuntimeError, subprocess.SubprocessError):
        rows = []
    return rows[0][0] if rows and rows[0] else None


class Sampler:
    """start(), then stop(): peaks in MiB by role ("GPU" for the whole first GPU), or why there are none."""

    def __init__(self, smi: str | None = None) -> None:
        self.smi = smi or shutil.which("nvidia-smi")
        self.peaks: dict[str, int] = {}
        self.unavailable = "" if self.smi else "no nvidia-smi on PATH (no GPU)"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-memory", daemon=True)

    def start(self) -> Sampler:
        if self.smi:
            self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        return dict(self.peaks)

    def sample(self) -> None:
        used: dict[str, int] = {}
        for pid, mib in _query(self.smi, "compute-apps=pid,used_memory"):
            if pid.isdigit() and mib.isdigit():
                role = role_of(_cmdline(int(pid)))
                used[role] = used.get(role, 0) + int(mib)
        rows = _query(self.smi, "gpu=memory.used")
        if rows and rows[0][0].isdigit():
            used["GPU"] = int(rows[0][0])
        for role, mib in used.items():
            self.peaks[role] = max(self.peaks.get(role, 0), mib)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except (OSError, RuntimeError, subprocess.SubprocessError) as err:
                self.unavailable = f"nvidia-smi failed: {err}"
                return
            self._stop.wait(EVERY_S)
