"""W&B unreachable, no key, or a trace server that disables this weave: the agent-loop worker's weave.init must
not kill training, and tracing must not count as on when it records nothing. Each case builds, in a process of its
own, the agent-loop worker class the recipe config names, with no tools (TOOL_SET=none): its __init__ runs verl's
RolloutTraceConfig.init, as in every Ray worker. The cases' processes are forked from one that has imported verl and
weave and composed that config, and done nothing else: weave.init runs first in each case, with the case's
environment (what weave and wandb read of it, they read when weave.init runs)."""

import json
import os
import signal
import subprocess
import sys

import pytest

from harness.standins.weave_http_server import API_KEY, loopback_wandb
from testkit.paths import recipe_pythonpath

pytestmark = pytest.mark.integration

# Imports and composes once, then runs each case it is sent (a JSON line: environment, folder, output files) in a
# child forked for it, and answers with the child's exit status and seconds.
WARM = """
import asyncio, json, logging, os, sys, time
from types import SimpleNamespace
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from verl.utils.import_utils import load_class_from_fqn
from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_op
import weave  # noqa: F401  imported here, not in each case
from harness.agent_loop_inprocess import compose_trainer_config

# the recipe config as a launch with TOOL_SET=none composes it, and the worker class the trainer starts from it
config = compose_trainer_config("none", ("trainer.project_name=gsm8k-recipe-test",), model_path=sys.argv[1])
manager_class = load_class_from_fqn(config.actor_rollout_ref.rollout.agent.agent_loop_manager_class)
worker_class = manager_class.agent_loop_workers_class.__ray_actor_class__  # what Ray would run, here in-process

class Loop:
    @rollout_trace_op
    async def run(self):
        return "rollout finished"

def case():
    worker_class(config, SimpleNamespace(), None, None)  # verl's __init__ calls RolloutTraceConfig.init
    print("backend:", RolloutTraceConfig.get_backend())
    print(asyncio.run(Loop().run()))

print("ready", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the case: its environment, folder and output files; exits as a process does (atexit included)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        sys.stdin = open(os.devnull)
        case()
        sys.stdout.flush()
        sys.exit(0)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps({"returncode": status, "seconds": time.perf_counter() - start}), flush=True)
"""


def case_environ(repo_root, tmp_path, **env) -> dict[str, str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "WF_"))}
    full_env.update({"HOME": str(tmp_path), "PYTHONPATH": recipe_pythonpath(repo_root),
                     "WANDB_ERROR_REPORTING": "false", "GSM8K_RECIPE_TRACE_INIT_TIMEOUT": "60",
                     "WEAVE_USE_SERVER_CACHE": "false", **env})
    return full_env


@pytest.fixture(scope="module")
def warm_worker(repo_root, tmp_path_factory):
    from harness.qwen_tokenizer import build_tiny_qwen2_model_dir, default_cache_dir

    model_dir = build_tiny_qwen2_model_dir(default_cache_dir() / "tiny-qwen2")
    home = tmp_path_factory.mktemp("warm_home")
    env = case_environ(repo_root, home)
    log = home / "warm.err"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", WARM, str(model_dir)], env=env, cwd=home, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n", log.read_text()[-3000:]
        yield proc
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a case still running (a timeout ended its test): it and the warm process
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_worker(warm_worker, repo_root, tmp_path, **env):
    """One case: (its process's result, its seconds)."""
    out, err = tmp_path / "case.out", tmp_path / "case.err"
    request = {"env": case_environ(repo_root, tmp_path, **env), "cwd": str(tmp_path), "stdout": str(out),
               "stderr": str(err)}
    warm_worker.stdin.write(json.dumps(request) + "\n")
    warm_worker.stdin.flush()
    answer = json.loads(warm_worker.stdout.readline())
    proc = subprocess.CompletedProcess(["case"], answer["returncode"], out.read_text(), err.read_text())
    return proc, answer["seconds"]


def test_no_key_turns_tracing_off_with_one_warning(warm_worker, repo_root, tmp_path):
    proc, _ = run_worker(warm_worker, repo_root, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "backend: None" in proc.stdout and "rollout finished" in proc.stdout
    assert proc.stderr.count("Weave tracing is OFF for this run: no WANDB_API_KEY") == 1


@pytest.mark.timeout(300)
def test_unreachable_wandb_turns_tracing_off(warm_worker, repo_root, tmp_path):
    # a closed port on this machine stands in for W&B being unreachable (no traffic leaves the machine)
    proc, seconds = run_worker(warm_worker, repo_root, tmp_path, WANDB_API_KEY="x" * 40,
                               WANDB_BASE_URL="http://127.0.0.1:9")
    assert proc.returncode == 0, proc.stderr
    assert "backend: None" in proc.stdout and "rollout finished" in proc.stdout
    assert "Weave tracing is OFF for this run: weave.init('gsm8k-recipe-test') failed" in proc.stderr
    assert seconds < 120


def test_server_that_disables_this_weave_turns_tracing_off(warm_worker, repo_root, tmp_path):
    # weave.init returns a client that records nothing, with only a warning, when the server asks for a newer weave
    with loopback_wandb(min_required_weave_version="99.0.0") as wandb:
        proc, _ = run_worker(warm_worker, repo_root, tmp_path, **wandb.env)
    assert proc.returncode == 0, proc.stderr
    assert "backend: None" in proc.stdout and "rollout finished" in proc.stdout
    assert ("Weave tracing is OFF for this run: weave.init('gsm8k-recipe-test') returned a disabled client"
            in proc.stderr)


def test_netrc_entry_for_a_self_hosted_wandb_is_a_key(warm_worker, repo_root, tmp_path):
    """`wandb login --host` writes the key under the host of WANDB_BASE_URL (port included), where weave reads it."""
    with loopback_wandb() as wandb:
        host = wandb.url.removeprefix("http://")
        (tmp_path / ".netrc").write_text(f"machine {host}\n  login user\n  password {API_KEY}\n")
        (tmp_path / ".netrc").chmod(0o600)
        env = {k: v for k, v in wandb.env.items() if k != "WANDB_API_KEY"}
        proc, _ = run_worker(warm_worker, repo_root, tmp_path, **env)
        assert proc.returncode == 0, proc.stderr
        assert "backend: weave" in proc.stdout and "rollout finished" in proc.stdout, proc.stderr
        assert len(wandb.storage.complete_call_ids()) == 1  # the traced op reached the self-hosted server


def test_one_credential_check_for_tracing_and_preflight(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from recipes.config_view import ConfigView
    from recipes.credentials import has_wandb_credentials
    from recipes.preflight.checks import Report, check_wandb

    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org:8443")
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password saas-key\n")
    config = ConfigView.of(OmegaConf.create({"trainer": {"logger": ["wandb"]},
                                             "actor_rollout_ref": {"rollout": {"trace": {"backend": "weave"}}}}))
    report = Report()
    check_wandb(config, report)
    assert not has_wandb_credentials() and len(report.errors) == 1  # a key for another host is no key here
    (tmp_path / ".netrc").write_text("machine wandb.example.org:8443\n  login user\n  password self-hosted-key\n")
    report = Report()
    check_wandb(config, report)
    assert has_wandb_credentials() and not report.errors
