"""Publish verl validation dumps to Weave as Evaluations, one per (experiment, step), never twice.

verl writes one `<step>.jsonl` per validation (trainer.validation_data_dir): per sample the decoded prompt,
the multi-turn response, the ground truth, the reward and the reward's extra keys. Each dump becomes one
Evaluation logged with weave's own `EvaluationLogger`:

- model: `<experiment>-step<N>` (an evaluation-only run: the name it gives) with experiment, step (0 = the
  weights before any update), model path and tool set as attributes;
- dataset: the questions of the dump published as a weave `Dataset` (question_id, question, ground_truth).
  Each prediction's `inputs` is that dataset's row (a row ref), so the compare view lines predictions up by
  row digest exactly as it does for `weave.Evaluation`. The question is cut out of the chat-templated
  prompt, so the rows are the same for every step and for tools on or off;
- one prediction per dump line (several per row when validation sampled n > 1), output = the response text
  and the final answer, with the scores the run's agent loop gave it (in the dump): one scorer, SCORER, whose
  value holds every metric under fixed names (SCORE_KEYS). One scorer call per prediction instead of one per
  metric: 1319 predictions x 7 scorer calls took 60-100 s on 2 cores, a single dict-valued scorer about 6x
  less, and the compare view shows each key of a dict score as its own metric;
- summary: `recipes.results.scoring.summarize` (what gsm8k-eval-summary prints), under "output".

De-duplication: every Evaluation carries `attributes[EVAL_ATTRIBUTE]["key"]` = experiment/step/dump digest;
a finished, successful `Evaluation.evaluate` call with that key means "already published" and nothing is
sent. weave is imported only where it is used, so bad input fails fast without it. Publishing while
training runs: recipes/results/eval_watch.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes.constants import INSTRUCTION
from recipes.gsm8k.reward_keys import ACC_FLEXIBLE, ACC_STRICT, BAD_TOOL_CALLS, FORMAT_OK, PRED, SCORE, TOOL_CALLS
from recipes.gsm8k.trajectory import count_tool_errors
from recipes.results.dumps import parse_dump
from recipes.results.scoring import SCORE_FIELDS, score_record, summarize

logger = logging.getLogger(__name__)

DATASET_NAME = "gsm8k_test"
EVAL_ATTRIBUTE = "gsm8k_recipe_eval"
# Fixed names: the compare view matches scores across evaluations by scorer name and key.
SCORER = "gsm8k_reward"
SCORE_KEYS = ("strict_correct", "flexible_correct", "format_ok", "tool_calls", "bad_tool_calls", "tool_errors",
              "reward")
_DUMP_FILE = re.compile(r"^(\d+)\.jsonl$")
_REQUIRED_KEYS = ("input", "output", "gts", SCORE, *SCORE_FIELDS)


class DumpError(ValueError):
    """Bad or missing input; the message is one actionable line."""


@dataclass(frozen=True)
class StepDump:
    path: Path
    step: int
    sha256: str
    records: list[dict]


@dataclass(frozen=True)
class RunInfo:
    """What names the model of an evaluation."""

    experiment: str
    model_path: str | None = None
    tool_set: str | None = None
    # an evaluation-only run (scripts/eval_gsm8k.sh) dumps at step 0, which is no training step: its model is
    # named this instead of <experiment>-step<N>
    model_name: str | None = None

    def names(self, step: int) -> tuple[str, str, int | None]:
        """The evaluation's display name, the model's name and the training step the model is from."""
        if self.model_name:
            return self.model_name, self.model_name, None
        return f"{self.experiment} step {step}", f"{self.experiment}-step{step}", step


# ---- reading dumps (no weave needed) ------------------------------------------------------------------

def dump_paths(folder: str | Path) -> list[Path]:
    """The `<step>.jsonl` files in a validation dir, by step; DumpError if the dir is missing or has none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DumpError(f"validation dir {folder} does not exist (the run's trainer.validation_data_dir, "
                        "e.g. outputs/<experiment>/validation)")
    paths = step_files(folder)
    if not paths:
        raise DumpError(f"no <step>.jsonl dumps in {folder}: has a validation run yet? "
                        "(trainer.validation_data_dir must be set, and test_freq / val_before_train make them)")
    return paths


