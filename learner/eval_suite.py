"""The agent's eval suite: the environment's held-out tasks (never trained on), decoded greedily
and scored in the sandbox. pass@1 is the share of tasks whose greedy completion passes every
hidden test; mean reward is the mean of the trials' summed reward components.

Per-task results are kept (``passed``, ``rewards``, in task order) so two versions evaluated on
the same tasks can be compared pairwise (the agent's eval check, part 2), with each task's
cluster (``environment.cluster``: its program) so the check's bootstrap resamples clusters.
The release check uses the ``eval`` split (held out by program); ``eval_extra`` (the
environment's ``extra_eval``, "seen programs") is evaluated the same way and only reported.

A multi-turn environment (``environments.episodes.MultiTurnEnvironment``) is evaluated on whole
greedy episodes (``environments.episode_runner.run_episodes``): a task passes when the episode's
final score does, and the result also counts each episode's turns and tool calls.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import comb
from pathlib import Path
from typing import Any

import numpy as np

from environments.base import Environment, Score, Task, score_all
from environments.episode_runner import EpisodeTrace, run_episodes
from environments.episodes import EpisodeLimits, MultiTurnEnvironment
from policies.agent_sampling import SamplingParams, sample

GREEDY_BATCH = 32  # prompts per generate call (episodes per lock-step batch)
# An eval episode's wall limit is a hang guard only (each tool call has its sandbox's own
# limits): a batch of episodes decodes together, so on a loaded machine (a demo's learner beside
# its rollout workers) the default 60 s ended passing episodes, and a verdict paired against a
# production result measured on a quiet machine must not depend on the load.
EVAL_EPISODE_WALL_S = 600.0
EVALS_FILE = "eval.json"  # a checkpoint's eval results, kept beside its weights


@dataclass(frozen=True)
class EvalConfig:
    """The eval suite: the first ``tasks`` held-out tasks, greedy; the first ``extra_tasks``
    of the ``eval_extra`` set, reported beside them (0: skip it)."""

    tasks: int = 1000  # a lift of 2 points is significant on 1,000 paired tasks, not on 200
    max_new_tokens: int = 24  # per turn in a multi-turn environment
    max_turns: int = 8  # multi-turn environments only
    max_context: int = 512  # tokens of an episode's whole context (<= the model's positions)
    extra_tasks: int = 200  # report only: a point estimate, so fewer tasks (and less time)

    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(self.max_turns, self.max_context, wall_s=EVAL_EPISODE_WALL_S)


@dataclass(frozen=True)
class EvalResult:
    """One model on one task set: per-task pass (bool), reward and cluster, in task order;
    per-task turns and tool calls (a single-shot trial is one turn, no call)."""

    task_ids: tuple[str, ...]
    passed: np.ndarray  # (n,) bool
    rewards: np.ndarray  # (n,) float64
    statuses: tuple[str, ...]
    turns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (n,)
    tool_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (n,)
    clusters: tuple[str, ...] = ()  # (n,) each task's cluster; empty: every task its own
    levels: tuple[int, ...] = ()  # (n,) each task's difficulty

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (kept with a shipped warm-up: its eval need not run again)."""
        return {"task_ids": list(self.task_ids), "passed": self.passed.tolist(),
                "rewards": self.rewards.tolist(), "statuses": list(self.statuses),
                "turns": self.turns.tolist(), "tool_calls": self.tool_calls.tolist(),
                "clusters": list(self.clusters), "levels": list(self.levels)}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EvalResult:
        return cls(
            tuple(raw["task_ids"]), np.asarray(raw["passed"], dtype=bool),
            np.asarray(raw["rewards"], dtype=np.float64), tuple(raw["statuses"]),
            np.asarray(raw["turns"], dtype=np.int64), np.asarray(raw["tool_calls"], dtype=np.int64),
            tuple(raw["clusters"]), tuple(raw["levels"]),
        )  # fmt: skip

    @property
    def pass_at_1(self) -> float:
        return float(self.passed.mean()) if len(self.passed) else 0.0

    @property
    def mean_reward(self) -> float:
        return float(self.rewards.mean()) if len(self.rewards) else 0.0

    def level_pass_at_1(self) -> dict[int, float]:
        """Difficulty level -> pass@1 of the tasks of that level."""
        levels = np.asarray(self.levels)
        return {int(level): float(self.passed[levels == level].mean())
                for level in sorted(set(self.levels))}  # fmt: skip

    def level_metrics(self, prefix: str = "eval") -> dict[str, float]:
        """``{prefix}_pass_at_1_level{L}`` for ModelVersionEvent metrics."""
        return {f"{prefix}_pass_at_1_level{level}": rate
                for level, rate in self.level_pass_at_1().items()}  # fmt: skip

    @property
    def mean_turns(self) -> float:
        return float(self.turns.mean()) if len(self.turns) else 0.0


