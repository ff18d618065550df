"""Submit a training run to a Ray cluster as a job (scripts/submit_multinode.sh -> the launcher with SUBMIT=ray).

    python -m recipes.launch.ray_job -- <the hydra overrides the launcher resolved>

What crosses to other nodes, and how:
- the code: Ray uploads the repo as every worker's working directory (config/ray_runtime_env.yaml). Ray skips
  what .gitignore names, so nothing secret may live there;
- settings: W&B / Weave / Hugging Face settings of the submitting shell go in the runtime env's `env_vars`,
  which Ray applies to every worker process on every node (a worker inherits the raylet's environment, not the
  submitting shell's). `ray job list` and the dashboard print `env_vars`, so secrets never go there;
- secrets (WANDB_API_KEY, also from ~/.netrc after `wandb login`; HF_TOKEN): written to a one-file Python
  package in a private temp dir, uploaded with the job as a `py_module` and loaded into each worker's
  environment by Ray's `worker_process_setup_hook`. The local copy is deleted once Ray has it;
- the entrypoint runs the launcher again from Ray's copy of the repo, with every knob already resolved into
  hydra overrides, and the launcher-side knobs that are not hydra settings (experiment name, output dir,
  PUBLISH_EVALS, ...: the launcher's JOB_KNOBS) set in front of it as the submitting shell resolved them: its
  string holds no secret and no setting is looked up twice.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from recipes.constants import REPO_ROOT
from recipes.credentials import wandb_api_key

RUNTIME_ENV_FILE = REPO_ROOT / "config" / "ray_runtime_env.yaml"
SECRETS_MODULE = "gsm8k_recipe_job_secrets"
# Settings that workers on other nodes need, by prefix; the ones named in SECRET_NAMES never go in env_vars.
FORWARDED_PREFIXES = ("WANDB_", "WEAVE_", "WF_", "HF_")
SECRET_NAMES = frozenset({"WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
LAUNCHER = "bash scripts/run_gsm8k_grpo.sh"  # from Ray's copy of the repo, its working dir
NO_AGENT_YET = "No available agent to submit job"  # ray/dashboard/modules/job/job_head.py, a head just started
AGENT_WAIT_S = 120


def split_environment(environ: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(settings for env_vars, secrets) from the submitting shell's environment."""
    settings = {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES) and k not in SECRET_NAMES}
    secrets = {k: v for k, v in environ.items() if k in SECRET_NAMES and v}
    key = wandb_api_key(environ)  # also found in ~/.netrc after `wandb login`
    if key:
        secrets["WANDB_API_KEY"] = key
    return settings, secrets


def write_secrets_module(secrets: dict[str, str], parent: Path) -> Path:
    """A package whose `load()` puts the secrets into os.environ; readable by the owner only."""
    package = parent / SECRETS_MODULE
    package.mkdir(mode=0o700)
    source = (
        '"""Written by recipes/launch/ray_job.py for one Ray job; loaded by worker_process_setup_hook."""\n'
        "import os\n\n"
        f"SECRETS = {json.dumps(secrets)}\n\n\n"
        "def load():\n"
        "    for name, value in SECRETS.items():\n"
        "        os.environ.setdefault(name, value)\n"
    )
    init = package / "__init__.py"
    init.touch(mode=0o600)
    init.write_text(source)
    return package


def build_runtime_env(environ: dict[str, str], secrets_package: Path | None) -> dict:
    """config/ray_runtime_env.yaml with the repo as working dir, the forwarded settings and the secrets hook."""
    runtime_env = yaml.safe_load(RUNTIME_ENV_FILE.read_text())
    runtime_env["working_dir"] = str(REPO_ROOT)
    settings, _ = split_environment(environ)
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **settings}
    if secrets_package is not None:
        runtime_env["py_modules"] = [str(secrets_package)]
        runtime_env["worker_process_setup_hook"] = f"{SECRETS_MODULE}.load"
    return runtime_env


