"""`flywheel features`: help, list and offline get, without a broker."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from flywheel.commands.features import features
from tests.feature_store.feature_events import T0_MS, reward, write_lake


def test_help_and_list() -> None:
    runner = CliRunner()
    for args in [["--help"], ["run", "--help"], ["serve", "--help"], ["get", "--help"]]:
        assert runner.invoke(features, args).exit_code == 0
    listed = runner.invoke(features, ["list"], terminal_width=200)
    assert listed.exit_code == 0 and "user.accept_rate_24h" in listed.output


def test_get_offline_from_a_lake_and_bad_input(tmp_path: Path) -> None:
    write_lake(tmp_path, [reward(T0_MS, accepted=True), reward(T0_MS + 1, accepted=False)])
    runner = CliRunner()
    args = [
        "get",
        "user",
        "user:a",
        "--offline",
        "--lake",
        str(tmp_path),
        "--as-of",
        str(T0_MS + 1),
    ]
    got = runner.invoke(features, args, terminal_width=200)
    assert got.exit_code == 0, got.output
    assert "user.accept_rate_24h" in got.output and "0.5" in got.output
    composite = ["get", "model_version", "suggestion-gate@1", "--offline", "--lake", str(tmp_path),
                 "--as-of", "2026-01-01T00:00:00.001Z"]  # fmt: skip
    result = runner.invoke(features, composite, terminal_width=200)
    assert "model_version.reward_mean_1h\t0.25\t2\n" in result.stdout  # piped: a line each
    unknown = runner.invoke(features, ["get", "team", "x", "--offline", "--lake", str(tmp_path)])
    assert unknown.exit_code != 0 and "unknown entity type 'team'" in str(unknown.exception)
    down = runner.invoke(features, ["get", "user", "u", "--url", "http://127.0.0.1:9"])
    assert down.exit_code == 1 and "flywheel features serve" in down.output
