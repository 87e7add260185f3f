"""The demo report: numbers, files, and plots that really render in headless Chromium."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from flywheel.cli import cli
from flywheel.demo.results import AgentVersionResult, RunResults, TimelinePoint, VersionResult
from flywheel.report import write_report
from flywheel.report.html import agent_headline_text, headline_text, pass_at_k_text


def _version(
    version: int, decision: str, shown: float, accept: float, **kw: object
) -> VersionResult:
    base: dict[str, object] = {
        "version": version,
        "parent_version": version - 1 if version else None,
        "requests": 5000,
        "shown_per_1000": shown,
        "accept_rate": accept,
        "reward_per_request": shown / 1000 * (accept - 0.25),
        "gate_estimate": None,
        "gate_lower": None,
        "gate_baseline": None,
        "decision": decision,
        "reason": None,
        "data_to_live_s": None,
        "decided_at_s": None,
    }
    base.update(kw)
    return VersionResult(**base)  # type: ignore[arg-type]  # built from a literal dict above


def sample_results() -> RunResults:
    versions = [
        _version(0, "SERVING", 950.0, 0.30),
        _version(
            1,
            "PROMOTED",
            700.0,
            0.40,
            gate_estimate=0.05,
            gate_lower=0.03,
            gate_baseline=0.02,
            data_to_live_s=40.0,
            decided_at_s=90.0,
        ),
        _version(
            2,
            "GATE_FAILED",
            0.0,
            0.0,
            requests=0,
            gate_estimate=0.01,
            gate_lower=-0.02,
            gate_baseline=0.05,
            decided_at_s=180.0,
            reason="lower bound < 0",
        ),
    ]
    timeline = [
        TimelinePoint(
            t_s=30.0 * i,
            version=0 if i < 4 else 1,
            requests=1000,
            shown=950 if i < 4 else 700,
            accepted=300,
            reward_sum=10.0,
        )
        for i in range(1, 8)
    ]
    return RunResults(
        "run-1",
        "suggestion-gate",
        "2026-12-02T00:00:00+00:00",
        "default.yaml",
        versions,
        timeline,
        elapsed_s=240.0,
    )


def _agent(version: int, decision: str, pass_at_1: float) -> AgentVersionResult:
    return AgentVersionResult(
        version=version, parent_version=version - 1 or None, eval_pass_at_1=pass_at_1,
        eval_pass_lower=pass_at_1 - 0.03, online_reward=pass_at_1 + 0.05, trials=800,
        train_tokens=12_000 * (version > 1), stale_rows=0, data_to_live_s=30.0,
        decision=decision, reason=f"{decision.lower()} because", decided_at_s=60.0 * version,
        train_rows=400 * (version > 1), served_rows=100 * (version > 1), served_reward=0.25,
        served=120,
    )  # fmt: skip


def with_agent(results: RunResults) -> RunResults:
    results.loop, results.agent_model = "both", "agent-run-1"
    results.agent_versions = [_agent(1, "PROMOTED", 0.155), _agent(2, "GATE_FAILED", 0.14),
                              _agent(3, "PROMOTED", 0.21)]  # fmt: skip
    return results


def test_the_agent_headline_compares_the_best_promoted_version_with_the_first() -> None:
    results = with_agent(sample_results())
    assert agent_headline_text(results) == (
        "Agent: best promoted v3 eval pass@1 21.0% vs v1 15.5% (+5.5 points). "
        "Served to users: 360 reacted sessions (or completions), 25% of the 800 rows trained on."
    )
    results.agent_versions = results.agent_versions[:2]
    assert "no RL version promoted (1 candidate(s) decided)" in agent_headline_text(results)


def test_agent_rows_round_trip_and_render(tmp_path: Path) -> None:
    results = with_agent(sample_results())
    path = results.save(tmp_path / "run", tmp_path / "lake")
    assert RunResults.load(path) == results
    text = write_report(results, tmp_path / "report").read_text()
    assert "agent-run-1" in text and "21.0%" in text and 'title="gate_failed because"' in text
    assert "served share" in text and "0.250 (120)" in text
    assert (tmp_path / "report" / "agent.png").read_bytes()[:4] == b"\x89PNG"


def test_the_repository_loop_shows_levels_pass_at_k_and_a_worked_episode(tmp_path: Path) -> None:
    results = with_agent(sample_results())
    results.agent_env, results.agent_extra_eval = "repository", "unseen templates"
    results.agent_versions[2] = dataclasses.replace(
        results.agent_versions[2], level_pass_at_1={"1": 0.4, "2": 0.12}, extra_pass_at_1=0.03
    )
    results.agent_pass_at_k = [
        {"version": 1.0, "tasks": 32.0, "pass@1": 0.1, "pass@8": 0.3},
        {"version": 3.0, "tasks": 32.0, "pass@1": 0.2, "pass@8": 0.4},
    ]
    results.agent_episode = {
        "version": 3, "task_id": "repo-1", "level": 1, "user": "Tests in test_text.py fail.",
        "turns": [{"call": 'run_tests({})', "observation": "FAILED test_a: 'x' <1>"},
                  {"call": "submit({})", "observation": ""}],
        "passed": True, "reward": 1.5, "tests": "3/3", "ended": "submitted",
    }  # fmt: skip
    path = results.save(tmp_path / "run", tmp_path / "lake")
    assert RunResults.load(path) == results
    assert pass_at_k_text(results) == (
        "v1 pass@1 10.0% pass@8 30.0% → v3 pass@1 20.0% pass@8 40.0% (32 held-out tasks, sampled)"
    )
    text = write_report(results, tmp_path / "report").read_text()
    assert "L1 40% L2 12%" in text and "unseen templates" in text and "3.0%" in text
    assert "One held-out episode of v3" in text and "solved, hidden tests 3/3" in text
    assert "FAILED test_a: &#x27;x&#x27; &lt;1&gt;" in text  # observations are escaped


def test_headline_compares_final_production_with_v0() -> None:
    results = sample_results()
    shown, accept = results.headline() or (0.0, 0.0)
    assert shown == pytest.approx(700 / 950 - 1)
    assert accept == pytest.approx(0.40 / 0.30 - 1)
    assert "v1 vs v0" in headline_text(results)


def test_results_round_trip_and_land_in_the_lake(tmp_path: Path) -> None:
    results = sample_results()
    path = results.save(tmp_path / "run", tmp_path / "lake")
    assert RunResults.load(path) == results
    [file] = (tmp_path / "lake" / "demo.results").glob("dt=2026-12-02/hour=00/run-1.parquet")
    table = pq.read_table(file)
    assert table.column("version").to_pylist() == [0, 1, 2]
    assert table.column("decision").to_pylist()[1] == "PROMOTED"


def test_report_writes_every_plot(tmp_path: Path) -> None:
    page = write_report(sample_results(), tmp_path)
    text = page.read_text()
    for name in ("timeline", "reward", "gate", "cadence"):
        png = tmp_path / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f'src="{name}.png"' in text
    assert "GATE_FAILED" in text and "+" in headline_text(sample_results())


def test_report_command_reads_the_newest_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    sample_results().save(tmp_path / "demo" / "run-1", tmp_path / "lake")
    result = CliRunner().invoke(cli, ["report"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "demo" / "run-1" / "report" / "index.html").exists()


def test_report_without_runs_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["report"])
    assert result.exit_code == 1
    assert "flywheel demo" in result.output and "Traceback" not in result.output


def test_plots_render_in_headless_chromium(tmp_path: Path) -> None:
    """Chromium loads the page from disk (no server) and decodes every plot."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail(
            "chromium is missing: run `make test` (it installs it) or apt-get install chromium"
        )
    page = write_report(sample_results(), tmp_path / "report")
    dom = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert 'data-ready="true"' in dom
    assert dom.count('data-loaded="true"') == 4
    assert 'data-loaded="false"' not in dom
