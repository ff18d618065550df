"""Is this the GPU env the recipe locks? The NVIDIA driver, the installed verl / sglang / transformers / torch
against requirements/gpu.txt, and an HF attention implementation that is actually installed.

The checks are pure functions of the lock path, an installed-version lookup and nvidia-smi's output, so they run
in tests without a GPU. `python -m recipes.preflight.versions` prints the version lines alone (the installer's
last step) and exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from packaging.version import InvalidVersion, Version

from recipes.constants import REPO_ROOT

GPU_LOCK = REPO_ROOT / "requirements" / "gpu.txt"
INSTALL_COMMAND = "bash scripts/install_gpu_env.sh"
# The packages whose version decides whether the recipe runs as tested; the rest follow from the lock.
CHECKED_PACKAGES = ("verl", "sglang", "transformers", "torch")
# torch 2.11.0 from the registry is a CUDA 13.0 build, and sglang 0.5.12 links libcudart.so.13.
MIN_DRIVER_MAJOR = 580
ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
# verl asks transformers for this when ATTN_KEY is unset (verl/workers/config/model.py:185).
VERL_DEFAULT_ATTN = "flash_attention_2"
# The distribution each flash implementation imports from (transformers/modeling_flash_attention_utils.py).
FLASH_PACKAGES = {"flash_attention_2": "flash-attn", "flash_attention_3": "flash-attn-3",
                  "flash_attention_4": "flash-attn-4"}

VersionLookup = Callable[[str], "str | None"]


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    """Pins of a requirements lock as {normalized name: version}; hashes, markers and comments are skipped."""
    pins = {}
    for line in Path(path).read_text().splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            pins[_normalize(match[1])] = match[2]
    return pins


def _same_build(installed: str, pinned: str) -> bool:
    """2.11.0+cu130 (from PyTorch's own index) is the registry's 2.11.0; 2.11.0+cpu is not."""
    try:
        got, want = Version(installed), Version(pinned)
    except InvalidVersion:
        return installed == pinned
    return got.public == want.public and not (got.local or "").startswith("cpu")


def _shown(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if REPO_ROOT in path.parents else str(path)


def version_problems(lock_path: Path, installed: VersionLookup, need_sglang: bool) -> list[str]:
    """One line per checked package that is missing or differs from the lock."""
    try:
        pins = read_lock(lock_path)
    except OSError as err:
        return [f"cannot read the GPU lock {lock_path} ({err.strerror}); check out the repo's requirements/"]
    lock_path = _shown(lock_path)
    problems = []
    for name in CHECKED_PACKAGES:
        want = pins.get(name)
        if want is None:
            problems.append(f"{lock_path} pins no {name}; regenerate it with the command in its header")
            continue
        got = installed(name)
        if got is None:
            if name == "sglang" and not need_sglang:
                continue
            why = " but actor_rollout_ref.rollout.name=sglang needs it" if name == "sglang" else ""
            problems.append(f"{name} is not installed{why}; {lock_path} pins {name}=={want}: {INSTALL_COMMAND}")
        elif not _same_build(got, want):
            problems.append(f"{name} {got} is installed but {lock_path} pins {name}=={want}; "
                            f"reinstall the GPU env: {INSTALL_COMMAND}")
    return problems


def query_driver(which: Callable[[str], str | None] = shutil.which,
                 run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """nvidia-smi's driver_version lines (one per GPU), its error text if it fails, None without nvidia-smi."""
    if which("nvidia-smi") is None:
        return None
    try:
        proc = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                   capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"nvidia-smi failed: {err}"
    return proc.stdout if proc.returncode == 0 else (proc.stdout + proc.stderr).strip() or f"exit {proc.returncode}"


def driver_problem(output: str | None) -> str | None:
    """None if every GPU's driver is new enough for the CUDA 13 builds in the lock, else the one-line reason."""
    need = f"the GPU env's torch and sglang are CUDA 13 builds and need NVIDIA driver >= {MIN_DRIVER_MAJOR}"
    if output is None:
        return f"nvidia-smi not found, so the NVIDIA driver cannot be checked; {need}"
    versions = [line.strip() for line in output.splitlines() if line.strip()]
    majors = [int(v.split(".")[0]) for v in versions if re.fullmatch(r"\d+(\.\d+)*", v)]
    if not majors or len(majors) != len(versions):
        first = versions[0] if versions else "no output"
        return f"cannot read the NVIDIA driver version from nvidia-smi ({first[:200]}); {need}"
    if min(majors) < MIN_DRIVER_MAJOR:
        return f"NVIDIA driver {versions[majors.index(min(majors))]} found; {need}: upgrade the driver"
    return None


def attention_problems(attn_implementation: str | None, ulysses_size: int,
                       installed: VersionLookup) -> tuple[list[str], list[str]]:
    """(errors, warnings) for the HF attention the FSDP actor and reference will load."""
    errors, warnings = [], []
    impl = attn_implementation or VERL_DEFAULT_ATTN
    package = FLASH_PACKAGES.get(impl)
    if package and installed(package) is None:
        asked = f"unset, so verl asks for {impl}," if attn_implementation is None else f"{impl}"
        errors.append(f"{ATTN_KEY} is {asked} but {package} is not installed (transformers would try to fetch a "
                      f"kernel from the hub at model load); set ++{ATTN_KEY}=sdpa")
    if impl == "flash_attention_4":
        warnings.append(f"{ATTN_KEY}=flash_attention_4: flash-attn-4 4.0.0b15 (beta) compiled a new backward kernel "
                        "on every call on an H100 (seconds per layer per micro batch); sdpa is the tested choice")
    if ulysses_size > 1 and impl not in FLASH_PACKAGES:
        errors.append(f"actor ulysses_sequence_parallel_size={ulysses_size} needs a flash_attention_* "
                      f"implementation: verl's sequence-parallel all-to-all wraps only transformers' flash "
                      f"attention, not {impl}; use ulysses_sequence_parallel_size=1")
    if installed("flash-attn") and installed("flash-attn-4"):
        warnings.append("flash-attn and flash-attn-4 are both installed and overwrite each other's flash_attn/cute "
                        f"files; the lock has only flash-attn-4: {INSTALL_COMMAND}")
    return errors, warnings


def check_gpu_env(config, report, lock_path: Path = GPU_LOCK, installed: VersionLookup = installed_version,
                  driver_output: str | None | Callable[[], str | None] = query_driver) -> None:
    """Launch-time checks: driver, locked versions, attention implementation (report has error(), warn(), note())."""
    from omegaconf import OmegaConf

    output = driver_output() if callable(driver_output) else driver_output
    problem = driver_problem(output)
    if problem:
        report.error(problem)
    else:
        versions = sorted({line.strip() for line in output.splitlines() if line.strip()}, key=Version)
        report.note(f"NVIDIA driver: {', '.join(versions)} on {len(output.split())} GPU(s) "
                    f"(CUDA 13 builds need >= {MIN_DRIVER_MAJOR})")
    need_sglang = OmegaConf.select(config, "actor_rollout_ref.rollout.name") == "sglang"
    for problem in version_problems(lock_path, installed, need_sglang=need_sglang):
        report.error(problem)
    ulysses = OmegaConf.select(config, "actor_rollout_ref.actor.ulysses_sequence_parallel_size") or 1
    errors, warnings = attention_problems(OmegaConf.select(config, ATTN_KEY), int(ulysses), installed)
    for error in errors:
        report.error(error)
    for warning in warnings:
        report.warn(warning)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Installed verl / sglang / transformers / torch vs the GPU lock.")
    parser.add_argument("--lock", type=Path, default=GPU_LOCK)
    args = parser.parse_args(argv)
    pins = read_lock(args.lock) if args.lock.is_file() else {}
    for name in CHECKED_PACKAGES:
        print(f"[versions] {name} {installed_version(name) or 'not installed'} (lock: {pins.get(name, 'no pin')})")
    problems = version_problems(args.lock, installed_version, need_sglang=True)
    for problem in problems:
        print(f"[versions] ERROR: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
