"""Commands that run model-written code fail closed where it cannot be isolated, and start
unisolated only with the operator's flag, saying so loudly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from environments.isolation import BWRAP_ENV, TRUST_ENV, probe
from flywheel.cli import cli


class _Reached(Exception):
    """Raised by a stand-in for the model subscriber: the worker got past its start-up check."""


@pytest.fixture
def no_isolation(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine without bubblewrap (simulated: the binary named does not exist)."""
    monkeypatch.setenv(BWRAP_ENV, "/nonexistent/bwrap")
    monkeypatch.delenv(TRUST_ENV, raising=False)
    probe.cache_clear()
    yield
    probe.cache_clear()


@pytest.mark.usefixtures("no_isolation")
@pytest.mark.parametrize(
    "args",
    [
        ["rollouts", "--from-pool", "program-synthesis", "--max-tasks", "1"],
        ["agent-users", "--users", "1"],
        ["learn", "--recipe", "agent"],
    ],
)
def test_model_code_runners_refuse_to_start_without_isolation(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "cannot isolate model-written code" in result.output
    assert "apt-get install bubblewrap" in result.output  # what is missing, and the fix
    assert "--trust-model-code" in result.output  # the only way around it


@pytest.mark.usefixtures("no_isolation")
def test_the_operator_flag_starts_the_worker_unisolated_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fleet.subscriber

    def reached(*_args: object, **_kwargs: object) -> None:
        raise _Reached

    monkeypatch.setattr(fleet.subscriber, "ModelSubscriber", reached)
    args = ["--trust-model-code", "rollouts", "--from-pool", "program-synthesis"]
    result = CliRunner().invoke(cli, args)
    assert isinstance(result.exception, _Reached), result.output  # past the check
    assert "WARNING: model-written code runs WITHOUT isolation" in result.output


@pytest.mark.usefixtures("no_isolation")
def test_doctor_reports_the_missing_sandbox_with_its_fix() -> None:
    result = CliRunner().invoke(cli, ["doctor", "--check", "sandbox"])
    assert result.exit_code == 1
    assert "sandbox\tFAIL" in result.output and "bubblewrap" in result.output


def test_doctor_reports_the_isolation_in_force() -> None:
    probe.cache_clear()
    result = CliRunner().invoke(cli, ["doctor", "--check", "sandbox"])
    assert result.exit_code == 0, result.output
    assert "user, pid, network" in " ".join(result.output.split())
