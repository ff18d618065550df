"""The CPU env's lock (requirements/test.txt): what it must say to be CPU-only wherever it is installed, and a check
that it resolves so from the public indexes with pip's own configuration ignored.

    python scripts/check_cpu_lock.py                 # offline: the lock's own lines (index, hashes, +cpu torch)
    python scripts/check_cpu_lock.py --resolve       # pip resolves it in a fresh venv: PyPI + PyTorch's CPU index
    python scripts/check_cpu_lock.py --resolve --torch-index file:///mirror/whl/cpu   # a copy of PyTorch's index

--resolve needs the network (pypi.org, download.pytorch.org); it installs nothing (pip's --dry-run --report) and
passes when pip would install exactly the lock's pins, none of them a CUDA or nvidia package, torch the +cpu build.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from recipes.constants import REPO_ROOT

LOCK = REPO_ROOT / "requirements" / "test.txt"
SOURCE = REPO_ROOT / "requirements" / "test.in"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI = "https://pypi.org/simple"
OPTIONS = [f"--extra-index-url {TORCH_INDEX}"]  # the lock's only option line: torch's +cpu wheels live there
GPU_PACKAGE = re.compile(r"^(nvidia-|cuda-|triton$|pytorch-triton)")
_PIN = re.compile(r"^([A-Za-z0-9][\w.\-]*)==(\S+)$")
_HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Lock:
    options: list[str] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)  # normalized name -> version
    hashes: dict[str, list[str]] = field(default_factory=dict)
    malformed: list[str] = field(default_factory=list)


def parse_lock(text: str) -> Lock:
    """The lock's requirement entries (`name==version \\` then `--hash=...` continuation lines) and option lines."""
    lock, entries, current = Lock(), [], ""
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not line:
            continue
        current += " " + line.rstrip("\\").strip()
        if not line.endswith("\\"):
            entries.append(current.strip())
            current = ""
    for entry in entries:
        if entry.startswith("-") and not entry.startswith("--hash"):
            lock.options.append(entry)
            continue
        requirement, *hashes = entry.split()
        pin = _PIN.match(requirement)
        if not pin:
            lock.malformed.append(requirement)
            continue
        name = normalize(pin.group(1))
        lock.pins[name], lock.hashes[name] = pin.group(2), hashes
    return lock


def lock_problems(lock: Lock, source_text: str) -> list[str]:
    """What makes the lock not CPU-only, not fully pinned or not hash-checked, one line each."""
    problems = [f"not a `name==version` pin: {r}" for r in lock.malformed]
    if lock.options != OPTIONS:
        problems.append(f"option lines {lock.options}, expected exactly {OPTIONS}")
    for name, hashes in lock.hashes.items():
        if not hashes or not all(_HASH.match(h) for h in hashes):
            problems.append(f"{name}: every entry needs --hash=sha256:<64 hex> lines (pip's hash mode), got {hashes}")
    problems += [f"{name}: a CUDA/GPU package in the CPU lock" for name in lock.pins if GPU_PACKAGE.match(name)]
    torch = lock.pins.get("torch", "")
    if not torch.endswith("+cpu"):
        problems.append(f"torch=={torch}: not the CPU build (+cpu); from PyPI a plain version is the CUDA build")
    asked = re.search(r"^torch==(\S+)", source_text, re.M)
    if not asked or asked.group(1) != torch:
        problems.append(f"requirements/test.in asks for {asked and asked.group(0)}, the lock pins torch=={torch}")
    return problems


def closure_problems(lock: Lock) -> list[str]:
    """Read from the environment this runs in, built from the lock: every installed distribution is the locked
    version, and every requirement of a locked distribution (its markers evaluated here) is met by a pin. A
    dependency the lock leaves out is one pip's hash mode refuses to install."""
    import sysconfig
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.version import Version

    problems = []
    # the env's own site-packages: not what else is on sys.path (ray puts its vendored colorama and psutil there)
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {normalize(d.metadata["Name"]): d for d in metadata.distributions(path=site)}
    for name, dist in sorted(installed.items()):
        if name in ("pip", normalize("gsm8k-tool-grpo")):
            continue
        if name not in lock.pins:
            problems.append(f"{name} {dist.version} is installed but not in the lock")
        elif Version(dist.version) != Version(lock.pins[name]):
            problems.append(f"{name} {dist.version} is installed, the lock pins {lock.pins[name]}")
    for name in sorted(lock.pins):
        dist = installed.get(name)
        for raw in (dist.requires or []) if dist else []:
            req = Requirement(raw)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            pinned = lock.pins.get(normalize(req.name))
            if pinned is None:
                problems.append(f"{name} needs {req}, which the lock does not pin")
            elif not req.specifier.contains(pinned, prereleases=True):
                problems.append(f"{name} needs {req}, the lock pins {pinned}")
    return problems


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return True
    try:
        socket.create_connection((parsed.hostname, parsed.port or 443), timeout=5).close()
    except OSError:
        return False
    return True


