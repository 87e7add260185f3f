"""pack_sequences with per-completion masks: only generated tokens are targets."""

from __future__ import annotations

import numpy as np
import pytest

from learner.data.token_windows import pack_sequences
from learner.errors import LearnerError

OBSERVATION = 70  # a tool's output token (mask 0) in these rows


def test_observation_tokens_are_never_targets() -> None:
    # prompt | turn 1 (generated: 10 2) | observation (70 70) | turn 2 (generated: 11 2)
    completion, mask = [10, 2, 70, 70, 11, 2], [1, 1, 0, 0, 1, 1]
    rows = pack_sequences([[1, 2, 3]], [completion], seq_len=12, pad_id=0, masks=[mask])
    assert rows.input_ids[0, :9].tolist() == [1, 2, 3, *completion]
    assert rows.target[0].tolist() == [0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0]
    assert rows.trained_tokens == 4


def test_a_cut_prompt_keeps_the_mask_on_the_completion() -> None:
    """The prompt loses its start; the mask still lines up with the completion's tokens."""
    completion, mask = [10, 2, OBSERVATION, OBSERVATION, 11, 2], [1, 1, 0, 0, 1, 1]
    rows = pack_sequences([list(range(1, 9))], [completion], seq_len=8, pad_id=0, masks=[mask])
    assert rows.input_ids[0].tolist() == [7, 8, *completion]
    assert rows.target[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    observed = rows.input_ids[0] == OBSERVATION
    assert not np.any(rows.target[0][observed])


def test_rows_without_a_mask_train_every_completion_token() -> None:
    rows = pack_sequences(
        [[1, 2], [1, 2], [1, 2]], [[5, 2], [6, OBSERVATION, 2], [7, 2]], seq_len=6, pad_id=0,
        masks=[None, [1, 0, 1], []],
    )  # fmt: skip
    assert rows.target.tolist() == [
        [0, 0, 1, 1, 0, 0],
        [0, 0, 1, 0, 1, 0],
        [0, 0, 1, 1, 0, 0],
    ]
    unmasked = pack_sequences([[1, 2]], [[5, 2]], seq_len=6, pad_id=0)
    assert unmasked.target.tolist() == rows.target[:1].tolist()


def test_a_mask_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(LearnerError, match="mask of 2 for a completion of 3"):
        pack_sequences([[1]], [[5, 6, 2]], seq_len=8, pad_id=0, masks=[[1, 1]])
    with pytest.raises(LearnerError, match="2 masks"):
        pack_sequences([[1]], [[5]], seq_len=8, pad_id=0, masks=[[1], [1]])
