"""The environment the launcher gives main_ppo so that a run's first screen is the plan, the preflight and verl's
step lines: Python warnings nobody acts on are filtered in every process (PYTHONWARNINGS reaches each Ray worker
and each SGLang subprocess: they inherit it from main_ppo, or on a cluster from the job's runtime env), and Ray's
token authentication is asked for by name instead of by default. docs/troubleshooting.md#console-lines lists every
known line of a GPU run, where it comes from, and which stay."""

from __future__ import annotations

# (message prefix, category) as Python's -W option takes them: the prefix is matched literally, case-insensitively,
# and may hold neither ':' nor ','. Each names where it is raised in the GPU env's site-packages.
QUIET_WARNINGS = (
    # verl/workers/engine/__init__.py:32, 41, 50, 60, 69: training backends the recipe does not use (it runs FSDP)
    ("torchtitan engine is not available", "UserWarning"),
    ("veomni engine is not available", "UserWarning"),
    ("automodel engine is not available", "UserWarning"),
    ("mindspeed engine is not available", "UserWarning"),
    ("megatron engine is not available", "UserWarning"),
    # torch/distributed/fsdp/fully_sharded_data_parallel.py:674, as verl 0.9.1 calls FSDP1's API
    # (verl/workers/engine/fsdp/transformer_impl.py:481): verl's to change, nothing for a user to do
    ("FSDP.state_dict_type() and FSDP.set_state_dict_type() are being deprecated", "FutureWarning"),
    # torch's old name for the allocator settings, called by verl/plugin/platform/platform_cuda.py:99
    ("torch.cuda._set_allocator_settings is deprecated", "FutureWarning"),
    # one GPU: FSDP does not shard (torch/distributed/fsdp/_init_utils.py:431) and so returns full state dicts
    # (torch/distributed/fsdp/_state_dict_utils.py:710)
    ("FSDP is switching to use `NO_SHARD` instead of", "UserWarning"),
    ("When using ``NO_SHARD`` for ``ShardingStrategy``", "UserWarning"),
    # SGLang's HTTP server answers with a response class FastAPI deprecated (fastapi/responses.py:69)
    ("ORJSONResponse is deprecated", "Warning"),
)
# What Ray 2.60 picks for a cluster ray.init starts when RAY_AUTH_MODE is unset, warning that it did
# (ray/_private/authentication/authentication_token_setup.py:85); named, it is kept without the warning.
RAY_AUTH_MODE = "token"


def warning_filters() -> str:
    for message, _ in QUIET_WARNINGS:
        if ":" in message or "," in message:
            raise ValueError(f"{message!r}: a -W message prefix can hold neither ':' nor ','")
    return ",".join(f"ignore:{message}:{category}" for message, category in QUIET_WARNINGS)


def quiet_environment(environ: dict[str, str], cluster: bool) -> dict[str, str]:
    """The variables to add to main_ppo's environment. A user's own PYTHONWARNINGS comes last, so it wins (Python
    applies later filters first); a user's RAY_AUTH_MODE is kept. On a cluster (`cluster`), Ray's auth mode is the
    cluster's, never set here."""
    env = {"PYTHONWARNINGS": ",".join(filter(None, [warning_filters(), environ.get("PYTHONWARNINGS")]))}
    if not cluster and "RAY_AUTH_MODE" not in environ:
        env["RAY_AUTH_MODE"] = RAY_AUTH_MODE
    return env
