"""scripts/harness/learning/turn_accuracy.py: which turn of a chain a warm start gets wrong, on transcripts rendered as
the agent loop renders them (the real renderer and a tokenizer built on chain-task rows)."""

import pytest

from harness.learning import task
from harness.learning.small_model import build_from_rows
from harness.learning.transcripts import Renderer, depth_of
from harness.learning.turn_accuracy import by_depth, main, turn_spans
from recipes.gsm8k.tool_sets import get_tool_set
from test_cpu_learning import rows_of

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def model_and_transcripts(tmp_path_factory):
    from transformers import AutoTokenizer

    splits = task.make_splits(train_size=60, test_size=9, seed=7, task="chain")
    folder = tmp_path_factory.mktemp("turns") / "m"
    build_from_rows(rows_of(splits["train"]), folder, seed=0)
    renderer = Renderer(AutoTokenizer.from_pretrained(str(folder)), get_tool_set("calculator").chat_schemas())
    rows = rows_of(splits["test"], "test")
    return folder, rows, [(depth_of(row), *renderer.render(row)) for row in rows]


def oracle(wrong_turn: int | None = None, tokens: slice = slice(None)):
    """Predicts each transcript's own next token (a model that is always right), except the `tokens` of turn
    `wrong_turn` (0: the first call; slice(0, 1): only its first token, the choice of calling or answering)."""
    def make(transcripts):
        answers = {}
        for _, ids, mask in transcripts:
            predicted = [*ids[1:], 0]
            spans = turn_spans(mask)
            if wrong_turn is not None and wrong_turn < len(spans):
                for i in spans[wrong_turn][tokens]:
                    predicted[i - 1] = ids[i] + 1
            answers[tuple(ids)] = predicted
        return lambda ids: answers[tuple(ids)]
    return make


def test_turns_are_the_calls_then_the_answer(model_and_transcripts):
    _, _, transcripts = model_and_transcripts
    for depth, _ids, mask in transcripts:
        assert len(turn_spans(mask)) == depth + 1
        assert all(mask[i] for span in turn_spans(mask) for i in span)


def test_a_model_right_everywhere_scores_one_and_a_wrong_second_call_is_named(model_and_transcripts):
    _, _, transcripts = model_and_transcripts
    right = by_depth(transcripts, oracle()(transcripts))
    assert {d: r["all_turns"] for d, r in right.items()} == {1: 1.0, 2: 1.0, 3: 1.0}
    wrong = by_depth(transcripts, oracle(wrong_turn=1)(transcripts))
    assert wrong[1]["by_turn"] == [1.0, 0.0]  # depth 1: turn 1 is the answer
    assert wrong[2]["by_turn"] == [1.0, 0.0, 1.0] and wrong[3]["by_turn"] == [1.0, 0.0, 1.0, 1.0]
    assert all(r["all_turns"] == 0.0 for r in wrong.values())
    assert wrong[3]["chooses"] == [1.0, 0.0, 1.0, 1.0] and right[3]["chooses"] == [1.0] * 4


def test_a_model_that_would_answer_at_once_is_still_scored_on_the_call_it_is_given(model_and_transcripts):
    """A warm start trained to answer at once on part of its steps may pick `####` where the transcript calls: the
    call's content is judged with the choice forced, and the choice is reported apart."""
    _, _, transcripts = model_and_transcripts
    answers_first = by_depth(transcripts, oracle(wrong_turn=0, tokens=slice(0, 1))(transcripts))
    assert {d: r["all_turns"] for d, r in answers_first.items()} == {1: 1.0, 2: 1.0, 3: 1.0}
    assert answers_first[3]["by_turn"] == [1.0] * 4 and answers_first[3]["chooses"] == [0.0, 1.0, 1.0, 1.0]


def test_the_command_reads_a_model_folder_and_prints_each_depth(model_and_transcripts, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder, rows, _ = model_and_transcripts
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test.parquet")
    args = ["--model_dir", str(folder), "--data_dir", str(tmp_path), "--rows_per_depth", "2", "--threads", "1"]
    assert main(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[turns]")]
    assert [line.split(":")[0] for line in lines] == [f"[turns] depth {d}" for d in (1, 2, 3)]
    assert all(line.endswith("(n=2)") and "| chooses as transcribed " in line for line in lines)
