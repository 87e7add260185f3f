import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.cli import cli
from ground.storage import StorageLocation


def test_help_lists_the_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    commands = ("stack", "topics", "demo", "gateway", "simulate", "sink", "process", "features",
                "query", "learn", "models", "report", "doctor", "privacy", "rollouts")  # fmt: skip
    for command in commands:
        assert command in result.output


@pytest.mark.parametrize(
    "args",
    [["stack", "--help"], ["stack", "up", "--help"], ["stack", "down", "--help"],
     ["stack", "status", "--help"], ["stack", "s3-env", "--help"],
     ["topics", "create", "--help"], ["topics", "list", "--help"],
     ["demo", "--help"], ["simulate", "--help"], ["sink", "--help"], ["process", "--help"],
     ["learn", "--help"], ["report", "--help"], ["query", "--help"], ["models", "--help"],
     ["features", "--help"], ["doctor", "--help"], ["privacy", "--help"],
     ["rollouts", "--help"]],
)  # fmt: skip
def test_every_command_has_help(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_configuration_error_is_one_line_with_the_fix_and_no_traceback() -> None:
    result = CliRunner().invoke(
        cli, ["stack", "status"], env={"FLYWHEEL_BOOTSTRAP_SERVERS": "k:9092"}
    )
    assert result.exit_code == 1
    assert "FLYWHEEL_SCHEMA_REGISTRY_URL" in result.output
    assert "Traceback" not in result.output


def test_status_of_an_external_cluster_masks_secrets() -> None:
    env = {
        "FLYWHEEL_BOOTSTRAP_SERVERS": "k:9092",
        "FLYWHEEL_SCHEMA_REGISTRY_URL": "http://r:8081",
        "FLYWHEEL_KAFKA_SASL_PASSWORD": "hunter2",
    }
    result = CliRunner().invoke(cli, ["stack", "status"], env=env)
    assert result.exit_code == 0, result.output
    assert "no local stack is managed" in result.output
    assert "hunter2" not in result.output


def test_a_worker_command_loads_no_training_or_plotting_library() -> None:
    """Commands load lazily: `flywheel sink` must not pay for torch (~1 GB resident)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from flywheel.cli import cli\n"
        "try:\n"
        "    cli(['sink', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('torch', 'streaming', 'matplotlib') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("[]"), result.stdout


def test_the_sink_default_topics_keep_their_order() -> None:
    """`flywheel sink --topics` defaults to every event topic, in this order (unchanged since the
    topic → schema map moved to streams.topics)."""
    from flywheel.commands.sink import DEFAULT_TOPICS

    assert DEFAULT_TOPICS == (
        "telemetry.suggestions", "telemetry.outcomes", "telemetry.edits", "telemetry.tests",
        "rollouts.results", "agent.tasks", "agent.tool_calls", "agent.completions",
        "agent.feedback", "rewards", "features.updates", "models.versions", "models.channels",
        "models.acks", "privacy.erasures",
    )  # fmt: skip


def test_stack_status_piped_prints_whole_values(tmp_path: Path) -> None:
    """Not a terminal (piped, CI): no column is cut to 80 characters; --json for scripts."""
    home = tmp_path / ("a-long-state-directory-name-" * 3)
    env = {
        "FLYWHEEL_HOME": str(home),
        "FLYWHEEL_STACK_REGISTRY_PORT": "18081",
        "FLYWHEEL_STACK_S3_PORT": "19001",
    }
    result = CliRunner().invoke(cli, ["stack", "status"], env=env)
    assert result.exit_code == 0, result.output
    assert "http://127.0.0.1:18081/apis/ccompat/v7" in result.output
    assert str(home / "stack" / "logs") in result.output
    assert "…" not in result.output
    lines = result.stdout.splitlines()
    assert lines[0].split("\t") == ["service", "state", "pid", "address", "version", "log"]
    assert len(lines) == 4 and all(len(line.split("\t")) == 6 for line in lines)
    assert f"state directory: {home}" in result.stderr  # stdout holds only the records
    notes = " ".join(result.stderr.split())  # the notes wrap at the terminal's width
    assert "object store: s3://flywheel at http://127.0.0.1:19001;" in notes
    result = CliRunner().invoke(cli, ["stack", "status", "--json"], env=env)
    services = json.loads(result.stdout)
    registry = next(s for s in services if s["service"] == "registry")
    assert registry["address"] == "http://127.0.0.1:18081/apis/ccompat/v7"
    assert registry["running"] is False and registry["log"].startswith(str(home))


def test_stack_s3_env_prints_exports_that_reach_the_local_store(tmp_path: Path) -> None:
    env = {"FLYWHEEL_HOME": str(tmp_path), "FLYWHEEL_STACK_S3_PORT": "19000"}
    result = CliRunner().invoke(cli, ["stack", "s3-env"], env=env)
    assert result.exit_code == 0, result.output
    exports = dict(
        shlex.split(line.removeprefix("export "))[0].split("=", 1)
        for line in result.stdout.splitlines()
    )
    credentials = tmp_path / "stack" / "s3" / "credentials"
    assert f"AWS_SECRET_ACCESS_KEY={exports['AWS_SECRET_ACCESS_KEY']}" in credentials.read_text()
    assert exports["FLYWHEEL_S3_ENDPOINT"] == "http://127.0.0.1:19000"
    location = StorageLocation.parse("s3://flywheel/x", exports)
    assert location.credentials is not None and location.credentials.access_key_id == "flywheel"
    again = CliRunner().invoke(cli, ["stack", "s3-env"], env=env)
    assert again.stdout == result.stdout  # generated once


def test_stack_s3_env_with_an_external_cluster_names_the_fix(tmp_path: Path) -> None:
    env = {
        "FLYWHEEL_HOME": str(tmp_path),
        "FLYWHEEL_BOOTSTRAP_SERVERS": "k:9092",
        "FLYWHEEL_SCHEMA_REGISTRY_URL": "http://r:8081",
    }
    result = CliRunner().invoke(cli, ["stack", "s3-env"], env=env)
    assert result.exit_code == 1
    assert "set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and FLYWHEEL_S3_ENDPOINT" in result.output
    assert not (tmp_path / "stack").exists()
