"""Apply requirements/patches/sglang-0.5.12-activation.patch to an installed sglang 0.5.12 (the installer's step).

SGLang 0.5.12 JIT-compiles its SiLU-and-mul kernel (sglang/jit_kernel/csrc/elementwise/activation.cuh) with nvcc at
the first MLP call; with nvcc 13.0 and gcc 12 that header does not compile (sgl-project/sglang#25487, fixed after
0.5.12 by #26444; 0.5.12.post1 still has it). The patch makes the same change as the fix. It is for 0.5.12 only:
any other sglang is refused, so a lock that moves on must drop or redo the patch.

    python -m recipes.gpu_env.sglang_patch SITE_PACKAGES     # idempotent: "applied" or "already applied"
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

PATCH = Path(__file__).resolve().parents[2] / "requirements" / "patches" / "sglang-0.5.12-activation.patch"
PATCHED_VERSION = "0.5.12"
HEADER = Path("jit_kernel/csrc/elementwise/activation.cuh")  # the patched file, in the sglang package folder
PATCHED_MARKER = "kernel_fn_t"  # a name only the patched header has: what the launch preflight looks for


def header_is_patched(sglang_dir: Path) -> bool | None:
    """Whether sglang_dir's activation header carries the patch (without the `patch` tool, which a launch node
    may lack); None when there is no such header."""
    header = Path(sglang_dir) / HEADER
    if not header.is_file():
        return None
    return PATCHED_MARKER in header.read_text(errors="replace")


class PatchError(Exception):
    pass


def installed_sglang(site_dir: Path) -> str | None:
    """The version in sglang's dist-info under site_dir (not the running interpreter's), None if absent."""
    for meta in sorted(Path(site_dir).glob("sglang-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def _patch(site_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    tool = shutil.which("patch")
    if tool is None:
        raise PatchError("`patch` not found; it applies SGLang 0.5.12's activation-kernel fix: apt-get install patch")
    return subprocess.run([tool, "-p1", "--batch", "--no-backup-if-mismatch", "-r", "-", "-d", str(site_dir), *flags,
                           "-i", str(PATCH)], capture_output=True, text=True)


def apply(site_dir: Path) -> str:
    """'applied' or 'already applied'; PatchError says why not."""
    version = installed_sglang(site_dir)
    if version is None:
        raise PatchError(f"no sglang installed in {site_dir}")
    if version != PATCHED_VERSION:
        raise PatchError(f"sglang {version} is installed but {PATCH.name} is for sglang {PATCHED_VERSION}: check "
                         "whether the new version has the fix (sgl-project/sglang#26444), then drop or redo the patch")
    if _patch(site_dir, "--forward", "--dry-run").returncode == 0:
        done = _patch(site_dir, "--forward")
        if done.returncode != 0:
            raise PatchError(f"patch failed: {done.stdout.strip()} {done.stderr.strip()}")
        return "applied"
    if _patch(site_dir, "--reverse", "--dry-run").returncode == 0:
        return "already applied"
    raise PatchError(f"{PATCH.name} neither applies nor is applied to {site_dir}/sglang: the installed files differ "
                     "from sglang 0.5.12's wheel; reinstall with bash scripts/install_gpu_env.sh")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("site_dir", type=Path)
    args = parser.parse_args(argv)
    try:
        result = apply(args.site_dir)
    except PatchError as err:
        print(f"[sglang_patch] ERROR: {err}", file=sys.stderr)
        return 1
    print(f"[sglang_patch] {PATCH.name}: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