def evaluate(
    model: Any,
    tokenizer: Any,
    environment: Environment | MultiTurnEnvironment,
    tasks: Sequence[Task],
    *,
    max_new_tokens: int = 32,
    limits: EpisodeLimits | None = None,
) -> EvalResult:
    """Greedy pass@1 and mean reward of ``model`` on ``tasks``: one completion per task, or
    one episode per task in a multi-turn environment (``max_new_tokens`` per turn, within
    ``limits``)."""
    clusters = tuple(environment.cluster(t) for t in tasks)
    if isinstance(environment, MultiTurnEnvironment):
        traces = greedy_episodes(model, tokenizer, environment, tasks, max_new_tokens, limits)
        return _result(tasks, [t.score for t in traces], clusters, [t.turns for t in traces],
                       [t.tool_calls for t in traces])  # fmt: skip
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    trials: list[tuple[Environment, Task, str]] = []
    for start in range(0, len(tasks), GREEDY_BATCH):
        chunk = tasks[start : start + GREEDY_BATCH]
        groups = sample(model, tokenizer, [environment.reset(t) for t in chunk], 1, greedy)
        trials.extend(
            (environment, task, group[0].text) for task, group in zip(chunk, groups, strict=True)
        )
    scores = score_all(trials)
    return _result(tasks, scores, clusters, [1] * len(tasks), [0] * len(tasks))


def greedy_episodes(
    model: Any,
    tokenizer: Any,
    environment: MultiTurnEnvironment,
    tasks: Sequence[Task],
    max_new_tokens: int = 32,
    limits: EpisodeLimits | None = None,
) -> list[EpisodeTrace]:
    """The episodes :func:`evaluate` scores, whole (turns, calls, endings: for reports)."""
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    return _episodes(model, tokenizer, environment, tasks, greedy, limits)


def _episodes(
    model: Any,
    tokenizer: Any,
    environment: MultiTurnEnvironment,
    tasks: Sequence[Task],
    params: SamplingParams,
    limits: EpisodeLimits | None,
    seed: int | None = None,
) -> list[EpisodeTrace]:
    """One episode per entry of ``tasks``, in order, stepped in lock-step chunks of
    ``GREEDY_BATCH`` as a worker runs them: an episode's wall time is its whole batch's, and 192
    at once on 2 cores ran past the 60 s limit (30 of them were cut). Each chunk has a seed of
    its own."""
    traces: list[EpisodeTrace] = []
    for chunk, start in enumerate(range(0, len(tasks), GREEDY_BATCH)):
        traces.extend(run_episodes(
            model, tokenizer, environment, tasks[start : start + GREEDY_BATCH], params,
            limits=limits, seed=None if seed is None else seed + 1000 * chunk,
        ))  # fmt: skip
    return traces


def _result(
    tasks: Sequence[Task],
    scores: Sequence[Score],
    clusters: tuple[str, ...],
    turns: Sequence[int],
    calls: Sequence[int],
) -> EvalResult:
    return EvalResult(
        tuple(t.task_id for t in tasks),
        np.asarray([s.passed for s in scores], dtype=bool),
        np.asarray([s.reward for s in scores], dtype=np.float64),
        tuple(s.status for s in scores),
        np.asarray(turns, dtype=np.int64),
        np.asarray(calls, dtype=np.int64),
        clusters,
        tuple(t.difficulty for t in tasks),
    )


def extra_metrics(extra: EvalResult | None, prefix: str = "eval_extra") -> dict[str, float]:
    """The ``eval_extra`` set's pass@1 and size as ModelVersionEvent metrics (none when the set
    was skipped: ``EvalConfig.extra_tasks`` 0)."""
    if extra is None:
        return {}
    return {f"{prefix}_pass_at_1": extra.pass_at_1, f"{prefix}_tasks": float(len(extra.passed))}


