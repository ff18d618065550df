"""Fixtures shared across the suite. Test doubles live in tests/testkit/ (imported as `testkit`, pyproject.toml's
pytest pythonpath); the stand-ins the scripts need too live with them, in scripts/harness/standins/."""

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from recipes.constants import SHARED_GSM8K_DIR
from testkit import tiers
from testkit.hf_cache import write_hub_cache

TIER = pytest.StashKey[str]()
TIER_ORDER = ("e2e", "bench", "integration", "repo", "unit")  # the order the files start in: longest first

# Never talk to W&B from tests: no error reports, no runs, no traffic off this machine.
os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WEAVE_PRINT_CALL_LINK", "false")
# the suite's Ray clusters start no idle worker per logical CPU (as scripts/cpu_env.sh for the CPU launches)
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")

# The suite's own Hugging Face cache, holding the Qwen2.5 models' config.json as a download leaves it: a launch with
# HF_HUB_OFFLINE=1 finds the recipe's hub models there, as on a node that downloaded them (recipes/preflight/
# hub_model.py), whatever cache the machine running the tests has.
_HUB_CACHE = tempfile.mkdtemp(prefix="recipe-tests-hf-cache-")
atexit.register(shutil.rmtree, _HUB_CACHE, ignore_errors=True)
os.environ["HF_HUB_CACHE"] = str(write_hub_cache(Path(_HUB_CACHE)))

REPO_ROOT = Path(__file__).resolve().parents[1]
# the test doubles and the harness import in the processes tests start too (a smoke's Ray workers load
# testkit.trace_fault and harness.cpu_backend)
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "tests"), str(REPO_ROOT / "scripts"),
                                            *filter(None, [os.environ.get("PYTHONPATH")])])
MINI_GSM8K = REPO_ROOT / "tests" / "fixtures" / "gsm8k_mini"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_gsm8k_dir() -> Path:
    """The real GSM8K (OpenAI grade-school-math, 7473 train / 1319 test rows) beside the repo."""
    if not (SHARED_GSM8K_DIR / "train.jsonl").is_file():
        pytest.skip(f"real GSM8K not found at {SHARED_GSM8K_DIR} (GSM8K's train.jsonl and test.jsonl)")
    return SHARED_GSM8K_DIR


@pytest.fixture(scope="session")
def mini_gsm8k_dir() -> Path:
    """Our own small GSM8K-style rows (tests/fixtures/gsm8k_mini)."""
    return MINI_GSM8K


PREPARED_TRAIN_ROWS = 520  # a step of every profile (multinode: 512 prompts); the preflight refuses 0 steps


@pytest.fixture(scope="session")
def prepared_data_dir(mini_gsm8k_dir, tmp_path_factory) -> Path:
    """Parquet written by the real data prep (calculator tool set) from the small fixture, its training rows
    repeated to PREPARED_TRAIN_ROWS (its 4 test rows as they are)."""
    from data_prep import gsm8k

    source = tmp_path_factory.mktemp("gsm8k_source")
    lines = (mini_gsm8k_dir / "train.jsonl").read_text().splitlines()
    (source / "train.jsonl").write_text("\n".join(lines[i % len(lines)] for i in range(PREPARED_TRAIN_ROWS)) + "\n")
    shutil.copy(mini_gsm8k_dir / "test.jsonl", source / "test.jsonl")
    out = tmp_path_factory.mktemp("gsm8k_prepared")
    assert gsm8k.main(["--input_dir", str(source), "--local_save_dir", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def default_dry_run(prepared_data_dir):
    """The launcher's decisions for DRY_RUN=1 with no other knob set (profile 8xh100), through its Python entry
    point (testkit.launcher.plan): one for every test that reads it (composing and validating takes seconds)."""
    from testkit.launcher import plan

    planned = plan(prepared_data_dir, DRY_RUN="1")
    assert planned.preflight.ok, planned.err
    return planned


@pytest.fixture(scope="session")
def launcher_overrides(default_dry_run) -> list[str]:
    """The hydra overrides a default launch passes to main_ppo."""
    return list(default_dry_run.launch.overrides)


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """A Ray cluster of two nodes on 127.0.0.1, as scripts/local_ray_cluster.py starts one (two raylets, each its own
    temp dir, resources and free ports): its `gcs` (a driver's address), `dashboard` (for jobs) and `env` (what a
    driver needs). Only its own processes are stopped at the end."""
    from unittest import mock

    import local_ray_cluster as cluster

    directory = tmp_path_factory.mktemp("ray_cluster")
    workers_import = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ["PYTHONPATH"]])}
    with mock.patch.dict(os.environ, workers_import):  # the raylets' environment is their workers'
        state = cluster.start(directory, nodes=2, cpus=2, gpus=0)
    try:
        yield state
    finally:
        cluster.stop(directory)


