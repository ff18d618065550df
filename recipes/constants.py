"""The one home for names that several parts of the recipe must agree on.

Data prep writes them into every parquet row, the reward function and the launcher's preflight check against them.
Change a value here and nowhere else. What belongs to one tool lives in its class (tools/), what belongs to one dataset
in its module (data_prep/).
"""

from pathlib import Path

# Where the recipe's files are: the launcher, the preflight and the tool sets resolve paths from here.
REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "config"
CONFIG_NAME = "gsm8k_multiturn_grpo"  # config/gsm8k_multiturn_grpo.yaml
PROFILE_DIR = CONFIG_DIR / "profile"
TOOL_CONFIG_DIR = CONFIG_DIR / "tool_config"
SYSTEM_PROMPT_CONFIG = CONFIG_DIR / "system_prompt.yaml"  # what data prep writes as every row's system message
AGENT_LOOP_CONFIG = CONFIG_DIR / "agent_loop.yaml"
# Real GSM8K kept beside the repo, where tests and benchmarks look for it first (as in CI); absent elsewhere.
SHARED_DIR = REPO_ROOT.parent / "shared"
SHARED_GSM8K_DIR = SHARED_DIR / "data" / "gsm8k"


HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"
ABILITY = "math"

# The agent loop each row asks for. verl registers its ToolAgentLoop under this name; the recipe's
# config/agent_loop.yaml re-declares the same name for the recipe's subclass, so the parquet works with
# plain verl and with the recipe alike.
AGENT_NAME = "tool_agent"
# Rows of a tool set without tools (`--tool_set none`): the recipe's loop offering no tools whatever the run's tool
# config offers (config/agent_loop.yaml), and a data_source of their own (data_prep/rows.py), under which verl reports
# their validation metrics apart (val-core/<data_source>/...): one launch can score the same model with tools on and
# with tools off.
AGENT_NAME_NO_TOOLS = "tool_agent_no_tools"

# GSM8K solutions end with "#### <answer>"; the model is asked to do the same.
ANSWER_MARKER = "####"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'

SPLITS = ("train", "test")

# The CPU runs' rollout (config/profile/cpu_*.yaml: actor_rollout_ref.rollout.name): the preflight allows no other on
# verl's CPU platform; its stand-in server lives with the scripts that run it (scripts/harness/cpu_backend/).
CPU_ROLLOUT_NAME = "hf_cpu"

# The W&B project: verl's metrics, the Weave rollout traces and the published validation evaluations all land
# there. Its home is the recipe config (trainer.project_name); read from there for the scripts that need it.
# (read on first use: the rest of this module needs nothing beyond Python's own library, so a shell script can ask
# recipes.folder_guard with any Python 3 before an env exists)
def __getattr__(name: str):
    if name == "PROJECT_NAME":
        import yaml

        return yaml.safe_load((CONFIG_DIR / f"{CONFIG_NAME}.yaml").read_text())["trainer"]["project_name"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
