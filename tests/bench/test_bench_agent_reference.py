"""bench.agent_reference reads the loop's budget and gain from a demo run's results: one block
per candidate version (the new trials it trained on), gain = best promoted pass@1 - v1's."""

from __future__ import annotations

from dataclasses import replace

from bench.agent_reference import loop_run
from flywheel.demo.results import AgentVersionResult, RunResults


def _version(version: int, decision: str, pass_at_1: float | None, rows: int, served: int = 0,
             trials: int = 0) -> AgentVersionResult:  # fmt: skip
    return AgentVersionResult(
        version=version, parent_version=version - 1 if version > 1 else None,
        eval_pass_at_1=pass_at_1, eval_pass_lower=None, online_reward=None, trials=trials,
        train_tokens=0, stale_rows=0, data_to_live_s=None, decision=decision, reason=None,
        decided_at_s=None, train_rows=rows, served_rows=served,
    )  # fmt: skip


def _results(*versions: AgentVersionResult) -> RunResults:
    return RunResults("run", "tab", "2026-12-06T09:00:00+00:00", "demo.yaml", loop="agent",
                      agent_versions=list(versions))  # fmt: skip


def test_blocks_are_the_new_trials_of_each_candidate_and_the_gain_the_best_promoted() -> None:
    results = _results(
        _version(1, "PROMOTED", 0.20, 0, trials=900),
        _version(3, "PROMOTED", 0.24, 500, served=20, trials=300),
        _version(2, "GATE_FAILED", 0.19, 400),
        _version(4, "PROMOTED", 0.23, 450),
    )
    loop = loop_run(results)
    assert loop.blocks == [400, 480, 450]  # in version order, served completions left out
    assert loop.gain is not None and abs(loop.gain - 0.04) < 1e-9


def test_nothing_promoted_is_no_gain_and_old_results_count_trials() -> None:
    old = _results(_version(1, "PROMOTED", 0.2, 0, trials=700),
                   _version(2, "GATE_FAILED", 0.3, 0, trials=64))  # fmt: skip
    loop = loop_run(old)
    assert loop.blocks == [64] and loop.gain == 0.0
    unknown = _results(replace(old.agent_versions[0], eval_pass_at_1=None), old.agent_versions[1])
    assert loop_run(unknown).gain is None
