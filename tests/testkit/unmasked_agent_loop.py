"""Learning broken on purpose (the chain check, scripts/learn_cpu.sh TASK=chain): the recipe's agent loop with
verl's response mask set to 1 on the tool turns too, so GRPO trains the policy on the calculator's answers and the
chat template's tool markers as if the model had written them (what the response mask exists to prevent). The
trajectory is scored first, from the true mask, so only training changes. Select with
`actor_rollout_ref.rollout.agent.agent_loop_config_path=<repo>/tests/testkit/unmasked_agent_loop.yaml` and
<repo>/tests on PYTHONPATH (the Ray workers import it as testkit.unmasked_agent_loop)."""

from recipes.gsm8k.agent_loop import ScoredToolAgentLoop


class UnmaskedToolAgentLoop(ScoredToolAgentLoop):
    async def run(self, sampling_params, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        output.response_mask = [1] * len(output.response_mask)
        return output
