"""`python data_prep/gsm8k.py` end to end: real GSM8K, our fixture, the hub path, and every bad input."""

import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep import gsm8k, parquet_io
from data_prep.parquet_io import non_portable_fields
from tools.calculator import NAME as CALCULATOR
from tools.gsm8k_reward_tool import NAME as CALC_GSM8K_REWARD

pytestmark = pytest.mark.unit


def run_prep(*args: str) -> int:
    return gsm8k.main([str(a) for a in args])


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def independent_answer(solution: str) -> Decimal:
    """A second parse of a GSM8K solution's answer, by another route than data_prep's regex."""
    last_line = solution.strip().splitlines()[-1]
    assert last_line.startswith("#### ")
    return Decimal(last_line[5:].strip().replace(",", ""))


@pytest.fixture(scope="module")
def real_output(shared_gsm8k_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("gsm8k_both")
    assert run_prep("--input_dir", shared_gsm8k_dir, "--local_save_dir", out, "--tool_set", "both") == 0
    return out


def test_real_gsm8k_counts_and_ground_truths(real_output, shared_gsm8k_dir):
    for split, expected in (("train", 7473), ("test", 1319)):
        rows = read_rows(real_output / f"{split}.parquet")
        assert len(rows) == expected
        sources = [json.loads(line) for line in (shared_gsm8k_dir / f"{split}.jsonl").open()]
        for row, src in zip(rows, sources, strict=True):
            gt = row["reward_model"]["ground_truth"]
            assert Decimal(gt) == independent_answer(src["answer"]), row["extra_info"]["index"]
            assert "," not in gt
            assert row["extra_info"]["question"] == src["question"].strip()
            tools_kwargs = row["extra_info"]["tools_kwargs"]
            # The checker's ground truth is the row's; the calculator never receives it.
            assert tools_kwargs[CALC_GSM8K_REWARD]["create_kwargs"]["ground_truth"] == gt
            assert tools_kwargs[CALCULATOR]["create_kwargs"] == {"row_index": row["extra_info"]["index"]}
        assert [r["extra_info"]["index"] for r in rows] == list(range(expected))


def test_real_gsm8k_keeps_negative_and_separated_answers(real_output, shared_gsm8k_dir):
    sources = [json.loads(line)["answer"] for line in (shared_gsm8k_dir / "train.jsonl").open()]
    answers = [r["reward_model"]["ground_truth"] for r in read_rows(real_output / "train.parquet")]
    negative = [a for a in answers if a.startswith("-")]
    separated = [a for src, a in zip(sources, answers, strict=True) if "," in src.rsplit("####", 1)[1]]
    assert negative == ["-7", "-47", "-12"]  # GSM8K train's three negative answers, sign kept
    assert len(separated) == 79 and all(a.isdigit() for a in separated)


@pytest.fixture(scope="module")
def mini_output(mini_gsm8k_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("gsm8k_mini_both")
    assert run_prep("--input_dir", mini_gsm8k_dir, "--local_save_dir", out, "--tool_set", "both") == 0
    return out


@pytest.mark.parametrize("output", ["mini_output", "real_output"])
def test_parquet_is_portable(output, request):
    """No `datasets` feature metadata and no large/view Arrow types: what older readers choke on. The property
    does not need all of GSM8K, so it is checked on our fixture too (which runs where the real GSM8K is absent)."""
    folder = request.getfixturevalue(output)
    for split in ("train", "test"):
        schema = pq.read_schema(folder / f"{split}.parquet")
        assert not schema.metadata or b"huggingface" not in schema.metadata
        assert non_portable_fields(schema) == []


def test_portability_check_can_fail():
    schema = pa.schema([("a", pa.struct([("b", pa.large_string())])), ("c", pa.list_(pa.large_string()))])
    assert non_portable_fields(schema) == ["a.b", "c[]"]


def test_rerun_gives_identical_files(mini_gsm8k_dir, tmp_path):
    for out in ("one", "two"):
        assert run_prep("--input_dir", mini_gsm8k_dir, "--local_save_dir", tmp_path / out) == 0
    for split in ("train", "test"):
        one, two = (tmp_path / run / f"{split}.parquet" for run in ("one", "two"))
        assert one.read_bytes() == two.read_bytes()


def test_subset_sizes(mini_gsm8k_dir, tmp_path):
    assert run_prep("--input_dir", mini_gsm8k_dir, "--local_save_dir", tmp_path, "--train_size", "4",
                    "--test_size", "2") == 0
    assert [r["extra_info"]["index"] for r in read_rows(tmp_path / "train.parquet")] == [0, 1, 2, 3]
    assert len(read_rows(tmp_path / "test.parquet")) == 2


def test_parquet_input_files(mini_gsm8k_dir, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for split in ("train", "test"):
        rows = [json.loads(line) for line in (mini_gsm8k_dir / f"{split}.jsonl").open()]
        pq.write_table(pa.Table.from_pylist(rows), src / f"{split}.parquet")
    assert run_prep("--input_dir", src, "--local_save_dir", tmp_path / "out") == 0
    assert len(read_rows(tmp_path / "out" / "train.parquet")) == 10


def test_hub_loader_on_a_local_copy_of_the_hub_dataset(mini_gsm8k_dir, tmp_path):
    """--local_dataset_path goes through datasets.load_dataset(path, "main") like the hub path does."""
    hub = tmp_path / "gsm8k_hub"
    (hub / "main").mkdir(parents=True)
    for split in ("train", "test"):
        rows = [json.loads(line) for line in (mini_gsm8k_dir / f"{split}.jsonl").open()]
        pq.write_table(pa.Table.from_pylist(rows), hub / "main" / f"{split}-00000-of-00001.parquet")
    (hub / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n---\n"
    )
    assert run_prep("--local_dataset_path", hub, "--local_save_dir", tmp_path / "out") == 0
    rows = read_rows(tmp_path / "out" / "train.parquet")
    assert [r["reward_model"]["ground_truth"] for r in rows[:5]] == ["24", "72", "1250", "-3", "3.5"]


# ---- bad input: a clear error naming file and line, exit 1, nothing written --------------------------


def _write_split_files(folder: Path, train_lines: list[str], test_lines: list[str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    good = json.dumps({"question": "Q?", "answer": "#### 1"})
    (folder / "train.jsonl").write_text("\n".join(train_lines) + "\n")
    (folder / "test.jsonl").write_text("\n".join(test_lines or [good]) + "\n")
    return folder


GOOD = json.dumps({"question": "What is 2+2?", "answer": "2+2=4\n#### 4"})


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"question": "Q?", "answer": "#### 1"', "train.jsonl:2: malformed JSON"),
        (json.dumps({"question": "Q?", "answer": "the answer is 5"}), "train.jsonl:2: no '####' answer"),
        (json.dumps({"question": "Q?", "answer": "#### five"}), "train.jsonl:2: the text after '####' is not a number"),
        (json.dumps({"question": "Q?"}), "train.jsonl:2: missing 'answer'"),
        (json.dumps(["Q?", "#### 1"]), "train.jsonl:2: expected an object"),
    ],
)
def test_bad_row_fails_with_file_and_line(tmp_path, capsys, bad_line, message):
    src = _write_split_files(tmp_path / "src", [GOOD, bad_line, GOOD])
    assert run_prep("--input_dir", src, "--local_save_dir", tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert message in err and "--skip_invalid" in err
    assert not (tmp_path / "out").exists()


def test_skip_invalid_reports_how_many(tmp_path, capsys):
    src = _write_split_files(tmp_path / "src", [GOOD, "{oops", GOOD, json.dumps({"question": "Q", "answer": "x"})])
    assert run_prep("--input_dir", src, "--local_save_dir", tmp_path / "out", "--skip_invalid") == 0
    assert "train: skipped 2 invalid rows" in capsys.readouterr().out
    rows = read_rows(tmp_path / "out" / "train.parquet")
    assert [r["extra_info"]["index"] for r in rows] == [0, 2]  # indices stay those of the source file


def test_missing_file_names_what_is_expected(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.jsonl").write_text(GOOD + "\n")
    assert run_prep("--input_dir", src, "--local_save_dir", tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "no test.jsonl or test.parquet in" in err and str(src) in err
    assert not (tmp_path / "out").exists()  # train was valid, but nothing is written until every split is


def test_a_bad_split_leaves_previous_output_untouched(mini_gsm8k_dir, tmp_path):
    out = tmp_path / "out"
    assert run_prep("--input_dir", mini_gsm8k_dir, "--local_save_dir", out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    src = _write_split_files(tmp_path / "src", [GOOD], test_lines=[GOOD, "not json"])
    assert run_prep("--input_dir", src, "--local_save_dir", out) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_crash_while_writing_leaves_no_half_file(mini_gsm8k_dir, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run_prep("--input_dir", mini_gsm8k_dir, "--local_save_dir", out) == 0
    before = (out / "train.parquet").read_bytes()

    def crash_midway(table, sink, **kwargs):
        sink.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(parquet_io.pq, "write_table", crash_midway)
    assert run_prep("--input_dir", mini_gsm8k_dir, "--local_save_dir", out, "--tool_set", "both") == 1
    assert (out / "train.parquet").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet", "train.parquet"]  # no temp files left


def test_conflicting_sources_are_refused(mini_gsm8k_dir, tmp_path):
    with pytest.raises(SystemExit):
        run_prep("--input_dir", mini_gsm8k_dir, "--local_dataset_path", tmp_path)
    with pytest.raises(SystemExit):
        run_prep("--input_dir", mini_gsm8k_dir, "--train_size", "0")


def test_help_shows_where_the_parquet_goes(capsys):
    with pytest.raises(SystemExit):
        gsm8k.parse_args(["--help"])
    assert "(default: ~/data/gsm8k)" in " ".join(capsys.readouterr().out.split())


def test_the_bundled_sample_is_gsm8ks_own_first_rows_with_its_licence(shared_gsm8k_dir):
    from data_prep.sources import SAMPLE_DIR

    for split, rows in (("train", 32), ("test", 16)):
        sample = (SAMPLE_DIR / f"{split}.jsonl").read_text().splitlines()
        real = (shared_gsm8k_dir / f"{split}.jsonl").read_text().splitlines()[:rows]
        assert sample == real
    licence = (SAMPLE_DIR / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "Copyright (c) 2021 OpenAI" in licence


def test_without_the_hub_the_sample_is_used_and_said(tmp_path, capsys):
    """HF_HUB_OFFLINE (the suite's setting) and nothing cached: the hub serves nothing, the sample stands in."""
    assert run_prep("--fallback_sample", "--train_size", "6", "--local_save_dir", tmp_path) == 0
    out = capsys.readouterr().out
    assert "[data_prep] the hub did not serve GSM8K (could not load 'openai/gsm8k'" in out
    assert out.strip().splitlines()[-1] == ("[data_prep] source: the bundled GSM8K sample (data_prep/gsm8k_sample: "
                                             "real openai/gsm8k rows, MIT licence)")
    assert len(read_rows(tmp_path / "train.parquet")) == 6 and len(read_rows(tmp_path / "test.parquet")) == 16


def test_an_unreachable_hub_is_not_retried_before_the_sample(tmp_path, capsys, monkeypatch):
    from data_prep import sources

    def no_route(*args, **kwargs):
        raise OSError(101, "Network is unreachable")

    def hub(*args, **kwargs):
        raise AssertionError("the hub client was asked although the hub cannot be reached")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(sources.socket, "create_connection", no_route)
    monkeypatch.setattr(gsm8k, "read_hub_split", hub)
    assert run_prep("--fallback_sample", "--local_save_dir", tmp_path) == 0
    out = capsys.readouterr().out
    assert "the hub cannot be reached (huggingface.co: Network is unreachable): using the bundled" in out
    assert len(read_rows(tmp_path / "train.parquet")) == 32


def test_a_given_source_is_never_swapped_for_the_sample(tmp_path, capsys):
    assert run_prep("--fallback_sample", "--input_dir", tmp_path / "nowhere", "--local_save_dir", tmp_path) == 1
    assert "no train.jsonl or train.parquet in" in capsys.readouterr().err
    assert run_prep("--local_save_dir", tmp_path / "out") == 1  # without the flag: the hub's error, nothing else
    assert "could not load 'openai/gsm8k'" in capsys.readouterr().err and not (tmp_path / "out").exists()
