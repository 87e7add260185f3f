"""The curriculum: levels unlock with measured pass rates, the mix favours levels near 50%."""

import random

import pytest

from environments.curriculum import Curriculum
from environments.errors import TaskEnvironmentError


def _record(curriculum: Curriculum, level: int, passed: int, failed: int) -> None:
    for _ in range(passed):
        curriculum.record(level, True)
    for _ in range(failed):
        curriculum.record(level, False)


def test_only_level_one_is_open_before_anything_is_measured() -> None:
    curriculum = Curriculum()
    assert curriculum.unlocked() == [1]
    assert curriculum.weights() == {1: 1.0, 2: 0.0, 3: 0.0}
    rng = random.Random(0)
    assert {curriculum.draw(rng) for _ in range(100)} == {1}


def test_a_level_opens_once_the_one_below_passes_enough() -> None:
    curriculum = Curriculum(unlock=0.3)
    _record(curriculum, 1, passed=10, failed=40)  # 20%: level 2 stays locked
    assert curriculum.unlocked() == [1]
    _record(curriculum, 1, passed=40, failed=0)  # 50 of 90
    assert curriculum.unlocked() == [1, 2]
    _record(curriculum, 2, passed=1, failed=30)
    assert curriculum.unlocked() == [1, 2]  # level 2 at 5%: level 3 locked


def test_levels_near_half_get_the_most_draws_and_solved_ones_keep_a_floor() -> None:
    curriculum = Curriculum(floor=0.05)
    _record(curriculum, 1, passed=200, failed=0)  # solved: no signal left
    _record(curriculum, 2, passed=50, failed=50)
    _record(curriculum, 3, passed=2, failed=10)
    weights = curriculum.weights()
    assert weights[2] > weights[3] > weights[1] > 0
    assert sum(weights.values()) == pytest.approx(1.0)
    rng = random.Random(1)
    draws = [curriculum.draw(rng) for _ in range(2000)]
    assert draws.count(2) > draws.count(1)


def test_rates_follow_the_recent_window_and_foreign_levels_are_ignored() -> None:
    curriculum = Curriculum(window=10)
    _record(curriculum, 1, passed=0, failed=10)
    _record(curriculum, 1, passed=10, failed=0)  # the failures left the window
    assert curriculum.pass_rate(1) == pytest.approx(10.5 / 11)
    curriculum.record(7, True)  # not a level of this curriculum
    assert "L3 locked" in curriculum.summary()


def test_no_levels_is_refused() -> None:
    with pytest.raises(TaskEnvironmentError):
        Curriculum(levels=())
