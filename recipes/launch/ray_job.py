"""Submit a training run to a Ray cluster as a job (scripts/submit_multinode.sh -> the launcher with SUBMIT=ray).

What crosses to other nodes, and how:
- the code: Ray uploads the repo as every worker's working directory (config/ray_runtime_env.yaml). Ray skips
  what .gitignore names, so nothing secret may live there;
- settings: W&B / Weave / Hugging Face settings of the submitting shell go in the runtime env's `env_vars`,
  which Ray applies to every worker process on every node (a worker inherits the raylet's environment, not the
  submitting shell's). `ray job list` and the dashboard print `env_vars`, so secrets never go there;
- secrets (WANDB_API_KEY, also from ~/.netrc after `wandb login`; HF_TOKEN): sealed (AES-GCM) with a key derived
  from the cluster's Ray token, written to a one-file Python package, uploaded with the job as a `py_module` and
  opened into each worker's environment by Ray's `worker_process_setup_hook`. Ray writes that package where every
  user of a node can read it (its zip lands 0644 under the 0777 runtime_resources/ while it is unpacked; a job's
  `env_vars` reach `ps` through the worker's setup command line): only the sealed form ever does, and only a process
  holding the cluster's token can open it, which only the job's own processes (and whoever could run code on the
  cluster anyway) do. A cluster without token authentication gets no secret at all (OpenCluster);
- the launch itself: the entrypoint is the launcher again (ENTRYPOINT, `python3 -m recipes.launch --job`), in
  Ray's copy of the repo, and what the submitting launcher resolved (its knobs, main_ppo's overrides: no secret)
  travels in the runtime env as LAUNCH_ENV, so nothing is looked up twice and no shell runs it again.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from recipes.constants import REPO_ROOT
from recipes.credentials import wandb_api_key
from recipes.launch.console import quiet_environment

RUNTIME_ENV_FILE = REPO_ROOT / "config" / "ray_runtime_env.yaml"
SECRETS_MODULE = "gsm8k_recipe_job_secrets"
# Settings that workers on other nodes need, by prefix; the ones named in SECRET_NAMES never go in env_vars.
FORWARDED_PREFIXES = ("WANDB_", "WEAVE_", "WF_", "HF_")
SECRET_NAMES = frozenset({"WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
ENTRYPOINT = "python3 -m recipes.launch --job"  # from Ray's copy of the repo, its working dir
LAUNCH_ENV = "GSM8K_RECIPE_LAUNCH"  # JSON: the submitting launcher's knobs and main_ppo's overrides
# ray/dashboard/http_server_head.py: public (no token needed), answers {"authentication_mode": "token" | "disabled"}
AUTH_MODE_PATH = "/api/authentication_mode"
NO_AGENT_YET = "No available agent to submit job"  # ray/dashboard/modules/job/job_head.py, a head just started
AGENT_WAIT_S = 120
_SEAL_CONTEXT = b"gsm8k-recipe job secrets v1"  # the sealing key: HMAC-SHA256(the cluster's token, this)


class OpenCluster(RuntimeError):
    """No secret is sent to this cluster (it runs without Ray's token auth, or this machine has no token for it); the
    message is the one line the user sees."""


def split_environment(environ: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(settings for env_vars, secrets) from the submitting shell's environment."""
    settings = {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES) and k not in SECRET_NAMES}
    secrets = {k: v for k, v in environ.items() if k in SECRET_NAMES and v}
    key = wandb_api_key(environ)  # also found in ~/.netrc after `wandb login`
    if key:
        secrets["WANDB_API_KEY"] = key
    return settings, secrets


def cluster_token() -> str:
    """The Ray token this process presents to the cluster (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token,
    as Ray itself finds it); "" when it has none."""
    from ray._raylet import AuthenticationTokenLoader

    return AuthenticationTokenLoader.instance().get_raw_token(ignore_auth_mode=True)


def _sealing_key(token: str) -> bytes:
    return hmac.new(token.encode(), _SEAL_CONTEXT, hashlib.sha256).digest()


