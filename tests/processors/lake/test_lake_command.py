"""`flywheel sink` options: help, and bad input refused with a message naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.commands.sink import DEFAULT_TOPICS, sink


def test_help_lists_the_rotation_and_dlq_options() -> None:
    result = CliRunner().invoke(sink, ["--help"])
    assert result.exit_code == 0
    options = "topics lake max-rows max-mib max-age-s memory-mib max-record-bytes dlq-topic"
    for option in [*options.split(), "decode-as", "once", "instance-id"]:
        assert f"--{option}" in result.output


def test_the_default_topics_are_the_platform_data_topics() -> None:
    assert "telemetry.suggestions" in DEFAULT_TOPICS and "models.acks" in DEFAULT_TOPICS
    assert not any(t.startswith("dlq.") for t in DEFAULT_TOPICS)


@pytest.mark.parametrize("value", ["no-equals", "t=not.a.platform.topic", "=telemetry.edits"])
def test_a_bad_decode_as_is_a_usage_error(value: str) -> None:
    result = CliRunner().invoke(sink, ["--decode-as", value])
    assert result.exit_code == 2
    assert "TOPIC=PLATFORM_TOPIC" in result.output


def test_a_topic_without_a_schema_fails_naming_decode_as(tmp_path: Path) -> None:
    result = CliRunner().invoke(sink, ["--topics", "someone.elses", "--lake", str(tmp_path)])
    assert result.exit_code == 1
    assert "--decode-as someone.elses=" in result.output


def test_a_budget_below_one_buffer_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        sink, ["--topics", "x", "--lake", str(tmp_path), "--max-mib", "64", "--memory-mib", "8"]
    )
    assert result.exit_code == 1
    assert "budget" in result.output
