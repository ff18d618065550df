"""The CPU stand-ins of scripts/harness/cpu_backend, piece by piece, with a real tiny Qwen2 model (Qwen2.5
tokenizer and chat template) and verl's own parsers and config classes. The whole path through verl's main_ppo is
tests/test_e2e_cpu.py."""

import asyncio
import json

import pytest
import torch

from harness.cpu_backend.generation import Sampling, generate
from harness.cpu_backend.steering import SteeringLedger, forced_tool_call, is_first_turn, prompt_key
from harness.qwen_tokenizer import build_tiny_qwen2_model_dir
from recipes.gsm8k.reward import count_tool_calls
from recipes.gsm8k.tool_sets import get_tool_set
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.unit

QUESTION = "Natalia sold 48 clips in April and half as many in May. How many clips did she sell in total?"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_qwen2_model_dir(tmp_path_factory.mktemp("cpu_verl") / "tiny")


@pytest.fixture(scope="module")
def server(model_dir):
    from verl.workers.config import RolloutConfig

    from harness.cpu_backend.server import CpuRolloutServer

    config = RolloutConfig(name="hf_cpu", prompt_length=512, response_length=24, load_format="auto")
    model_config = {"path": str(model_dir), "override_config": {"attn_implementation": "sdpa"}}
    return CpuRolloutServer(config=config, model_config=model_config, replica_rank=0)


@pytest.fixture(scope="module")
def tok(server):
    return server.tokenizer


def first_turn_text(tok, question=QUESTION) -> str:
    """A first-turn prompt as verl's agent loop renders it: chat template with the calculator's schema."""
    tools = get_tool_set("calculator").chat_schemas()
    messages = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": question}]
    return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def full_log_probs(model, ids: list[int], start: int) -> list[float]:
    """Log-prob of ids[start:] under one full forward pass (no KV cache)."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    scores = torch.log_softmax(logits[start - 1:-1], dim=-1)
    return scores.gather(1, torch.tensor(ids[start:])[:, None])[:, 0].tolist()


class LocalActor:
    """Test double for a Ray actor handle: `handle.method.remote(...)` awaits the object's method in-process."""

    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        method = getattr(self._obj, name)

        class _Remote:
            @staticmethod
            async def remote(*args, **kwargs):
                return method(*args, **kwargs)

        return _Remote()


def test_forced_tokens_get_the_models_own_log_probs_and_the_kv_cache_loop_matches_a_full_pass(server, tok):
    prompt = encode(tok, first_turn_text(tok))
    forced = encode(tok, forced_tool_call(first_turn_text(tok))) + [tok.eos_token_id]
    out = generate(server.model, prompt, 100, Sampling(temperature=1.0), {tok.eos_token_id}, torch.Generator(), forced)
    assert out.token_ids == forced and out.stop_reason == "stop"  # the EOS ends the turn and is part of it
    assert out.log_probs == pytest.approx(full_log_probs(server.model, prompt + forced, len(prompt)), abs=1e-4)