def seal(secrets: dict[str, str], token: str) -> str:
    """`secrets`, sealed (AES-256-GCM) with a key derived from the cluster's `token`: text a module can hold."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(12)
    sealed = AESGCM(_sealing_key(token)).encrypt(nonce, json.dumps(secrets).encode(), SECRETS_MODULE.encode())
    return base64.b64encode(nonce + sealed).decode()


def unseal(sealed: str, token: str) -> dict[str, str]:
    """What `seal` sealed; cryptography's InvalidTag for another token (or an altered text)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    raw = base64.b64decode(sealed)
    return json.loads(AESGCM(_sealing_key(token)).decrypt(raw[:12], raw[12:], SECRETS_MODULE.encode()))


def open_sealed(sealed: str) -> None:
    """In a process of the job (its entrypoint, each worker): the sealed secrets into os.environ, opened with the
    cluster's token this process holds. ValueError, one line, when they cannot be opened here."""
    from cryptography.exceptions import InvalidTag

    try:
        secrets = unseal(sealed, cluster_token())
    except (InvalidTag, ValueError) as err:
        raise ValueError(f"the job's secrets cannot be opened with this node's Ray token ({type(err).__name__}): "
                           "every node and the submitting machine must use the cluster's one token") from None
    for name, value in secrets.items():
        os.environ.setdefault(name, value)


def write_secrets_module(sealed: str, parent: Path) -> Path:
    """A package whose `load()` opens the sealed secrets into os.environ; readable by the owner only."""
    package = parent / SECRETS_MODULE
    package.mkdir(mode=0o700, parents=True)
    source = (
        '"""Written by recipes/launch/ray_job.py for one Ray job; loaded by worker_process_setup_hook. Sealed with the '
        'cluster\'s token."""\n'
        f"SEALED = {json.dumps(sealed)}\n\n\n"
        "def load():\n"
        "    from recipes.launch.ray_job import open_sealed\n\n"
        "    open_sealed(SEALED)\n"
    )
    init = package / "__init__.py"
    init.touch(mode=0o600)
    init.write_text(source)
    return package


def sealing_token(address: str | None) -> str:
    """The cluster's token to seal the job's secrets with; OpenCluster when the cluster at `address` runs without
    token authentication or this machine holds no token (the secrets would be anyone's who reaches it)."""
    mode = cluster_auth_mode(address) if address else None
    token = cluster_token()
    if mode not in (None, "token") or not token:
        raise OpenCluster(f"the Ray cluster at {address or 'RAY_ADDRESS'} runs without authentication (or this machine "
                          "has no Ray token for it): the W&B key is not sent there, where whoever reaches its ports "
                          "would read it; start it with RAY_AUTH_MODE=token (docs/multi-node.md#a-closed-cluster)")
    warn_if_token_readable()
    return token


def warn_if_token_readable(environ: dict[str, str] | None = None, out=None) -> bool:
    """One line when the Ray token file in use can be read by another user (Ray writes ~/.ray/auth_token with the
    umask's mode): whoever reads it runs code on the cluster and opens the job's secrets."""
    environ = os.environ if environ is None else environ
    if environ.get("RAY_AUTH_TOKEN"):
        return False
    path = Path(environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return False
    if not mode & 0o077:
        return False
    print(f"warning: the Ray token file {path} can be read by another user (mode {mode:o}): whoever reads it runs code "
          f"on the cluster as you and opens the job's secrets; `chmod 600 {path}`", file=out or sys.stderr,
          flush=True)
    return True


def build_runtime_env(environ: dict[str, str], secrets_package: Path | None) -> dict:
    """config/ray_runtime_env.yaml with the repo as working dir, the forwarded settings and the secrets hook."""
    runtime_env = yaml.safe_load(RUNTIME_ENV_FILE.read_text())
    runtime_env["working_dir"] = str(REPO_ROOT)
    settings, _ = split_environment(environ)
    # every worker on every node: they inherit the raylet's environment, not the launcher's (recipes/launch/console.py)
    quiet = quiet_environment(environ, cluster=True)
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **quiet, **settings}
    if secrets_package is not None:
        runtime_env["py_modules"] = [str(secrets_package)]
        runtime_env["worker_process_setup_hook"] = f"{SECRETS_MODULE}.load"
    return runtime_env


