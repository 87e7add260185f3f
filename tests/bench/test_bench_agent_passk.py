import numpy as np
import pytest

from bench.agent_passk import pass_at_k


def test_pass_at_k_hand_computed() -> None:
    # 1 of 4 samples correct: one draw finds it 1/4 of the time, two draws 1 - C(3,2)/C(4,2) = 1/2.
    assert pass_at_k(np.array([1]), 4, 1) == pytest.approx(0.25)
    assert pass_at_k(np.array([1]), 4, 2) == pytest.approx(0.5)
    # None correct never passes; all correct always does; the mean is over tasks.
    assert pass_at_k(np.array([0, 4]), 4, 3) == pytest.approx(0.5)
    # More draws never lower it.
    hits = np.array([0, 1, 2, 5, 16])
    values = [pass_at_k(hits, 16, k) for k in (1, 2, 4, 8, 16)]
    assert values == sorted(values)
    assert values[0] == pytest.approx(hits.mean() / 16)
