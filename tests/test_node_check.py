"""`CHECK_ONLY=1 bash scripts/run_gsm8k_grpo.sh`: the whole launch preflight with a line per GPU-node check, then
exit, starting nothing. Driven through the launcher's entry point (`python -m recipes.launch`, which the script
hands its knobs); `gsm8k-preflight --node-check` is the same check as a command.

This CPU machine has no GPU, driver or CUDA compiler: nvidia-smi, nvcc and g++ are stand-in scripts on PATH that
print what the real tools print on an H100 node (each labelled where it is written). Everything else is real: the
launcher, the preflight, the installed packages (so the CPU env's torch and missing sglang are reported as the
version errors they are on a GPU node), the kernel caches (empty folders here)."""

import os
import subprocess
import sys
from unittest import mock

import pytest

from recipes.launch.__main__ import main as launcher
from recipes.preflight.findings import Report
from recipes.preflight.run import Preflight, node_verdict
from testkit.launcher import clean_environ

pytestmark = pytest.mark.integration

H100_NODE = {  # stand-in nvidia-smi: what the real one printed on an 8xH100 node, per query
    "-L": "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d})\n" for i in range(8)),
    "--query-gpu=driver_version": "580.159.04\n" * 8,
}
NVCC_13 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"


def _stand_in(path, script):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


@pytest.fixture
def gpu_node(tmp_path):
    """Environment for the launcher: stand-in nvidia-smi, g++ and the env's nvcc, empty kernel caches."""
    bin_dir, cuda = tmp_path / "bin", tmp_path / "env" / "nvidia" / "cu13"
    cases = "".join(f"  *{flag}*) cat <<'EOF'\n{out}EOF\n  ;;\n" for flag, out in H100_NODE.items())
    _stand_in(bin_dir / "nvidia-smi", f'case "$*" in\n{cases}esac\n')  # stand-in for NVIDIA's nvidia-smi
    _stand_in(bin_dir / "g++", "echo 12.2.0\n")  # stand-in for gcc 12's `g++ -dumpfullversion -dumpversion`
    _stand_in(cuda / "bin" / "nvcc", f"cat <<'EOF'\n{NVCC_13}EOF\n")  # stand-in for the lock's nvcc 13.0
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CUDA_HOME": str(cuda), "WANDB_API_KEY": "x" * 40,
            "TVM_FFI_CACHE_DIR": str(tmp_path / "tvm-ffi"), "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "fi"),
            "CHECK_ONLY": "1"}


def test_check_only_prints_each_gpu_node_line_and_starts_nothing(prepared_data_dir, gpu_node, tmp_path, capsys):
    environ = clean_environ(PYTHON=sys.executable, DATA_DIR=str(prepared_data_dir), **gpu_node)
    started = []
    with mock.patch.dict(os.environ, environ, clear=True), mock.patch.object(
            subprocess.Popen, "__init__", lambda self, args, *a, **k: started.append(_program(args)) or
            _POPEN_INIT(self, args, *a, **k)):
        returncode = launcher([], environ)
    out, err = capsys.readouterr()
    lines = [line.removeprefix("[preflight] ") for line in err.splitlines()]
    cuda = gpu_node["CUDA_HOME"]
    expected = [
        "GPUs: 8 visible, as trainer.n_gpus_per_node=8 asks",
        "NVIDIA driver: 580.159.04 on 8 GPU(s) (CUDA 13 builds need >= 580)",
        f"CUDA compiler: {cuda}/bin/nvcc 13.0.88 (CUDA_HOME)",
        f"host compiler: {tmp_path}/bin/g++ gcc 12.2.0 (nvcc 13.0 with SGLang's C++20 kernels needs gcc/g++ 10 to 15)",
        "SGLang header: sglang is not installed, no activation header to check",
    ]
    assert [line for line in expected if line not in lines] == [], err
    (cache,) = [line for line in lines if line.startswith("JIT caches: ")]
    assert f"SGLang (tvm-ffi) {tmp_path}/tvm-ffi (0 kernels)" in cache
    # no nvidia-cutlass-dsl in this env: FlashInfer would compile its CUDA norm module, so it is counted
    assert cache.split("; ")[1] == ("first-use census for Qwen2.5-3B: 0 of 9 built, missing activation, "
                                    "fused_rope_hd128, kvcache_512, clamp_position, resolve_future_token_ids, "
                                    "fa2_hd128, fa3_hd128, cascade, norm")
    # this CPU env is not the GPU lock: the node check says so and fails, as the launch would
    assert "ERROR: sglang is not installed but actor_rollout_ref.rollout.name=sglang needs it" in err
    assert returncode == 1 and lines[-1].startswith("node check: ") and lines[-1].endswith(
        "problem(s) above would stop a launch here; nothing was started")
    assert "main_ppo" not in out + err and "ray init" not in err.lower()
    # it asked the node's tools and started nothing else: no main_ppo, relay, watcher or Ray
    assert set(started) <= {"nvidia-smi", "nvcc", "g++"} and "nvidia-smi" in started, started


_POPEN_INIT = subprocess.Popen.__init__


def _program(args) -> str:
    return os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else args).split()[0])


def test_a_node_that_passes_says_a_launch_would_start(capsys):
    report = Report()
    report.warn("something to know")
    assert node_verdict(Preflight(config={}, report=report)) == 0
    assert capsys.readouterr().err == ("[preflight] node check: ok, a launch would start here (1 warning(s)); "
                                       "nothing was started\n")
    report.error("a problem")
    assert node_verdict(Preflight(config={}, report=report)) == 1
