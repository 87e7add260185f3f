"""Duration parsing and progress comparisons."""

from __future__ import annotations

import pytest

from learner.engine.durations import Duration, Progress, Unit
from learner.errors import DurationError


@pytest.mark.parametrize(
    ("text", "value", "unit"),
    [
        ("1ep", 1, Unit.EPOCH),
        ("500ba", 500, Unit.BATCH),
        ("20000sp", 20000, Unit.SAMPLE),
        ("2e6tok", 2_000_000, Unit.TOKEN),
        ("90s", 90, Unit.SECOND),
        ("10m", 10, Unit.MINUTE),
        ("1.5h", 1.5, Unit.HOUR),
        (" 3 ep ", 3, Unit.EPOCH),
    ],
)
def test_parses_every_unit(text: str, value: float, unit: Unit) -> None:
    assert Duration.parse(text) == Duration(value, unit)


@pytest.mark.parametrize("text", ["", "ep", "10", "5 epochs", "1.5ba", "-3ba", "0ep", "2x", "1e"])
def test_bad_durations_name_the_accepted_units(text: str) -> None:
    with pytest.raises(DurationError, match=r"ep|whole|positive"):
        Duration.parse(text)


def test_unknown_unit_message_lists_units() -> None:
    with pytest.raises(DurationError, match=r"ep \(epochs\), ba \(batches\).*tok"):
        Duration.parse("3days")


def test_seconds_and_str() -> None:
    assert Duration.parse("1.5h").seconds == 5400
    assert Duration.parse("10m").seconds == 600
    assert str(Duration.parse("2e6tok")) == "2000000tok"
    with pytest.raises(DurationError, match="no seconds"):
        _ = Duration.parse("3ep").seconds


def test_progress_reaches_budgets_and_intervals() -> None:
    progress = Progress().after_step(samples=8, tokens=20, elapsed_s=1.0)
    progress = progress.after_step(samples=8, tokens=20, elapsed_s=2.5)
    assert progress.batches == 2 and progress.samples == 16 and progress.samples_in_epoch == 16
    assert progress.reached(Duration.parse("2ba"))
    assert not progress.reached(Duration.parse("3ba"))
    assert progress.reached(Duration.parse("40tok"))
    assert progress.reached(Duration.parse("2s")) and not progress.reached(Duration.parse("3s"))
    assert not progress.reached(Duration.parse("1ep"))
    epoch = progress.after_epoch()
    assert epoch.reached(Duration.parse("1ep")) and epoch.samples_in_epoch == 0
    since = epoch.since(progress)
    assert since.epochs == 1 and since.batches == 0
    assert not since.reached(Duration.parse("1ba"))
