"""recipes.gsm8k.trajectory.mask_runs: the one place a response mask is cut into turns (the in-loop score's split_turns
and the warm start's turn accuracy both read it)."""

import pytest

from harness.learning.turn_accuracy import turn_spans
from recipes.gsm8k.trajectory import mask_runs, split_turns

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("mask, runs", [
    ([], []),
    ([1, 1, 1], [(True, range(0, 3))]),
    ([0, 0], [(False, range(0, 2))]),
    ([1, 1, 0, 0, 0, 1, 0, 1, 1], [(True, range(0, 2)), (False, range(2, 5)), (True, range(5, 6)),
                                   (False, range(6, 7)), (True, range(7, 9))]),
])
def test_runs_cover_every_position_once_in_order(mask, runs):
    assert mask_runs(mask) == runs
    assert [i for _, span in mask_runs(mask) for i in span] == list(range(len(mask)))


def test_both_readers_agree_on_the_turns():
    mask = [1, 1, 0, 0, 1, 0, 1]
    ids = [10, 11, 20, 21, 12, 22, 13]
    turns = split_turns(ids, mask, decode=lambda toks: ",".join(map(str, toks)))
    assert turns == [(True, "10,11"), (False, "20,21"), (True, "12"), (False, "22"), (True, "13")]
    assert [list(span) for span in turn_spans(mask)] == [[0, 1], [4], [6]]
