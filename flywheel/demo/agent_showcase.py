"""After the agent loop, what a reader would rather see than read: sampled pass@1 and pass@8 on
held-out tasks before (the warm-up) and after (the newest production), and one held-out episode
of the newest production, turn by turn.

pass@k samples ``SAMPLES`` trials per task at the rollout workers' temperature: GRPO learns from
groups where some trial passes, so pass@8 of the warm-up bounds what RL can reach soon, and
pass@1 moving toward it is the learning (the unbiased estimator,
``learner.eval_suite.pass_at_k``). Both versions see the same first ``TASKS`` eval tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from environments import ENVIRONMENTS
from environments.episode_runner import run_episodes
from environments.episodes import EpisodeLimits, MultiTurnEnvironment
from learner.eval_suite import sampled_pass_at_k
from model_registry.artifacts import verify_artifact
from model_registry.registry import VersionState
from policies.agent_lm import load_checkpoint
from policies.agent_sampling import SamplingParams
from schemas.enums import ModelEventType

TASKS = 16
SAMPLES = 8
SHOWCASE_RESERVE_S = 90.0  # what it takes on 2 cores (two versions, 128 episodes each, and one
# greedy batch): the demo's loop ends this much before its budget
KS = (1, 8)
EPISODE_CANDIDATES = 16  # held-out tasks tried for the worked episode (a solved one is shown)


def showcase(
    states: Mapping[int, VersionState],
    environment_name: str,
    sampling: SamplingParams,
    limits: EpisodeLimits,
    log: Callable[[str], None] = print,
) -> tuple[list[dict[str, float]], dict[str, Any] | None]:
    """(pass@k rows of the first and the newest promoted version, the worked episode); empty
    when nothing was promoted after the first version."""
    promoted = [v for v, s in sorted(states.items())
                if any(e.event_type is ModelEventType.PROMOTED for e in s.events)]  # fmt: skip
    if not promoted:
        return [], None
    environment = ENVIRONMENTS.get_any(environment_name)
    tasks = environment.tasks("eval", TASKS)
    rows: list[dict[str, float]] = []
    newest: tuple[int, Any, Any] | None = None
    for version in sorted({promoted[0], promoted[-1]}):
        artifact = states[version].artifact
        model, tokenizer = load_checkpoint(verify_artifact(artifact.uri, artifact.sha256))
        rates = sampled_pass_at_k(model, tokenizer, environment, tasks, SAMPLES, KS, sampling,
                                  limits=limits, seed=0)  # fmt: skip
        rows.append({"version": float(version), "tasks": float(len(tasks)),
                     **{f"pass@{k}": rate for k, rate in rates.items()}})  # fmt: skip
        log(f"agent v{version}: " + ", ".join(f"pass@{k} {r:.1%}" for k, r in rates.items())
            + f" ({SAMPLES} samples of {len(tasks)} held-out tasks)")  # fmt: skip
        newest = (version, model, tokenizer)
    episode = None
    if newest is not None and isinstance(environment, MultiTurnEnvironment):
        episode = worked_episode(newest[0], newest[1], newest[2], environment, limits)
    return rows, episode


def worked_episode(
    version: int, model: Any, tokenizer: Any, environment: MultiTurnEnvironment,
    limits: EpisodeLimits,
) -> dict[str, Any]:  # fmt: skip
    """A greedy held-out episode of ``version``: the first of the candidates it solves, at the
    highest level it solves one (else the first candidate), as turns of call and observation."""
    tasks = environment.tasks("eval", EPISODE_CANDIDATES)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=64)
    traces = run_episodes(model, tokenizer, environment, tasks, greedy, limits=limits)
    solved = [t for t in traces if t.score.passed]
    trace = max(solved, key=lambda t: t.task.difficulty) if solved else traces[0]
    messages = list(trace.messages)
    turns, pending = [], None
    for message in messages[2:]:
        if message["role"] == "assistant":
            calls = message.get("tool_calls") or []
            function = calls[0]["function"] if calls else None
            call = (f"{function['name']}({function['arguments']})" if function
                    else str(message.get("content") or ""))  # fmt: skip
            pending = {"call": call, "observation": ""}
            turns.append(pending)
        elif message["role"] == "tool" and pending is not None:
            pending["observation"] = str(message.get("content") or "")
    return {
        "version": version, "task_id": trace.task.task_id, "level": trace.task.difficulty,
        "user": str(messages[1].get("content") or ""), "turns": turns,
        "passed": trace.score.passed, "reward": trace.score.reward,
        "tests": f"{trace.score.tests_passed}/{trace.score.tests_total}", "ended": trace.ended,
    }  # fmt: skip