def test_greedy_sampling_follows_the_argmax_and_stops_at_the_length_limit(server, tok):
    prompt = encode(tok, first_turn_text(tok))
    out = generate(server.model, prompt, 5, Sampling(temperature=0), set(), torch.Generator())
    assert len(out.token_ids) == 5 and out.stop_reason == "length"
    ids = list(prompt)
    for token in out.token_ids:
        with torch.inference_mode():
            assert token == int(server.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        ids.append(token)


def test_top_k_one_is_greedy_and_a_stop_token_from_the_request_ends_the_output(server, tok):
    prompt = encode(tok, first_turn_text(tok))
    greedy = generate(server.model, prompt, 3, Sampling(temperature=0), set(), torch.Generator())
    top1 = generate(server.model, prompt, 3, Sampling(temperature=5.0, top_k=1), set(), torch.Generator())
    assert top1.token_ids == greedy.token_ids
    stop = greedy.token_ids[1]
    stopped = generate(server.model, prompt, 3, Sampling(temperature=0), {stop}, torch.Generator())
    assert stopped.token_ids == greedy.token_ids[:greedy.token_ids.index(stop) + 1] and stopped.stop_reason == "stop"
    with pytest.raises(NotImplementedError, match="repetition_penalty"):
        Sampling.from_params({"repetition_penalty": 1.1})


def test_the_server_applies_sglangs_length_rule_and_returns_log_probs_only_when_asked(server, tok):
    prompt = encode(tok, first_turn_text(tok))
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    out = asyncio.run(server.generate(prompt, dict(params), "r1"))
    assert len(out.token_ids) <= 24 and len(out.log_probs) == len(out.token_ids)  # response_length caps a turn
    # a late turn: only prompt_length + response_length - len(prompt) tokens are left
    long_prompt = prompt + [tok.pad_token_id] * (512 + 24 - len(prompt) - 3)
    late = asyncio.run(server.generate(long_prompt, {**params, "logprobs": False}, "r2"))
    assert late.log_probs is None and len(late.token_ids) <= 3 and late.extra_fields == {"global_steps": None}
    assert len(asyncio.run(server.generate(prompt, {**params, "max_tokens": 2}, "r3")).token_ids) <= 2


def test_ignore_eos_runs_a_turn_to_its_length_limit_and_the_servers_preferred_params_are_defaults(model_dir, tok):
    """SGLang's `ignore_eos` sampling parameter ends a turn only at max_new_tokens (no EOS, no stop token), and its
    server argument `preferred_sampling_params` (JSON, under engine_kwargs) gives every request defaults that the
    request's own parameters override; the stand-in honours both as SGLang 0.5.12 does."""
    from verl.workers.config import RolloutConfig

    from harness.cpu_backend.server import CpuRolloutServer

    prompt = encode(tok, first_turn_text(tok))
    params = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}

    def server(**engine):
        config = RolloutConfig(name="hf_cpu", prompt_length=512, response_length=24, load_format="auto",
                               engine_kwargs={"hf_cpu": engine})
        model_config = {"path": str(model_dir), "override_config": {"attn_implementation": "sdpa"}}
        return CpuRolloutServer(config=config, model_config=model_config, replica_rank=0)

    plain = server()
    greedy = asyncio.run(plain.generate(prompt, dict(params), "g"))
    stop = greedy.token_ids[0]  # a stop token the greedy turn meets at once
    stopped = asyncio.run(plain.generate(prompt, {**params, "stop_token_ids": [stop]}, "s"))
    assert stopped.token_ids == [stop] and stopped.stop_reason == "stop"
    forced = asyncio.run(plain.generate(prompt, {**params, "stop_token_ids": [stop], "ignore_eos": True}, "f"))
    assert len(forced.token_ids) == 24 and forced.stop_reason == "length"
    assert forced.token_ids == asyncio.run(plain.generate(prompt, {**params, "ignore_eos": True}, "f2")).token_ids
    by_default = server(preferred_sampling_params=json.dumps({"ignore_eos": True}))
    out = asyncio.run(by_default.generate(prompt, {**params, "stop_token_ids": [stop]}, "d"))
    assert out.token_ids == forced.token_ids and out.stop_reason == "length"
    asked = asyncio.run(by_default.generate(prompt, {**params, "stop_token_ids": [stop], "ignore_eos": False}, "o"))
    assert asked.token_ids == [stop]  # the request's own parameter wins
    with pytest.raises(ValueError, match="preferred_sampling_params"):
        server(preferred_sampling_params="{ignore_eos")


def test_what_a_request_samples_does_not_depend_on_which_request_came_first(model_dir, tok):
    """Sampled at temperature 1, each request draws from its own generator (rollout seed, replica, weights version,
    prompt, how many requests sent that prompt before): two servers that get the same requests in opposite orders
    sample the same per request, as concurrent multi-turn rollouts reach the model in a different order each run."""
    from verl.workers.config import RolloutConfig

    from harness.cpu_backend.server import CpuRolloutServer

    def fresh_server():
        config = RolloutConfig(name="hf_cpu", prompt_length=512, response_length=12, load_format="auto", seed=7)
        model_config = {"path": str(model_dir), "override_config": {"attn_implementation": "sdpa"}}
        return CpuRolloutServer(config=config, model_config=model_config, replica_rank=0)

    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1}
    first, second = (encode(tok, first_turn_text(tok, q)) for q in (QUESTION, "What is 7 times 8?"))

    def sample(server, prompts):
        return [asyncio.run(server.generate(p, dict(params), f"r{i}")).token_ids for i, p in enumerate(prompts)]

    a1, b1, a2 = sample(fresh_server(), [first, second, first])
    b1_, a1_, a2_ = sample(fresh_server(), [second, first, first])
    assert (a1_, b1_, a2_) == (a1, b1, a2)
    assert a1 != a2  # the same prompt sent twice (a GRPO group) gets different samples