def step_files(folder: Path) -> list[Path]:
    """The `<step>.jsonl` files in a folder, by step (other files there are not verl's dumps)."""
    return sorted((p for p in folder.glob("*.jsonl") if _DUMP_FILE.match(p.name)), key=lambda p: int(p.stem))


def read_step_dump(path: Path) -> StepDump:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DumpError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        records = parse_dump(path, text, required=_REQUIRED_KEYS)
    except ValueError as err:
        raise DumpError(str(err)) from None
    if not records:
        raise DumpError(f"{path}: empty dump (no lines)")
    return StepDump(path=path, step=int(path.stem), sha256=hashlib.sha256(data).hexdigest(), records=records)


def question_text(prompt: str) -> str:
    """The GSM8K question inside a prompt as verl dumps it (chat template decoded without special tokens:
    system turn, then `user`, the question and INSTRUCTION, then `assistant`): the same text whatever the
    system prompt says, so tools-on and tools-off runs share rows. Any other layout: the whole prompt."""
    body = prompt
    if "\nuser\n" in body:
        body = body.rsplit("\nuser\n", 1)[1]
    elif body.startswith("user\n"):
        body = body[len("user\n"):]
    body = body.strip()
    body = body.removesuffix("assistant").rstrip()
    return body.removesuffix(INSTRUCTION).strip()


def question_row(record: dict) -> dict:
    """The dataset row a dump line answers. The id is a digest of the question, the same in every run."""
    question = question_text(str(record["input"]))
    return {"question_id": "q" + hashlib.sha256(question.encode()).hexdigest()[:12], "question": question,
            "ground_truth": str(record["gts"])}


def prediction(record: dict) -> tuple[dict, dict]:
    """(output, scores) of one dump line, as the run scored it. `reward` is what training paid (the dump's score,
    with the run's reward method and tool bonus)."""
    result = score_record(record)
    output = {"response": str(record["output"]), "final_answer": result[PRED]}
    scores = {
        "strict_correct": bool(result[ACC_STRICT]),
        "flexible_correct": bool(result[ACC_FLEXIBLE]),
        "format_ok": bool(result[FORMAT_OK]),
        "tool_calls": int(result[TOOL_CALLS]),
        "bad_tool_calls": int(result[BAD_TOOL_CALLS]),
        "tool_errors": count_tool_errors(str(record["output"])),
        "reward": float(record[SCORE]),
    }
    return output, scores