def parse_knobs(pairs: list[str]) -> dict[str, str]:
    """NAME=VALUE pairs of launcher knobs; a secret's name is refused (the entrypoint is shown to everyone)."""
    knobs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--knob wants NAME=VALUE, got {pair!r}")
        if name in SECRET_NAMES or name.startswith(FORWARDED_PREFIXES):
            raise ValueError(f"--knob {name}: W&B/Weave/HF settings travel in the runtime env, secrets never in "
                             "the entrypoint")
        knobs[name] = value
    return knobs


def entrypoint(overrides: list[str], knobs: dict[str, str] | None = None) -> str:
    assignments = [f"{name}={shlex.quote(value)}" for name, value in (knobs or {}).items()]
    return " ".join(["RECIPE_RESOLVED=1", *assignments, LAUNCHER, shlex.join(overrides)]).strip()


def submit(client, overrides: list[str], environ: dict[str, str], submission_id: str | None = None,
           command: str | None = None, knobs: dict[str, str] | None = None) -> str:
    """Submit the job; the secrets package exists on this machine only while Ray uploads it."""
    _, secrets = split_environment(environ)
    tmp = Path(tempfile.mkdtemp(prefix="gsm8k-recipe-job-"))
    try:
        package = write_secrets_module(secrets, tmp) if secrets else None
        return _submit_when_an_agent_is_up(
            client, entrypoint=command or entrypoint(overrides, knobs), submission_id=submission_id,
            runtime_env=build_runtime_env(environ, package))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _submit_when_an_agent_is_up(client, wait_s: float = AGENT_WAIT_S, **job) -> str:
    """A head that has just started (`ray start --head && submit` in one batch script) answers 500 "No available
    agent to submit job" until its job agent registers, tens of seconds on a busy node: wait for it, not longer."""
    deadline = time.monotonic() + wait_s
    for attempt in itertools.count():
        try:
            return client.submit_job(**job)
        except RuntimeError as err:
            if NO_AGENT_YET not in str(err) or time.monotonic() >= deadline:
                raise
            if attempt == 0:
                print(f"[submit] the cluster's job agent is not up yet; retrying for up to {wait_s:.0f} s",
                      file=sys.stderr)
            time.sleep(2)


def connect(address: str):
    """A job client for `address`. Ray 2.60 turns token auth on for a cluster when ~/.ray/auth_token exists (any
    local ray.init() writes one); `ray start` then expects it, so send it the same way Ray's own CLI does."""
    from ray.job_submission import JobSubmissionClient

    try:
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    except ImportError:  # another Ray version: no token auth to set up
        pass
    return JobSubmissionClient(address)


async def _follow(client, job_id: str) -> None:
    async for lines in client.tail_job_logs(job_id):
        print(lines, end="", flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"),
                   help="the Ray dashboard address, e.g. http://10.0.0.1:8265 (default: $RAY_ADDRESS)")
    p.add_argument("--no-follow", action="store_true", help="submit and return; do not stream the job's logs")
    p.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                   help="a launcher knob for the job's launcher (the submitting launcher passes its JOB_KNOBS)")
    p.add_argument("overrides", nargs="*")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        knobs = parse_knobs(args.knob)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not args.address:
        print("error: set RAY_ADDRESS to the Ray dashboard address, e.g. http://10.0.0.1:8265", file=sys.stderr)
        return 1
    from ray.job_submission import JobStatus

    client = connect(args.address)
    job_id = submit(client, args.overrides, dict(os.environ), submission_id=f"gsm8k-grpo-{int(time.time())}",
                    knobs=knobs)
    print(f"[submit] job {job_id} submitted to {args.address}; stop it with: ray job stop {job_id} "
          f"--address {args.address}", file=sys.stderr)
    if args.no_follow:
        return 0
    asyncio.run(_follow(client, job_id))
    status = client.get_job_status(job_id)
    print(f"[submit] job {job_id}: {status}", file=sys.stderr)
    return 0 if status == JobStatus.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
