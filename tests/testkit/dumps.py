"""verl's rollout / validation dumps made from real agent-loop outputs, as its trainer writes them
(RayPPOTrainer._write_generations): the decoded prompt and response, the score the recipe's agent loop handed
verl and the reward's extra keys. Stands in for nothing but the trainer around the writer."""

from __future__ import annotations

from recipes.gsm8k.agent_loop import REWARD_EXTRA_INFO


def write_verl_dump(tok, outputs, ground_truths: list[str], folder, step: int) -> None:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    inputs = [tok.decode(o.prompt_ids, skip_special_tokens=True) for o in outputs]
    texts = [tok.decode(o.response_ids, skip_special_tokens=True) for o in outputs]
    scores = [o.reward_score for o in outputs]
    extras = [o.extra_fields[REWARD_EXTRA_INFO] for o in outputs]
    columns = {"reward": scores, **{key: [e[key] for e in extras] for key in extras[0]}}
    RayPPOTrainer._write_generations(inputs, texts, ground_truths, scores, columns, str(folder), step)