def pass_ks(records: list[dict], ks: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The pass@k to report: those asked for, else 1 and the samples per prompt (when validation sampled n > 1)."""
    if ks:
        return tuple(ks)
    n = min(Counter(r["input"] for r in records).values())
    return (1, n) if n > 1 else (1,)


def eval_key(run: RunInfo, dump: StepDump) -> str:
    return f"{run.experiment}/step{dump.step}/{dump.sha256[:16]}"


# ---- publishing -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PublishResult:
    step: int
    key: str
    published: bool  # False: an identical evaluation was already in Weave
    predictions: int = 0
    url: str | None = None


class Publisher:
    """Publishes StepDumps through one weave client (the global one `weave.init` set up)."""

    def __init__(self, client: Any, run: RunInfo, ks: tuple[int, ...] | None = None) -> None:
        self.client = client
        self.run = run
        self.ks = ks

    def already_published(self, key: str) -> bool:
        """A finished, successful Evaluation with this key is in the project. Flushes first so that what
        this process sent is visible."""
        self.client.flush()
        calls = self.client.get_calls(
            filter={"op_names": [f"weave:///{self.client.entity}/{self.client.project}/op/Evaluation.evaluate:*"]},
            query={"$expr": {"$eq": [{"$getField": f"attributes.{EVAL_ATTRIBUTE}.key"}, {"$literal": key}]}},
            columns=["attributes", "ended_at", "exception"],
        )
        # a crashed or failed publish left a call without an end, or with an exception: publish again
        return any(call.ended_at is not None and call.exception is None for call in calls)

    def publish(self, dump: StepDump) -> PublishResult:
        import weave

        key = eval_key(self.run, dump)
        if self.already_published(key):
            return PublishResult(step=dump.step, key=key, published=False)
        rows = {}
        for record in dump.records:
            row = question_row(record)
            rows.setdefault((row["question"], row["ground_truth"]), row)
        dataset = weave.Dataset(name=DATASET_NAME, rows=list(rows.values()))
        weave.publish(dataset)
        # after publishing, each row carries its ref (.../attr/rows/id/<row digest>): logged as the inputs
        published_rows = {(row["question"], row["ground_truth"]): row for row in dataset.rows}
        display_name, model_name, model_step = self.run.names(dump.step)
        evaluation = weave.EvaluationLogger(
            name=display_name,
            model={"name": model_name, "experiment": self.run.experiment,
                   "step": model_step, "model_path": self.run.model_path, "tool_set": self.run.tool_set},
            dataset=dataset,
            scorers=[SCORER],
            eval_attributes={EVAL_ATTRIBUTE: {
                "key": key, "experiment": self.run.experiment, "step": dump.step, "dump_file": dump.path.name,
                "dump_sha256": dump.sha256, "model_path": self.run.model_path, "tool_set": self.run.tool_set}},
        )
        try:
            # one event loop for all scores: the sync log_score starts and tears down a loop for each
            asyncio.run(_log_predictions(evaluation, dump.records, published_rows))
            evaluation.log_summary(summarize(dump.records, pass_ks(dump.records, self.ks)))
        except BaseException as err:
            with contextlib.suppress(Exception):  # the original error is the one to report
                evaluation.fail(err if isinstance(err, Exception) else RuntimeError(repr(err)))
            raise
        finally:
            _forget_logger(evaluation)
        self.client.flush()
        return PublishResult(step=dump.step, key=key, published=True, predictions=len(dump.records),
                             url=_safe_url(evaluation))


async def _log_predictions(evaluation: Any, records: list[dict], published_rows: dict) -> None:
    for record in records:
        row = question_row(record)
        output, scores = prediction(record)
        scored = evaluation.log_prediction(inputs=published_rows[(row["question"], row["ground_truth"])],
                                           output=output)
        await scored.alog_score(SCORER, scores)
        scored.finish()


def _forget_logger(evaluation: Any) -> None:
    """weave 0.54 keeps every EvaluationLogger in a module-level list for its atexit finisher, and a logger
    finished by log_summary is never removed (eval_imperative.py: finish() returns early once finalized):
    a long-lived watcher would keep every step's predictions in memory."""
    from weave.evaluation import eval_imperative

    if evaluation in eval_imperative._active_evaluation_loggers:
        eval_imperative._active_evaluation_loggers.remove(evaluation)


def _safe_url(evaluation: Any) -> str | None:
    try:
        return evaluation.ui_url
    except Exception:  # the link is a courtesy
        return None


def connect(project: str) -> Any:
    """weave.init(project) for publishing; RuntimeError (one line) if weave hands back a disabled client."""
    import weave

    client = weave.init(project)
    if client.entity == "DISABLED":
        raise RuntimeError("weave.init returned a disabled client (WEAVE_DISABLED is set, or the W&B server "
                           "needs a newer weave: see its warning above); nothing was published")
    return client


def describe(result: PublishResult) -> str:
    if result.published:
        return (f"step {result.step}: published {result.predictions} predictions ({result.key})"
                + (f" {result.url}" if result.url else ""))
    return f"step {result.step}: already in Weave ({result.key}), nothing sent"
