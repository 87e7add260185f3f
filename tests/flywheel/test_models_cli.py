"""`flywheel models` against the real broker; a unique model name isolates each test."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.cli import cli
from flywheel.clients import codec
from flywheel.settings import Settings
from model_registry.artifacts import publish_artifact
from model_registry.registry import ModelRegistry
from schemas.enums import Channel, ModelEventType


@pytest.mark.parametrize(
    "args",
    [["models", "--help"], ["models", "list", "--help"], ["models", "show", "--help"],
     ["models", "promote", "--help"], ["models", "rollback", "--help"],
     ["models", "canary", "--help"]],
)  # fmt: skip
def test_models_commands_have_help(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert "--model" in result.output or args == ["models", "--help"]


def run_split(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["models", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def model(stack: Settings) -> str:
    return f"cli-test-{uuid.uuid4().hex[:8]}"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["models", *args], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.integration
def test_list_show_promote_canary_rollback(stack: Settings, model: str, tmp_path: Path) -> None:
    code, output = run("list", "--model", model)
    assert code == 0 and "no versions" in output and "fallback v0" in output

    registry = ModelRegistry(stack.kafka_client_config(), codec(stack))
    for version, parent in ((1, None), (2, 1)):
        source = tmp_path / f"src-{version}"
        source.mkdir()
        (source / "model.json").write_text(str(version))
        ref = publish_artifact(tmp_path / "models", model, version, source)
        registry.register(model, ref, parent_version=parent, reward_fn="tab@1",
                          metrics={"train_loss": 0.25})  # fmt: skip
    registry.record_step(model, 2, ModelEventType.GATE_PASSED, reason="significant lift",
                         ope_dr_value=0.31, ope_dr_lower=0.27)  # fmt: skip

    assert model in registry.model_names()
    code, output = run("list")  # no --model: every registered model, this one among them
    assert code == 0 and f"{model}\t1\t" in output, output
    code, stdout, stderr = run_split("list", "--model", model)
    assert code == 0, stdout
    header, *rows = [line.split("\t") for line in stdout.splitlines()]  # no terminal: a line each
    assert header == ["model", "v", "parent", "state", "DR [lower]", "registered", "channels",
                      "reason"]  # fmt: skip
    assert [r[1] for r in rows] == ["1", "2"] and all(len(r) == len(header) for r in rows)
    assert (
        rows[1][3] == "GATE_PASSED" and rows[1][4] == "0.31 [0.27]" and rows[0][3] == "REGISTERED"
    )
    assert datetime.fromisoformat(rows[0][5]).utcoffset() == timedelta(0)  # year and zone
    assert "production: v0 (the fallback" in stderr  # stdout holds only the records
    code, stdout, _ = run_split("list", "--model", model, "--json")
    records = json.loads(stdout)
    assert [(r["model"], r["version"], r["kind"]) for r in records] == [
        (model, 1, "gate"), (model, 2, "gate"),
    ]  # fmt: skip
    assert records[1]["dr"] == [0.31, 0.27] and records[1]["parent"] == 1

    code, stdout, stderr = run_split("show", "2")  # no --model: the model registered last
    assert code == 0 and f"model {model} (the most recently registered" in stderr, stderr

    code, output = run("promote", "1", "--model", model)
    assert code == 0 and f"{model}: production → v1 (was v0)" in output
    code, output = run("canary", "2", "--fraction", "0.25", "--model", model)
    assert code == 0 and "canary → v2 for 25.0% of users" in output
    code, output = run("list", "--model", model)
    assert "canary: v2 for 25.0% of users" in output and "production: v1" in output

    code, output = run("show", "2", "--model", model)
    assert code == 0, output
    for text in ("CANARY_STARTED", "significant lift", "train_loss", "canary 25%", "file://"):
        assert text in output
    code, output = run("promote", "2", "--model", model, "--reason", "canary won")
    assert code == 0 and "production → v2 (was v1)" in output
    code, output = run("rollback", "--model", model, "--reason", "latency")
    assert code == 0 and "production → v1 (rolled back from v2)" in output
    assert registry.channels(model)[Channel.PRODUCTION].version == 1
    assert registry.version(model, 2).latest.reason == "latency"


@pytest.mark.integration
def test_an_agent_model_lists_its_own_columns(stack: Settings, model: str, tmp_path: Path) -> None:
    registry = ModelRegistry(stack.kafka_client_config(), codec(stack))
    source = tmp_path / "src"
    source.mkdir()
    (source / "model.json").write_text("1")
    ref = publish_artifact(tmp_path / "models", model, 1, source)
    registry.register(model, ref, parent_version=None, reward_fn="sft@1",
                      metrics={"eval_pass_at_1": 0.25})  # fmt: skip
    code, stdout, _ = run_split("list", "--model", model)
    assert code == 0, stdout
    header, row = [line.split("\t") for line in stdout.splitlines()]
    assert "DR [lower]" not in header and "pass@1" in header  # no gate-only column
    assert row[header.index("pass@1")] == "25.0%"
    (record,) = json.loads(run_split("list", "--model", model, "--json")[1])
    assert record["kind"] == "agent" and record["pass_at_1"] == 0.25 and "dr" not in record


@pytest.mark.integration
def test_errors_name_the_fix(stack: Settings, model: str) -> None:
    result = CliRunner().invoke(cli, ["models", "promote", "7", "--model", model])
    assert result.exit_code == 1
    assert "has no version 7" in result.output and "flywheel models list" in result.output
    result = CliRunner().invoke(cli, ["models", "rollback", "--model", model])
    assert result.exit_code == 1 and "flywheel models promote" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["models", "canary", "1", "--fraction", "0", "--model", model])
    assert result.exit_code == 2 and "fraction" in result.output.lower()
