"""The demo's agent rows: numbers from the versions' events and the lake's online rewards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from contracts.advantages import USE_REWARD_FN
from environments import PROGRAM_SYNTHESIS, REPOSITORY
from flywheel.demo.agent import (
    agent_specs,
    agent_version_results,
    online_rewards,
    torch_threads_env,
    warm_up_spec,
)
from flywheel.demo.loop import DemoOptions, _agent_line
from learner.continuous import WINDOW_LAST_EVENT_METRIC
from learner.recipes.agent_rl.windows import SERVED
from model_registry.registry import NO_WINDOW, fold_versions
from schemas.enums import ModelEventType, RewardSource
from schemas.events import ModelVersionEvent, Reward
from streams.topics import REWARDS_TOPIC
from tests.learner.recipes.agent_rl.agent_lake import write_lake_file

T0 = datetime(2026, 12, 3, 12, tzinfo=UTC)


def _event(version: int, kind: ModelEventType, second: int, **metrics: float) -> ModelVersionEvent:
    return ModelVersionEvent(
        producer="test/1", event_time=T0 + timedelta(seconds=second), model_name="agent",
        version=version, parent_version=version - 1 or None, event_type=kind,
        artifact_uri=f"file:///m/{version}", artifact_sha256=f"{version:064x}",
        training_window=NO_WINDOW, reward_fn="grpo@1", metrics=metrics, reason=kind.name.lower(),
    )  # fmt: skip


def test_agent_rows_carry_the_check_numbers_online_rewards_and_data_to_live() -> None:
    checked = {"eval_pass_at_1": 0.19, "eval_production_pass_at_1": 0.155,
             "eval_pass_at_1_level1": 0.3, "eval_pass_at_1_level2": 0.1,
             "eval_extra_pass_at_1": 0.02,
             "eval_pass_lift_lower": 0.005, "train_tokens": 8315.0, "stale_rows": 3.0,
             "train_rows": 400.0, "served_rows": 96.0,
             WINDOW_LAST_EVENT_METRIC: (T0.timestamp() + 100) * 1000}  # fmt: skip
    states = fold_versions([
        _event(1, ModelEventType.REGISTERED, 0, eval_pass_at_1=0.155),
        _event(1, ModelEventType.PROMOTED, 1, eval_pass_at_1=0.155),
        _event(2, ModelEventType.REGISTERED, 150, **checked),
        _event(2, ModelEventType.GATE_PASSED, 151, **checked),
        _event(2, ModelEventType.PROMOTED, 182, **checked),
        _event(3, ModelEventType.REGISTERED, 300, eval_pass_at_1=0.18),
        _event(3, ModelEventType.GATE_FAILED, 301, eval_pass_at_1=0.18),
    ])  # fmt: skip
    served = {2: (0.31, 40)}
    rows = agent_version_results(states, {1: (0.08, 4000), 2: (0.09, 3700)}, served,
                                 T0.timestamp())  # fmt: skip
    v1, v2, v3 = rows
    assert (v1.eval_pass_at_1, v1.online_reward, v1.trials, v1.decision) == (
        0.155, 0.08, 4000, "PROMOTED")  # fmt: skip
    assert v2.eval_pass_lower == pytest.approx(0.16)  # production 15.5% + the lift's bound
    assert v2.data_to_live_s == pytest.approx(82.0)  # newest reward at +100 s, promoted at +182
    assert (v2.train_tokens, v2.stale_rows, v2.decided_at_s) == (8315, 3, 182.0)
    assert (v2.served_share, v2.served_reward, v2.served) == (0.24, 0.31, 40)
    assert v2.level_pass_at_1 == {"1": 0.3, "2": 0.1} and v2.extra_pass_at_1 == 0.02
    assert v1.level_pass_at_1 == {} and v1.extra_pass_at_1 is None
    assert (v1.served_share, v1.served_reward, v1.served) == (None, None, 0)
    assert (v3.online_reward, v3.trials, v3.decision, v3.data_to_live_s) == (
        None, 0, "GATE_FAILED", None)  # fmt: skip
    options = DemoOptions(None, 6, 900, 200, "gate", "run", loop="both", agent_versions=4)  # type: ignore[arg-type]
    line = _agent_line(states, options)
    assert line == "agent: production v2 pass@1 19.0%, decided 3/4, last v3 GATE_FAILED"


@pytest.mark.parametrize(("cpus", "threads"), [(1, "1"), (2, "1"), (6, "2"), (16, "5")])
def test_the_agent_loops_torch_processes_share_the_cores(cpus: int, threads: str) -> None:
    assert torch_threads_env(cpus) == {"OMP_NUM_THREADS": threads}


def test_only_the_torch_workers_get_a_thread_share() -> None:
    specs = {s.name: s for s in agent_specs("agent-lm", 4, "r", 8080, PROGRAM_SYNTHESIS)}
    assert {n for n, s in specs.items() if "OMP_NUM_THREADS" in s.env} == {
        "rollouts", "agent-serve", "agent-learner"
    }  # fmt: skip


def test_each_environment_runs_its_recipes_and_trials() -> None:
    repository = {s.name: s.args for s in agent_specs("agent-lm", 4, "r", 8080, REPOSITORY)}
    assert set(repository) == {"rollouts", "agent-learner", "agent-serve", "agent-users"}
    users = repository["agent-users"]  # tool sessions, sampled as the trials are (on-policy)
    assert users[users.index("--env") + 1] == REPOSITORY
    assert users[users.index("--temperature") + 1] == "0.6" and "--max-turns" in users
    rollouts = repository["rollouts"]
    assert rollouts[rollouts.index("--from-pool") + 1] == REPOSITORY
    assert rollouts[rollouts.index("--max-context") + 1] == "512"
    learner = repository["agent-learner"]
    assert learner[learner.index("--config") + 1].endswith("rl.yaml")
    synthesis = {s.name: s.args for s in agent_specs("agent-lm", 4, "r", 8080, PROGRAM_SYNTHESIS)}
    learner = synthesis["agent-learner"]
    assert learner[learner.index("--config") + 1].endswith("rl-program-synthesis.yaml")
    assert "--max-context" not in synthesis["rollouts"]
    sft = warm_up_spec("agent-lm", PROGRAM_SYNTHESIS).args
    assert sft[sft.index("--config") + 1].endswith("sft-program-synthesis.yaml")


def _served_reward(completion_id: str, version: int, value: float, reacted: bool) -> Reward:
    return Reward(
        producer="joiner/t", event_time=T0, reward_id=f"r-{completion_id}",
        source=RewardSource.COMPLETION, source_id=completion_id, session_id="s",
        model_name="agent", model_version=version, reward=value,
        reward_components={"accepted": value} if reacted else {}, reward_fn=USE_REWARD_FN,
        attributed_at=T0,
    )  # fmt: skip


def test_served_rewards_count_what_users_reacted_to(tmp_path: Path) -> None:
    """A tool session's earlier turns get Rewards without reactions (0): the served reward per
    version is over the reacted ones, one per session."""
    rewards = [
        _served_reward("a:0", 2, 0.0, False),
        _served_reward("b:0", 2, 1.0, True),
        _served_reward("c:0", 2, -0.5, True),
        _served_reward("d:0", 3, 0.5, True),
    ]
    write_lake_file(tmp_path, REWARDS_TOPIC, rewards, T0)
    assert online_rewards(tmp_path, "agent", SERVED) == {2: (0.25, 2), 3: (0.5, 1)}
