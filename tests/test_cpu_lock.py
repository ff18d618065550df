"""requirements/test.txt, the CPU env's lock, is CPU-only wherever it is installed: torch is the +cpu build from
PyTorch's CPU index (the lock's one option line), every entry carries its hashes (pip's hash mode then refuses any
file or dependency the lock does not name), no CUDA package is pinned, and the lock is closed: every requirement of
every locked package is met by a pin, as read from the env CI built from it. Offline; `python
scripts/check_cpu_lock.py --resolve` is the same check through pip against the public indexes."""

import pytest

import check_cpu_lock as cpu_lock

pytestmark = pytest.mark.repo


@pytest.fixture(scope="module")
def lock():
    return cpu_lock.parse_lock(cpu_lock.LOCK.read_text())


def test_the_lock_is_cpu_only_pinned_and_hashed(lock):
    assert len(lock.pins) > 100 and not lock.malformed
    assert cpu_lock.lock_problems(lock, cpu_lock.SOURCE.read_text()) == []
    assert lock.pins["torch"].endswith("+cpu") and "setuptools" in lock.pins


def test_the_env_is_the_lock_and_the_lock_is_closed(lock):
    import ray  # noqa: F401  (its vendored packages join sys.path, as after any test of this worker that used Ray)

    assert cpu_lock.closure_problems(lock) == []


def test_what_would_bring_cuda_or_an_unchecked_file_is_caught(lock):
    source = cpu_lock.SOURCE.read_text()
    text = cpu_lock.LOCK.read_text()
    plain_torch = cpu_lock.parse_lock(text.replace("torch==2.13.0+cpu", "torch==2.13.0"))
    assert any("not the CPU build" in p for p in cpu_lock.lock_problems(plain_torch, source))
    no_index = cpu_lock.parse_lock(text.replace(f"--extra-index-url {cpu_lock.TORCH_INDEX}\n", ""))
    assert any("option lines" in p for p in cpu_lock.lock_problems(no_index, source))
    unhashed = cpu_lock.parse_lock(text + "\nzzz-extra==1.0\n")
    assert any(p.startswith("zzz-extra: every entry needs --hash") for p in cpu_lock.lock_problems(unhashed, source))
    cuda = cpu_lock.parse_lock(text + "\nnvidia-nccl-cu13==2.28.3 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    assert "nvidia-nccl-cu13: a CUDA/GPU package in the CPU lock" in cpu_lock.lock_problems(cuda, source)


def test_a_dependency_left_out_of_the_lock_is_caught(lock):
    """pip freeze leaves setuptools out; torch and tensorboard require it, and pip's hash mode then refuses to
    install it from outside the lock."""
    without = cpu_lock.Lock(options=lock.options, pins={k: v for k, v in lock.pins.items() if k != "setuptools"},
                            hashes=lock.hashes)
    problems = cpu_lock.closure_problems(without)
    assert any(p.startswith("torch needs setuptools") for p in problems), problems
    assert any(p.startswith("setuptools 84.2.1 is installed but not in the lock") for p in problems), problems


def test_a_pip_report_is_read_as_pip_would_install_it(lock):
    """The --resolve summary, on pip's report format: the lock's own packages pass, an extra or CUDA one does not."""
    def install(name, version, url):
        return {"metadata": {"name": name, "version": version}, "download_info": {"url": url}}

    wheel = "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    report = {"install": [install(n, v, wheel if n == "torch" else f"https://x/{n}.whl") for n, v in lock.pins.items()]}
    problems, line = cpu_lock.summarize(report, lock)
    assert problems == [] and f"{len(lock.pins)} packages, 0 not in the lock, 0 CUDA/GPU packages" in line
    report["install"] = [i for i in report["install"] if i["metadata"]["name"] != "torch"] + [
        install("torch", "2.13.0", "https://files/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"),
        install("nvidia-cudnn-cu13", "9.13.0", "https://files/nvidia_cudnn.whl")]
    problems, _ = cpu_lock.summarize(report, lock)
    assert "pip would install nvidia-cudnn-cu13, a CUDA/GPU package" in problems
    assert any("torch 2.13.0" in p and "not the CPU build" in p for p in problems)
