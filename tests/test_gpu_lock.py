"""The committed GPU lock (requirements/gpu.txt) against what the recipe needs, and the installer's node checks.

Versions are never written here twice: they come from the CPU test env's lock (requirements/test.txt) and from
the installed verl 0.9.1's own metadata (its [sglang] extra), which the test env shares with the GPU env."""

import os
import platform
import re
import shlex
import subprocess
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from recipes.preflight.versions import GPU_LOCK, REPO_ROOT, read_lock

pytestmark = pytest.mark.repo

TEST_LOCK = REPO_ROOT / "requirements" / "test.txt"
INSTALLER = REPO_ROOT / "scripts" / "install_gpu_env.sh"


def _name(raw: str) -> str:
    return re.sub(r"[-_.]+", "-", raw).lower()


@pytest.fixture(scope="module")
def lock_text() -> str:
    return GPU_LOCK.read_text()


@pytest.fixture(scope="module")
def pins() -> dict[str, str]:
    return read_lock(GPU_LOCK)


@pytest.fixture(scope="module")
def header_args(lock_text) -> list[str]:
    """The compile command uv wrote into the lock's header."""
    match = re.search(r"^#\s+(uv pip compile .*)$", lock_text, re.MULTILINE)
    assert match, f"{GPU_LOCK} has no `uv pip compile` command in its header"
    return shlex.split(match[1])


def _option(args: list[str], flag: str) -> str:
    assert flag in args, f"the lock's header command has no {flag}: {shlex.join(args)}"
    return args[args.index(flag) + 1]


def test_every_requirement_is_pinned_and_hashed(lock_text, pins):
    hashes, current = {}, None
    for line in lock_text.splitlines():
        if re.match(r"[A-Za-z0-9]", line):
            assert "==" in line, f"unpinned requirement in the lock: {line!r}"
            current = _name(line.split("==")[0].split("[")[0])
            hashes[current] = []
        if current is not None:
            hashes[current] += re.findall(r"--hash=sha256:[0-9a-f]{64}", line)
    assert set(hashes) == set(pins) and len(pins) > 200  # a full lock, not a list of direct needs
    assert [name for name, found in hashes.items() if not found] == []


def test_the_recipe_pins_match_the_cpu_test_env(pins):
    """Tokenization, chat templates and tracing must behave as in the tests: same verl, transformers, weave, wandb."""
    test_pins = read_lock(TEST_LOCK)
    for name in ("verl", "transformers", "weave", "wandb"):
        assert pins[name] == test_pins[name], f"{name}: GPU lock {pins[name]}, test env {test_pins[name]}"


def test_the_pins_verl_sglang_extra_asks_for(pins):
    """torch 2.11.0 (CUDA 13), sglang 0.5.12, transformers 5.9.0...: exactly what verl 0.9.1[sglang] pins."""
    assert metadata.version("verl") == pins["verl"]
    exact = [Requirement(r) for r in metadata.requires("verl") if "extra == \"sglang\"" in r and "==" in r]
    assert {_name(r.name) for r in exact} >= {"torch", "sglang", "transformers"}
    for req in exact:
        locked = pins[_name(req.name)]
        assert req.specifier.contains(locked), f"lock has {req.name}=={locked}, verl wants {req}"


def test_kernels_is_in_the_range_transformers_declares(pins):
    """transformers imports `kernels` whenever it is installed (sglang pulls it); outside the range of its own
    [kernels] extra, `import transformers.activations`, and so every model load, raises."""
    reqs = [Requirement(r) for r in metadata.requires("transformers") if r.startswith("kernels")]
    assert metadata.version("transformers") == pins["transformers"] and reqs
    for req in reqs:
        assert req.specifier.contains(pins["kernels"]), f"lock has kernels=={pins['kernels']}, transformers wants {req}"


def test_one_flash_attention_package(pins):
    """flash-attn 2 and flash-attn-4 install files into the same flash_attn/cute/ folder: never both."""
    assert "flash-attn-4" in pins  # sglang 0.5.12's hard dependency
    assert "flash-attn" not in pins