def job_payload(knobs: dict[str, str], overrides: list[str]) -> str:
    """What the cluster's launcher gets: knobs by their shell names, and main_ppo's overrides as resolved."""
    names = [name for name in knobs if name in SECRET_NAMES or name.startswith(FORWARDED_PREFIXES)]
    if names:
        raise ValueError(f"{names}: W&B/Weave/HF settings travel in the runtime env, secrets never in the payload")
    return json.dumps({"knobs": knobs, "overrides": overrides})


def load_job_secrets() -> None:
    """On the cluster, in the job's entrypoint: the secrets the submitter uploaded, opened with the cluster's token
    (its preflight and relays need the W&B key too; Ray loads them into the job's workers by itself). Nothing when none
    were uploaded."""
    import importlib

    try:
        importlib.import_module(SECRETS_MODULE).load()
    except ImportError:
        pass


def read_job_payload(environ: dict[str, str]) -> dict:
    """The payload on the cluster side; ValueError with a line to show when it is missing or broken."""
    try:
        payload = json.loads(environ[LAUNCH_ENV])
        return {"knobs": dict(payload["knobs"]), "overrides": list(payload["overrides"])}
    except (KeyError, ValueError, TypeError) as err:
        raise ValueError(f"--job runs as a Ray job's entrypoint, with {LAUNCH_ENV} from the submitting launcher "
                         f"(SUBMIT=ray); it is missing or unreadable: {err}") from None


def submit(client, payload: str | None, environ: dict[str, str], submission_id: str | None = None,
           command: str | None = None, address: str | None = None) -> str:
    """Submit the job to the cluster at `address`; its secrets sealed with the cluster's token (OpenCluster, before
    anything is sent, for a cluster without token auth); the package exists on this machine only while Ray uploads
    it."""
    _, secrets = split_environment(environ)
    sealed = seal(secrets, sealing_token(address)) if secrets else None
    tmp = Path(tempfile.mkdtemp(prefix="gsm8k-recipe-job-"))
    try:
        package = write_secrets_module(sealed, tmp) if sealed else None
        runtime_env = build_runtime_env(environ, package)
        if payload is not None:
            runtime_env["env_vars"][LAUNCH_ENV] = payload
        return _submit_when_an_agent_is_up(client, entrypoint=command or ENTRYPOINT, submission_id=submission_id,
                                           runtime_env=runtime_env)
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


def cluster_auth_mode(address: str, timeout_s: float = 10.0) -> str | None:
    """The cluster's Ray authentication mode as its dashboard says ("token", "disabled"); None when it cannot say."""
    if not address.startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(address.rstrip("/") + AUTH_MODE_PATH, timeout=timeout_s) as answer:
            return json.load(answer).get("authentication_mode")
    except (OSError, ValueError, AttributeError):
        return None


def warn_if_open(address: str, out=None) -> bool:
    """One line when the cluster at `address` runs without authentication; whether it does."""
    if cluster_auth_mode(address) != "disabled":
        return False
    print(f"warning: the Ray cluster at {address} runs without authentication: whoever reaches its ports runs code "
          "there as you and reads the W&B key this job ships; start it with RAY_AUTH_MODE=token "
          "(docs/multi-node.md#a-closed-cluster)", file=out or sys.stderr, flush=True)
    return True


async def _follow(client, job_id: str) -> None:
    async for lines in client.tail_job_logs(job_id):
        print(lines, end="", flush=True)


def submit_and_follow(address: str, payload: str, environ: dict[str, str], follow: bool = True) -> int:
    """Submit the launch to the cluster at `address` and stream its logs until it ends; the job's outcome."""
    from ray.job_submission import JobStatus

    warn_if_open(address)
    client = connect(address)
    try:
        job_id = submit(client, payload, environ, submission_id=f"gsm8k-grpo-{int(time.time())}", address=address)
    except OpenCluster as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"[submit] job {job_id} submitted to {address}; stop it with: ray job stop {job_id} --address {address}",
          file=sys.stderr)
    if not follow:
        return 0
    try:
        asyncio.run(_follow(client, job_id))
    except KeyboardInterrupt:
        print(f"\n[submit] stopped following; the job goes on: ray job stop {job_id} --address {address}",
              file=sys.stderr)
        return 130
    status = client.get_job_status(job_id)
    print(f"[submit] job {job_id}: {status}", file=sys.stderr)
    return 0 if status == JobStatus.SUCCEEDED else 1
