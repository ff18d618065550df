"""One GPU's share of a profile's GRPO step: the profile's config as the launcher composes it, divided by its GPUs
where verl divides the work by them, and nothing else changed. On the 8xh100 profile: 256 prompts x 16 rollouts
over 8 GPUs is 32 prompts (512 trajectories) a GPU, the same mini-batch per GPU (verl counts it in prompts over all
ranks), the same micro-batches, the same SGLang engine (TP 1, max_num_seqs, gpu_memory_utilization) and 2 of the
node's 16 agent-loop workers: what each GPU of the node does in a step, on one GPU.

What the probe then changes, for one timed step: a single step, no validation, no checkpoint, no traces, and every
response run to its length limit (SGLang's `ignore_eos` as a server default, `preferred_sampling_params`): the
step's upper bound, whatever the weights write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from omegaconf import DictConfig, OmegaConf

GSM8K_TRAIN_ROWS = 7473  # GSM8K's train split: the run a projection is for
FORCED_LENGTH = json.dumps({"ignore_eos": True})
ROLLOUT = "actor_rollout_ref.rollout"
UPDATE_MICRO_BATCH = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
LOG_PROB_MICRO_BATCHES = ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                          f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu")


class ShareError(ValueError):
    """A profile whose step does not divide over its GPUs; the message is one line."""


def _get(config: DictConfig, key: str):
    return OmegaConf.select(config, key)


@dataclass(frozen=True)
class Share:
    profile: str
    model: str
    gpus: int  # the profile's GPUs: n_gpus_per_node x nnodes
    prompts: int  # a step's, on all of them
    n: int
    mini_batch: int  # prompts per actor update, on all of them
    workers: int  # agent-loop workers, on all of them
    prompt_length: int
    response_length: int
    micro_batch: int  # ppo_micro_batch_size_per_gpu, the update's: a GPU's, unchanged
    log_prob_micro_batch: int  # the reference's and old log-probs' (the rollout's log_prob_micro_batch_size_per_gpu)
    rollout: str
    max_num_seqs: int
    memory_fraction: float  # SGLang's gpu_memory_utilization
    run_steps: int  # the profile's run on GSM8K: steps per epoch x epochs (or total_training_steps)

    @property
    def prompts_per_gpu(self) -> int:
        return self.prompts // self.gpus

    @property
    def trajectories_per_gpu(self) -> int:
        return self.prompts_per_gpu * self.n

    @property
    def mini_batch_per_gpu(self) -> int:
        return self.mini_batch // self.gpus

    @property
    def workers_per_gpu(self) -> int:
        return max(1, self.workers // self.gpus)

    def overrides(self) -> list[str]:
        """The hydra overrides that make one GPU run this share for one timed step (with N_GPUS_PER_NODE=1,
        NNODES=1 as the launcher's knobs); the sizes are the profile's own unless sized_down() changed them."""
        return [f"data.train_batch_size={self.prompts_per_gpu}",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={self.mini_batch_per_gpu}",
                f"{ROLLOUT}.agent.num_workers={self.workers_per_gpu}", f"{ROLLOUT}.n={self.n}",
                f"data.max_response_length={self.response_length}", f"{UPDATE_MICRO_BATCH}={self.micro_batch}",
                *(f"{key}={self.log_prob_micro_batch}" for key in LOG_PROB_MICRO_BATCHES),
                "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.test_freq=-1",
                "trainer.save_freq=-1",
                # the probe's rows are GSM8K's first ones, far under every profile's prompt limit: verl's overlong
                # filter would drop none, and it costs the launch's start seconds a file (datasets hashes the tokenizer)
                "data.filter_overlong_prompts=false",
                f"++{ROLLOUT}.engine_kwargs.{self.rollout}.preferred_sampling_params='{FORCED_LENGTH}'"]

    def sized_down(self, prompts_per_gpu: int, n: int, response_length: int, micro_batch: int, rollout: str,
                   one_worker: bool = False, log_prob_micro_batch: int | None = None) -> Share:
        """The same share at another size (a smaller micro-batch on a GPU; the CPU stand-ins' rehearsal, a size a CPU
        runs): one GPU's prompts, the group size, the response limit and the micro-batches given (the log-prob passes'
        the update's unless given), the rollout given; one_worker: one agent-loop worker a GPU (each is a process to
        start)."""
        return replace(self, prompts=prompts_per_gpu * self.gpus, mini_batch=prompts_per_gpu * self.gpus, n=n,
                       response_length=response_length, micro_batch=micro_batch, rollout=rollout,
                       log_prob_micro_batch=log_prob_micro_batch or micro_batch,
                       workers=self.gpus if one_worker else self.workers)

    def passes(self, micro_batch: int) -> int:
        """Forward (or forward and backward) passes of a GPU's trajectories at this micro-batch."""
        return -(-self.trajectories_per_gpu // micro_batch)

    def plan_lines(self) -> list[str]:
        return [f"share      {self.profile}: {self.prompts} prompts x {self.n} over {self.gpus} GPU(s) -> one GPU runs "
                f"{self.prompts_per_gpu} prompts, {self.trajectories_per_gpu} trajectories; mini-batch "
                f"{self.mini_batch_per_gpu} prompts, micro-batch {self.micro_batch} (the log-prob passes' "
                f"{self.log_prob_micro_batch}); {self.workers_per_gpu} of {self.workers} agent-loop workers",
                f"lengths    prompts up to {self.prompt_length}, every response run to {self.response_length} tokens "
                f"(ignore_eos): at most {self.trajectories_per_gpu * self.response_length:,} generated tokens",
                f"rollout    {self.rollout}: max_num_seqs {self.max_num_seqs}, gpu_memory_utilization "
                f"{self.memory_fraction}",
                f"run        {self.run_steps} steps of the profile on GSM8K's {GSM8K_TRAIN_ROWS:,} train rows"]


def share_of(config: DictConfig, profile: str) -> Share:
    """The share of the profile's composed config (recipes.launch.knobs.compose_launch_config)."""
    gpus = int(_get(config, "trainer.n_gpus_per_node")) * int(_get(config, "trainer.nnodes") or 1)
    prompts = int(_get(config, "data.train_batch_size"))
    mini = int(_get(config, "actor_rollout_ref.actor.ppo_mini_batch_size"))
    for name, value in (("data.train_batch_size", prompts), ("actor_rollout_ref.actor.ppo_mini_batch_size", mini)):
        if value % gpus:
            raise ShareError(f"profile {profile}: {name} {value} does not divide over its {gpus} GPUs")
    fixed = _get(config, "trainer.total_training_steps")
    steps = int(fixed) if fixed else GSM8K_TRAIN_ROWS // prompts * int(_get(config, "trainer.total_epochs"))
    return Share(profile=profile, model=str(_get(config, "actor_rollout_ref.model.path")), gpus=gpus, prompts=prompts,
                 n=int(_get(config, f"{ROLLOUT}.n")), mini_batch=mini,
                 workers=int(_get(config, f"{ROLLOUT}.agent.num_workers")),
                 prompt_length=int(_get(config, "data.max_prompt_length")),
                 response_length=int(_get(config, "data.max_response_length")),
                 micro_batch=int(_get(config, UPDATE_MICRO_BATCH)),
                 log_prob_micro_batch=int(_get(config, LOG_PROB_MICRO_BATCHES[1])),
                 rollout=str(_get(config, f"{ROLLOUT}.name")),
                 max_num_seqs=int(_get(config, f"{ROLLOUT}.max_num_seqs")),
                 memory_fraction=float(_get(config, f"{ROLLOUT}.gpu_memory_utilization")), run_steps=steps)