def test_the_header_command_regenerates_this_lock_from_committed_inputs(header_args, pins):
    inputs, args = [], iter(header_args[3:])
    for arg in args:
        if arg in ("--override", "--python-version", "--python-platform", "--exclude-newer", "-o"):
            next(args)
        elif not arg.startswith("-"):
            inputs.append(arg)
    assert inputs == ["requirements/gpu.in"]
    overrides = REPO_ROOT / _option(header_args, "--override")
    for path in (REPO_ROOT / inputs[0], overrides):
        assert path.is_file(), f"the lock's header names {path}, which is not in the repo"
    assert REPO_ROOT / _option(header_args, "-o") == GPU_LOCK
    assert _option(header_args, "--python-version") == "3.12"
    assert _option(header_args, "--python-platform").startswith("x86_64-manylinux")
    assert "--generate-hashes" in header_args
    # these make the resolver fall back to hydra-core 0.11 / omegaconf 1.4 without failing
    assert not {"--no-build", "--only-binary"} & set(header_args)
    override_pins = read_lock(overrides)
    assert override_pins and all(pins[name] == version for name, version in override_pins.items())


def test_the_lock_carries_a_cuda_compiler_of_torchs_cuda_release(pins):
    """SGLang and FlashInfer compile kernels with nvcc at first use; a driver-only node has none but the env's.
    One CUDA release ships nvcc, its crt headers and cicc (nvvm) at the nvrtc version torch pins."""
    release = pins["nvidia-cuda-nvrtc"]
    assert release.startswith("13.0."), f"torch 2.11.0's CUDA is 13.0, nvrtc is {release}"
    for part in ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm"):
        assert pins.get(part) == release, f"{part} {pins.get(part)} is not CUDA {release}'s"
    assert pins.get("nvidia-cuda-cccl", "").startswith("13.0."), "cuda/std headers of CUDA 13.0"
    # the headers FlashInfer's prefill includes (curand.h) and the runtime tvm-ffi links (-lcudart)
    assert {"nvidia-curand", "nvidia-cuda-runtime"} <= set(pins)


def test_every_direct_need_is_met_by_the_lock(pins):
    """Editing requirements/gpu.in without regenerating the lock fails here."""
    for line in (REPO_ROOT / "requirements" / "gpu.in").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            assert _name(req.name) in pins, f"{req.name} is in gpu.in but not in the lock"
            assert req.specifier.contains(pins[_name(req.name)], prereleases=True), f"lock does not satisfy {req}"


# ---- scripts/install_gpu_env.sh: it refuses a node the lock cannot work on, before installing anything ----

FAKE_PYTHON = """#!/bin/sh
# Stands in for an interpreter of another node: reports FAKE_VERSION and glibc FAKE_GLIBC, installs nothing.
case "$*" in
  --version) echo "Python $FAKE_VERSION" ;;
  *libc_ver*) echo "$FAKE_GLIBC" ;;
  *version_info*) [ "$FAKE_VERSION" = 3.12.3 ] ;;
  *) echo "fake python: unexpected call $*" >&2; exit 3 ;;
esac
"""


def _install(tmp_path, driver=None, **fake):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python3.12"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    if driver is not None:  # a stand-in nvidia-smi printing one driver_version line per GPU
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\nprintf '" + "\\n".join(driver) + "\\n'\n")
        smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VENV", "UV_DIR", "CHECK_DRIVER", "PYTHON")}
    env.update({"PATH": f"{bin_dir}:/usr/bin:/bin", "BASE_PYTHON": str(python), "VENV": str(tmp_path / "venv"),
                "PYENV_ROOT": str(tmp_path / "pyenv"), "FAKE_VERSION": "3.12.3", "FAKE_GLIBC": "2.39", **fake})
    proc = subprocess.run(["bash", str(INSTALLER)], env=env, capture_output=True, text=True, timeout=60)
    assert not (tmp_path / "venv").exists(), "the installer created the env before refusing"
    return proc


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the installer refuses other machines first")
@pytest.mark.parametrize(
    "driver, fake, message",
    [
        (["580.159.04"], {"FAKE_VERSION": "3.11.9"}, "does not run as CPython 3.12, which the lock is for"),
        (["580.159.04"], {"FAKE_GLIBC": "2.31"}, "glibc 2.31 found; sglang 0.5.12's wheel needs glibc >= 2.34"),
        (["580.159.04", "535.104.05"], {}, "NVIDIA driver 535.104.05 found; the locked torch 2.11.0 and sglang"),
        (None, {}, "nvidia-smi not found: cannot check the NVIDIA driver"),
    ],
)
def test_installer_refuses_a_node_the_lock_cannot_run_on(tmp_path, driver, fake, message):
    proc = _install(tmp_path, driver, **fake)
    assert proc.returncode == 1
    assert message in proc.stderr, proc.stderr