@dataclass(frozen=True)
class Trial:
    """One sampled trial of a task, scored: a completion, or a whole episode (its completion holds
    the turns and the tool observations; ``mask`` 1 where the policy generated the token, empty
    when it generated them all)."""

    task: Task
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    mask: tuple[int, ...]
    score: Score
    turns: int = 1


def sample_trials(
    model: Any,
    tokenizer: Any,
    environment: Environment | MultiTurnEnvironment,
    tasks: Sequence[Task],
    group_size: int,
    sampling: SamplingParams,
    *,
    limits: EpisodeLimits | None = None,
    seed: int | None = None,
) -> list[Trial]:
    """``group_size`` sampled trials of each task, scored, task by task in order: one batched
    generate and the sandbox for single completions, lock-step episodes for a multi-turn
    environment (what a rollout worker does, in this process: studies, pass@k, tests)."""
    if isinstance(environment, MultiTurnEnvironment):
        repeated = [t for t in tasks for _ in range(group_size)]
        traces = _episodes(model, tokenizer, environment, repeated, sampling, limits, seed)
        return [Trial(t.task, t.prompt_ids, t.completion_ids, t.logprobs, t.mask, t.score,
                      t.turns) for t in traces]  # fmt: skip
    groups = sample(model, tokenizer, [environment.reset(t) for t in tasks], group_size,
                    sampling, seed=seed)  # fmt: skip
    done = [(task, c) for task, group in zip(tasks, groups, strict=True) for c in group]
    scores = score_all([(environment, task, c.text) for task, c in done])
    return [Trial(task, c.prompt_ids, c.token_ids, c.logprobs, (), score)
            for (task, c), score in zip(done, scores, strict=True)]  # fmt: skip


def pass_at_k(correct: Sequence[int] | np.ndarray, n: int, k: int) -> float:
    """Mean over tasks of the chance that ``k`` of a task's ``n`` samples hold a correct one,
    given ``correct`` (per task) of them were: the unbiased 1 - C(n - c, k) / C(n, k)."""
    return float(np.mean([1.0 - comb(n - int(c), k) / comb(n, k) for c in correct]))


def sampled_pass_at_k(
    model: Any,
    tokenizer: Any,
    environment: Environment | MultiTurnEnvironment,
    tasks: Sequence[Task],
    samples: int,
    ks: Sequence[int],
    sampling: SamplingParams,
    *,
    limits: EpisodeLimits | None = None,
    seed: int | None = None,
) -> dict[int, float]:
    """pass@k for each of ``ks`` (<= ``samples``) over ``samples`` sampled trials per task."""
    correct: list[int] = []
    step = max(1, GREEDY_BATCH // samples)
    for start in range(0, len(tasks), step):
        trials = sample_trials(model, tokenizer, environment, tasks[start : start + step],
                               samples, sampling, limits=limits, seed=seed)  # fmt: skip
        correct += [sum(t.score.passed for t in trials[i : i + samples])
                    for i in range(0, len(trials), samples)]  # fmt: skip
    return {k: pass_at_k(correct, samples, k) for k in ks if k <= samples}


def save_evals(
    directory: Path, settings: EvalConfig, result: EvalResult, extra: EvalResult | None
) -> None:
    """Keep a checkpoint's eval results (per task) in ``directory`` with the settings that
    produced them, so whoever loads the same weights need not evaluate them again."""
    raw = {"settings": dataclasses.asdict(settings), "eval": result.to_dict(),
           "extra": None if extra is None else extra.to_dict()}  # fmt: skip
    (directory / EVALS_FILE).write_text(json.dumps(raw, separators=(",", ":")) + "\n")


def load_evals(
    directory: Path, settings: EvalConfig
) -> tuple[EvalResult, EvalResult | None] | None:
    """The results :func:`save_evals` kept in ``directory`` when they were measured with
    ``settings`` (the same held-out tasks, limits and greedy decoding: the same verdicts for the
    same weights); None when there are none or the settings differ."""
    try:
        raw = json.loads((directory / EVALS_FILE).read_text())
        if raw["settings"] != dataclasses.asdict(settings):
            return None
        extra = None if raw["extra"] is None else EvalResult.from_dict(raw["extra"])
        return EvalResult.from_dict(raw["eval"]), extra
    except (OSError, ValueError, KeyError, TypeError):
        return None
