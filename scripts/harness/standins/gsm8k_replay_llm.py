"""Stand-in for the SGLang servers behind verl's agent loop, for measuring the agent loop at a production step's
load (scripts/bench_rollout.py): it answers at once, with what a Qwen2.5 policy trained on GSM8K writes.

Each answer replays the GSM8K training solution of the question in the prompt as multi-turn hermes tool use:
every `<<expr=value>>` step becomes a `calculator` call (one per turn, as verl's max_parallel_calls=1 runs them;
steps beyond the turn limit are written out in the last turn), the text around it is what the model "writes", and
the last turn ends with `#### answer`. So the number of turns, the tool calls and the lengths follow GSM8K's own
distribution, tokenized with the real Qwen2.5 tokenizer and ended with `<|im_end|>` as SGLang returns them.

A share of trajectories goes wrong the ways a policy does, so every branch of the agent loop, the parser and the
reward runs: a malformed call (the JSON cut short: the parser answers "Invalid JSON" and the model retries), a
wrong final answer, no tool call at all, and an over-long first turn that runs into the response-length limit.
Which one a trajectory follows is drawn at its first turn and written into that turn (its opening sentence,
KINDS below), so later turns, which arrive as new requests with the whole context, read it back: like SGLang,
the server keeps no per-trajectory state.

The server side of verl's contract that the agent loop sees: `generate(prompt_ids, sampling_params, request_id,
...) -> TokenOutput`, SGLang's length rule (an explicit max_tokens/max_new_tokens, else min(response_length,
prompt_length + response_length - len(prompt_ids))), log-probs when asked, `extra_fields["global_steps"]`.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, OrderedDict
from pathlib import Path

from recipes.constants import ANSWER_MARKER, INSTRUCTION
from tools.calculator import NAME as CALCULATOR

_STEP = re.compile(r"<<([^<>]*)>>")
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

# (opening sentence of the first turn, what the trajectory does), dealt from a shuffled deck of all 20 (so any 20
# first turns of a server hold each exactly as often as below): 13/20 solve with the calculator, 2/20 answer wrong,
# 2/20 break their first call, 2/20 use no tool, 1/20 run past the length limit.
KINDS = (
    ("Let me work through this step by step.", "solve"),
    ("I'll solve this one piece at a time.", "solve"),
    ("Let's break the problem down.", "solve"),
    ("First, let me figure out the parts.", "solve"),
    ("We can compute this in a few steps.", "solve"),
    ("Let me start with what we know.", "solve"),
    ("To answer this, I will calculate each part.", "solve"),
    ("Let's compute the quantities one by one.", "solve"),
    ("I'll use the calculator for the arithmetic.", "solve"),
    ("Let me set up the calculation.", "solve"),
    ("Here is how to get the answer.", "solve"),
    ("Let's go through the numbers.", "solve"),
    ("Okay, let me think about this carefully.", "solve"),
    ("I think the answer comes out quickly.", "wrong"),
    ("This looks simple enough.", "wrong"),
    ("Let me call the calculator right away.", "malformed"),
    ("Let me compute this with a tool.", "malformed"),
    ("I can do this in my head.", "direct"),
    ("No tool is needed for this.", "direct"),
    ("This needs a long and careful look at every detail.", "overlong"),
)
_KIND_BY_OPENER = {opener: kind for opener, kind in KINDS}


def tool_call(expression: str) -> str:
    return f'<tool_call>\n{json.dumps({"name": CALCULATOR, "arguments": {"expression": expression}})}\n</tool_call>'


def malformed_tool_call(expression: str) -> str:
    """A call whose JSON is cut short (the closing brace missing), as a policy sometimes writes one."""
    return f'<tool_call>\n{{"name": "{CALCULATOR}", "arguments": {{"expression": "{expression}"}}\n</tool_call>'


def _plain(text: str) -> str:
    """Solution text with its `<<expr=value>>` annotations removed (what GSM8K's solution reads as)."""
    return _STEP.sub("", text)


def replay_turns(solution: str, kind: str, opener: str, max_calls: int) -> list[str]:
    """The assistant turns of one trajectory that replays a GSM8K solution (`kind`: see KINDS)."""
    body, _, answer = solution.rpartition(ANSWER_MARKER)
    answer = answer.strip()
    if kind == "direct":
        return [f"{opener}\n{_plain(body).strip()}\n{ANSWER_MARKER} {answer}"]
    if kind == "overlong":  # re-reading and restating without end: cut by the response-length limit
        restated = f"Re-reading the problem: {_plain(body).strip()}"
        return [f"{opener}\n" + " ".join([restated] * (6000 // len(restated) + 1))]  # > 1,500 tokens
    steps = list(_STEP.finditer(body))[:max_calls]
    turns, start = [], 0
    for i, step in enumerate(steps):
        expression = step.group(1).rsplit("=", 1)[0].strip()
        text = body[start:step.start()].strip()
        if i == 0:
            text = f"{opener}\n{text}".strip()
        call = malformed_tool_call(expression) if kind == "malformed" and i == 0 else tool_call(expression)
        turns.append(f"{_plain(text)}\n{call}".strip())
        if kind == "malformed" and i == 0:  # the parser answered "Invalid JSON": the model writes it again
            turns.append(f"The call was not valid JSON; again:\n{tool_call(expression)}")
        start = step.end()
    final = answer if kind != "wrong" else _wrong(answer)
    rest = _plain(body[start:]).strip()
    last = f"{rest}\n{ANSWER_MARKER} {final}".strip()
    turns.append(f"{opener}\n{last}" if not steps else last)
    return turns


def _wrong(answer: str) -> str:
    try:
        return str(int(answer.replace(",", "")) + 1)
    except ValueError:
        return answer + "1"


def load_solutions(path: str | Path) -> dict[str, str]:
    """question -> solution, from GSM8K's train.jsonl."""
    solutions = {}
    with open(path) as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                solutions[row["question"].strip()] = row["answer"]
    return solutions


class GSM8KReplayServer:
    """The body of one stand-in server (a Ray actor, as verl's SGLangHttpServer is). Registered with verl's load
    balancer under a name; verl's LLMServerClient sends it each turn as a new request with the whole context."""

    def __init__(self, gsm8k_train: str, prompt_length: int, response_length: int, max_assistant_turns: int,
                 seed: int = 0, tokenizer_dir: str | None = None) -> None:
        from harness.qwen_tokenizer import load_qwen25_tokenizer

        self.tokenizer = load_qwen25_tokenizer(tokenizer_dir)
        self.solutions = load_solutions(gsm8k_train)
        self.prompt_length, self.response_length = prompt_length, response_length
        self.max_calls = max(0, max_assistant_turns - 1)  # the last turn answers
        self.rng = random.Random(seed)
        self._deck: list[tuple[str, str]] = []
        self.im_start = self.tokenizer.convert_tokens_to_ids(IM_START)
        self.im_end = self.tokenizer.convert_tokens_to_ids(IM_END)
        self.global_steps = None
        self.counts: Counter[str] = Counter()  # requests, first turns by kind, unknown questions, cut by length
        self._plans: OrderedDict[tuple[str, str], list[list[int]]] = OrderedDict()  # tokenized turns, LRU

    async def generate(self, prompt_ids, sampling_params: dict, request_id: str, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        prompt_ids = list(prompt_ids)
        self.counts["requests"] += 1
        turn_ids = self._next_turn(prompt_ids)
        limit = self._max_new_tokens(sampling_params, len(prompt_ids))
        stop_reason = "completed"
        if len(turn_ids) > limit:
            turn_ids, stop_reason = turn_ids[:limit], "length"
            self.counts["cut_by_length"] += 1
        log_probs = [-0.5] * len(turn_ids) if sampling_params.get("logprobs") else None
        return TokenOutput(token_ids=turn_ids, log_probs=log_probs, stop_reason=stop_reason,
                           extra_fields={"global_steps": self.global_steps})

    def _next_turn(self, prompt_ids: list[int]) -> list[int]:
        """Token ids of the turn this context asks for: the n-th turn of the trajectory's plan."""
        starts = [i for i, t in enumerate(prompt_ids) if t == self.im_start]
        # system, user, then per finished turn an assistant and a tool (user) message, then the generation prompt
        question = self._message_text(prompt_ids, starts[1]).removeprefix("user\n")
        question = question.removesuffix(INSTRUCTION).strip()
        turn = (len(starts) - 3) // 2
        solution = self.solutions.get(question)
        if solution is None:
            self.counts["unknown_question"] += 1
            return self._encode(f"I cannot tell. {ANSWER_MARKER} 0")
        if turn == 0:
            if not self._deck:
                self._deck = self.rng.sample(KINDS, len(KINDS))
            opener, kind = self._deck.pop()
            self.counts[f"kind_{kind}"] += 1
        else:
            opener = self._message_text(prompt_ids, starts[2]).removeprefix("assistant\n").split("\n", 1)[0]
            kind = _KIND_BY_OPENER.get(opener, "solve")
        plan = self._plan(question, solution, opener, kind)
        return plan[turn] if turn < len(plan) else self._encode("I have nothing to add.")

    def _plan(self, question: str, solution: str, opener: str, kind: str) -> list[list[int]]:
        key = (question, opener)
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        plan = [self._encode(text) for text in replay_turns(solution, kind, opener, self.max_calls)]
        self._plans[key] = plan
        if len(self._plans) > 20_000:
            self._plans.popitem(last=False)
        return plan

    def _message_text(self, ids: list[int], start: int) -> str:
        try:
            end = ids.index(self.im_end, start)
        except ValueError:
            end = len(ids)
        return self.tokenizer.decode(ids[start + 1:end])

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) + [self.im_end]

    def _max_new_tokens(self, params: dict, prompt_len: int) -> int:
        for key in ("max_new_tokens", "max_tokens"):
            if key in params:
                return max(0, int(params[key]))
        return max(0, min(self.response_length, self.prompt_length + self.response_length - prompt_len))

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def stats(self) -> dict[str, int]:
        return dict(self.counts)