def resolve(lock_path: Path, python: str, torch_index: str | None) -> dict:
    """pip's dry-run report of installing the lock into a fresh venv, pip's configuration files and PIP_* variables
    ignored, PyPI the index (and the lock's own extra index, or torch_index in its place)."""
    with tempfile.TemporaryDirectory(prefix="cpu_lock_") as tmp:
        lock_text = lock_path.read_text()
        if torch_index:
            lock_text = lock_text.replace(TORCH_INDEX, torch_index)
        (Path(tmp) / "lock.txt").write_text(lock_text)
        subprocess.run([python, "-m", "venv", f"{tmp}/venv"], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env["PIP_CONFIG_FILE"] = os.devnull  # no config file at all, global ones included
        report = Path(tmp) / "report.json"
        pip = [f"{tmp}/venv/bin/python", "-m", "pip", "--isolated"]
        # today's pip, as a stranger's fresh venv would get it (it reads an index's metadata files, PEP 658)
        subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip", "--index-url", PYPI], env=env, check=True)
        # an index that cannot be reached costs pip's retries for every package: one try each instead
        retries = [] if _reachable(torch_index or TORCH_INDEX) else ["--retries", "1"]
        proc = subprocess.run([*pip, "install", *retries, "--dry-run",
                               "--ignore-installed", "--quiet", "--report", str(report), "--index-url", PYPI,
                               "-r", f"{tmp}/lock.txt"], env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not report.is_file():
            raise RuntimeError(f"pip could not resolve the lock:\n{proc.stderr.strip()}")
        return json.loads(report.read_text())


def summarize(report: dict, lock: Lock) -> tuple[list[str], str]:
    """(problems, one summary line) of pip's report against the lock."""
    installs = {normalize(i["metadata"]["name"]): i for i in report["install"]}
    unpinned = sorted(set(installs) - set(lock.pins))
    gpu = sorted(n for n in installs if GPU_PACKAGE.match(n))
    torch = installs.get("torch")
    torch_version = torch["metadata"]["version"] if torch else "none"
    torch_file = torch["download_info"]["url"].rsplit("/", 1)[-1] if torch else "-"
    problems = [f"pip would install {n}, which the lock does not pin" for n in unpinned]
    problems += [f"pip would install {n}, a CUDA/GPU package" for n in gpu]
    if not torch_version.endswith("+cpu"):
        problems.append(f"pip would install torch {torch_version} ({torch_file}), not the CPU build")
    line = (f"{len(installs)} packages, {len(unpinned)} not in the lock, {len(gpu)} CUDA/GPU packages; "
            f"torch {torch_version} from {torch_file}")
    return problems, line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lock", type=Path, default=LOCK)
    p.add_argument("--resolve", action="store_true", help="also resolve it with pip in a fresh venv (network)")
    p.add_argument("--python", default=sys.executable, help="the interpreter the venv is made from (--resolve)")
    p.add_argument("--torch-index", default=None, help=f"a copy of {TORCH_INDEX} to use in its place (--resolve)")
    args = p.parse_args(argv)

    lock = parse_lock(args.lock.read_text())
    problems = lock_problems(lock, SOURCE.read_text())
    hashed = sum(1 for h in lock.hashes.values() if h)
    print(f"[check_cpu_lock] {args.lock}: {len(lock.pins)} pins, {hashed} with hashes; option lines {lock.options}; "
          f"torch {lock.pins.get('torch')}")
    if args.resolve and not problems:
        try:
            report = resolve(args.lock, args.python, args.torch_index)
        except RuntimeError as err:
            print(f"[check_cpu_lock] error: {err}", file=sys.stderr)
            return 1
        more, line = summarize(report, lock)
        problems += more
        print(f"[check_cpu_lock] pip, its configuration ignored, would install: {line}")
    for problem in problems:
        print(f"[check_cpu_lock] problem: {problem}", file=sys.stderr)
    print(f"[check_cpu_lock] {'FAIL' if problems else 'ok'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
