"""Listing output (flywheel/tables.py): CliRunner is no terminal, so each listing prints a header
and one record per line, whole; --json prints one JSON array of the records."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.cli import cli
from flywheel.settings import Settings
from flywheel.tables import Column, cell_text


def lines_of(output: str, columns: int) -> list[list[str]]:
    """The tab-separated records after the header, each checked to have every column."""
    rows = [line.split("\t") for line in output.splitlines()]
    assert rows and all(len(row) == columns for row in rows), output
    return rows[1:]


def test_cells_print_whole_values_and_timestamps_with_their_zone() -> None:
    when = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert cell_text(when) == "2025-03-04T05:06:07+00:00"
    assert cell_text(None) == "-" and cell_text(["a", "b"]) == "a, b" and cell_text(0.5) == "0.5"
    assert Column("x").header is None


def test_gateway_list_keys_one_line_per_key_and_json(tmp_path: Path) -> None:
    env = {"FLYWHEEL_HOME": str(tmp_path)}
    runner = CliRunner()
    long_name = "an-integration-key-with-a-name-longer-than-a-narrow-table-column"
    for name in (long_name, "ide"):
        assert runner.invoke(cli, ["gateway", "add-key", name], env=env).exit_code == 0
    runner.invoke(cli, ["gateway", "revoke-key", "ide"], env=env)
    result = runner.invoke(cli, ["gateway", "list-keys"], env=env)
    assert result.exit_code == 0, result.output
    rows = lines_of(result.stdout, 4)
    assert [(r[0], r[3]) for r in rows] == [(long_name, "active"), ("ide", "revoked")]
    assert datetime.fromisoformat(rows[0][2]).tzinfo is not None
    keys = json.loads(runner.invoke(cli, ["gateway", "list-keys", "--json"], env=env).stdout)
    assert [k["name"] for k in keys] == [long_name, "ide"] and keys[0]["event_types"]
    assert [k["state"] for k in keys] == ["active", "revoked"]
    assert all("secret" not in k and "sha256" not in k for k in keys)


def test_gateway_list_keys_without_keys_is_an_empty_json_array(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["gateway", "list-keys", "--json"], env={"FLYWHEEL_HOME": str(tmp_path)}
    )
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert "add-key" in result.stderr


def test_features_list_one_line_per_feature_and_json() -> None:
    from feature_store.declarations import load_features

    declared = [f.qualified_name for f in load_features()]
    result = CliRunner().invoke(cli, ["features", "list"])
    assert result.exit_code == 0, result.output
    rows = lines_of(result.stdout, 6)
    assert [r[0] for r in rows] == declared
    records = json.loads(CliRunner().invoke(cli, ["features", "list", "--json"]).stdout)
    assert [r["feature"] for r in records] == declared
    assert all(isinstance(r["entity_keys"], list) for r in records)


def test_topics_list_help_offers_json() -> None:
    result = CliRunner().invoke(cli, ["topics", "list", "--help"])
    assert result.exit_code == 0 and "--json" in result.output


@pytest.mark.integration
def test_topics_list_one_line_per_topic_and_json(stack: Settings) -> None:
    from streams.topics import ALL_TOPICS

    result = CliRunner().invoke(cli, ["topics", "list"])
    assert result.exit_code == 0, result.output
    rows = lines_of(result.stdout, 6)
    assert [r[0] for r in rows] == [t.name for t in ALL_TOPICS]  # whole names, none cut
    assert {r[5] for r in rows} <= {"ok", "drift", "missing"}
    records = json.loads(CliRunner().invoke(cli, ["topics", "list", "--json"]).stdout)
    assert [r["topic"] for r in records] == [t.name for t in ALL_TOPICS]
    assert all(isinstance(r["partitions"], int) for r in records)