def test_the_forced_call_is_a_well_formed_call_for_verls_parser_and_the_recipes_reward(tok):
    from verl.experimental.agent_loop.tool_parser import ToolParser

    text = first_turn_text(tok)
    assert is_first_turn(text)
    call = forced_tool_call(text)
    parser = ToolParser.get_tool_parser("hermes", tok)
    _, calls = asyncio.run(parser.extract_tool_calls(encode(tok, call) + [tok.eos_token_id]))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(CALCULATOR, {"expression": "48 + 1"})]
    assert count_tool_calls(call) == (1, 0)
    later = text + call + "<|im_end|>\n<|im_start|>user\n<tool_response>\n49\n</tool_response><|im_end|>\n" \
                          "<|im_start|>assistant\n"
    assert not is_first_turn(later)  # only first turns are steered
    assert forced_tool_call("<|im_start|>user\nno tools here<|im_end|>\n<|im_start|>assistant\n") is None


def test_the_ledger_steers_one_rollout_of_each_pair_per_weights_version():
    ledger = SteeringLedger(steer_every=2)
    a, b = prompt_key([1, 2, 3]), prompt_key([1, 2, 4])
    assert [ledger.claim(a, 0), ledger.claim(b, 0), ledger.claim(a, 0), ledger.claim(b, 0), ledger.claim(a, 0)] == \
        [True, True, False, False, True]
    assert ledger.claim(a, 1)  # new weights: counting starts over
    with pytest.raises(ValueError):
        SteeringLedger(steer_every=0)


def test_a_group_of_two_gets_exactly_one_steered_first_turn(server, tok):
    server.steering = LocalActor(SteeringLedger(steer_every=2))
    try:
        prompt = encode(tok, first_turn_text(tok, "Tom has 3 apples and buys 4 more. How many?"))
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
        outs = [asyncio.run(server.generate(prompt, dict(params), f"r{i}")) for i in range(2)]
    finally:
        server.steering = None
    calls = [count_tool_calls(tok.decode(out.token_ids))[0] for out in outs]
    assert calls == [1, 0]
    assert tok.decode(outs[0].token_ids).endswith("</tool_call><|im_end|>")


def test_weights_from_the_trainer_replace_the_rollout_weights_and_change_the_checksum(server, model_dir):
    from transformers import AutoModelForCausalLM

    from harness.cpu_backend.server import weights_checksum

    before = weights_checksum(server.model)
    trained = AutoModelForCausalLM.from_pretrained(str(model_dir))
    with torch.no_grad():
        trained.model.norm.weight.add_(0.5)
    state = {k: v for k, v in trained.state_dict().items() if k != "lm_head.weight"}  # tied: sent once
    asyncio.run(server.load_weights(state, global_steps=3))
    assert weights_checksum(server.model) == weights_checksum(trained) != before
    assert server.global_steps == 3
    with pytest.raises(RuntimeError, match="unexpected"):
        asyncio.run(server.load_weights({**state, "extra.weight": torch.zeros(1)}, global_steps=4))


def test_the_cpu_platform_answers_for_verl():
    from harness.cpu_backend.platform import CPU_DEVICE, CpuPlatform

    platform = CpuPlatform()
    assert (platform.device_name, platform.communication_backend_name(), platform.ray_resource_name()) == \
        ("cpu", "gloo", "GPU")
    assert torch.ones(1).to(platform.current_device()).device.type == "cpu"
    assert not CPU_DEVICE.is_available()  # verl skips its accelerator-memory bookkeeping
    CPU_DEVICE.empty_cache()
    CPU_DEVICE.synchronize()
    assert CPU_DEVICE.get_rng_state().equal(torch.get_rng_state())


def test_the_launch_preflight_counts_no_gpus_for_cpu_ranks(monkeypatch):
    from recipes.config_view import ConfigView
    from recipes.preflight.checks import check_gpus
    from recipes.preflight.compose import compose_config
    from recipes.preflight.findings import Report

    config = ConfigView.of(compose_config(["profile=cpu_smoke"]))
    report = Report()
    check_gpus(config, report, visible=0)
    assert report.errors == ["no GPU visible but trainer.n_gpus_per_node=2; fix CUDA_VISIBLE_DEVICES, or run on a GPU "
                             "node"]
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    report = Report()
    check_gpus(config, report, visible=0)
    assert report.errors == []