def pytest_collection_modifyitems(config, items):
    """Every file in exactly one tier (tests/testkit/tiers.py), else the collection fails naming the files. Then the
    longest tiers first: pytest-xdist hands out whole files in this order, so the end-to-end launches start at once
    and the quick unit files fill the workers at the end."""
    untiered = {}
    for item in items:
        try:
            item.stash[TIER] = tiers.file_tier(item.module)
        except ValueError as why:
            untiered.setdefault(item.nodeid.split("::")[0], str(why))
        else:
            extra = [m.name for m in item.iter_markers() if m.name in tiers.TIERS][1:]
            if extra:
                untiered.setdefault(item.nodeid.split("::")[0], f"{item.name} adds tier {extra[0]}: one tier "
                                    "a file (move the test to a file of that tier)")
    if untiered:
        raise pytest.UsageError("test files without exactly one tier:\n" + "\n".join(
            f"  {path}: {why}" for path, why in sorted(untiered.items())))
    items.sort(key=lambda item: TIER_ORDER.index(item.stash[TIER]))


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile (scripts/run_tests.sh), but the files that launch main_ppo (the e2e tier) are one unit of work,
    run one after another on one worker, first: one launch holds about half of a 24 GB machine
    (docs/measured.md#smoke_cpu_ram_gb), two at once could fail for memory; and the SLURM files share one SLURM of
    namespaced nodes (two at once would claim the same node names and bridge). The other worker takes whole files
    meanwhile; each worker takes more files when it runs out."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Launches(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "e2e launches" if tiers.declared_tier(config.rootpath / path) == "e2e" else path

    return Launches(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _as_its_tier(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _as_its_tier(item))


def _as_its_tier(item):
    """A unit test's setup and call run inside the unit guard: a process, socket or Ray it starts fails it, with
    what it did, even where the code under test caught the guard's error."""
    if item.stash.get(TIER, None) != "unit":
        return (yield)
    with tiers.unit_guard(item.nodeid) as seen:
        try:
            return (yield)
        finally:
            if seen:
                raise tiers.TierViolation(seen[0]) from None


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory):
    """A one-node SLURM on 127.0.0.1 (slurmctld + slurmd, auth/none; tests/testkit/local_slurm.py), installed with
    apt-get when missing: its `env` (SLURM_CONF) for sbatch, scontrol and scancel. Its daemons stop at the end."""
    import shutil

    from testkit import local_slurm

    if not shutil.which("slurmctld") and os.geteuid() != 0:
        pytest.skip(f"SLURM is not installed and this user cannot install it (apt-get install {local_slurm.PACKAGE})")
    directory = tmp_path_factory.mktemp("slurm")
    state = local_slurm.start(directory)
    try:
        yield state
    finally:
        local_slurm.stop(directory)


@pytest.fixture(scope="session")
def second_user():
    """Another local user of this machine (tests/testkit/second_user.py): a real uid, removed at the end. Skips,
    saying why, where this session cannot make one (not root, no useradd or setpriv)."""
    from testkit.second_user import SecondUser, why_not

    reason = why_not()
    if reason:
        pytest.skip(f"no second local user: {reason}")
    user = SecondUser.make()
    try:
        yield user
    finally:
        user.remove()


@pytest.fixture
def shared_base():
    """A folder under /tmp that the second user may pass through (0711), removed after the test."""
    import shutil

    from testkit.second_user import playground

    base = playground()
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_nodes(tmp_path_factory):
    """A two-node SLURM (tests/testkit/local_slurm.py with nodes=2): slurmctld and two slurmd, each in its own network,
    UTS and mount namespace with its own address on a bridge (node0 with a first interface that reaches nothing, as a
    multi-NIC head), installed with apt-get when missing; skipped with the reason where namespaces cannot be made.
    Its state: `env`, `names`, `host_address` (this machine on the nodes' bridge), `net`. All of it removed at the
    end, the namespaces and links too."""
    from testkit import local_slurm, namespaced_nodes

    why = namespaced_nodes.available()
    if why:
        pytest.skip(f"no namespaced SLURM nodes here: {why}")
    directory = tmp_path_factory.mktemp("slurm_nodes")
    # a SIGTERM to pytest (a CI's timeout) unwinds as Ctrl-C does, through this cleanup; a SIGKILL leaves names that
    # the next start removes (their maker is gone)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    state = local_slurm.start(directory, nodes=2, second_nic=True)
    try:
        yield state
    finally:
        local_slurm.stop(directory)
        signal.signal(signal.SIGTERM, previous)
