"""The simulator's fast statistical stand-in for the agent: ``RolloutResult`` groups drawn from a
formula, no language model (the real agent is `flywheel rollouts`: an LM acting in sandboxed
environments, fleet/rollout_worker.py). It keeps the suggestion-gate demo's rollout traffic cheap.

Each task has a hidden difficulty; a trial's quality is ``sigmoid(agent_skill_logit - difficulty
+ ε)`` with ε ~ N(0, trial_noise) per trial, so trials of one group differ and a group-relative
advantage (GRPO) has signal. Quality sets the share of the task's tests that pass and how
confident the behaviour log-probabilities are. Rollouts use their own generator stream, so they
are the same whatever the suggestion policy does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from schemas.events import RolloutResult
from simulator.config import RolloutsConfig
from simulator.ids import uuid_strings

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms_to_datetime(ms: int) -> datetime:
    """The aware UTC datetime ``ms`` milliseconds after the Unix epoch (exact, no float)."""
    return _EPOCH + timedelta(milliseconds=ms)


class StatisticalRolloutGenerator:
    """Makes the trials of one agent task group at a time from a dedicated generator."""

    def __init__(self, config: RolloutsConfig, rng: np.random.Generator, producer: str) -> None:
        self.config = config
        self._rng = rng
        self._producer = producer
        self._difficulty = config.difficulty_spread * rng.standard_normal(config.n_tasks)
        tests = config.median_tests * np.exp(0.5 * rng.standard_normal(config.n_tasks))
        self._tests = np.maximum(1, np.rint(tests)).astype(np.int64)

    def group(self, start_ms: int) -> list[tuple[int, RolloutResult]]:
        """``group_size`` trials of one random task started at ``start_ms``, as
        ``(finish time ms, event)`` pairs; each event's time is its trial's finish."""
        c, rng = self.config, self._rng
        n = c.group_size
        task = int(rng.integers(c.n_tasks))
        ids = uuid_strings(rng, 1 + 2 * n)
        noise = c.trial_noise * rng.standard_normal(n)
        quality = 1.0 / (1.0 + np.exp(-(c.agent_skill_logit - self._difficulty[task] + noise)))
        total = int(self._tests[task])
        passed = rng.binomial(total, quality)
        format_ok = rng.random(n) < c.format_ok_probability
        spread = np.exp(c.tokens_sigma * rng.standard_normal((3, n)))
        completion = np.clip(np.rint(c.median_completion_tokens * spread[0]), 1, None)
        completion = np.minimum(completion, c.max_completion_tokens).astype(np.int64)
        prompt = np.maximum(1, np.rint(c.median_prompt_tokens * spread[1])).astype(np.int64)
        duration = np.maximum(1, np.rint(c.median_trial_seconds * 1e3 * spread[2]))
        tool_calls = rng.poisson(c.mean_tool_calls, n)
        out = []
        for i in range(n):
            # Better trials are more confident: mean -log p per token from 0.75 down to 0.15.
            scale = 0.15 + 0.6 * (1.0 - quality[i])
            logprobs = (-rng.exponential(scale, int(completion[i]))).astype(np.float32)
            finish_ms = start_ms + int(duration[i])
            event = RolloutResult(
                event_id=ids[1 + 2 * i],
                event_time=epoch_ms_to_datetime(finish_ms),
                producer=self._producer,
                rollout_id=ids[2 + 2 * i],
                task_id=f"task-{task}",
                group_id=ids[0],
                model_name=c.model_name,
                model_version=c.model_version,
                prompt_tokens=int(prompt[i]),
                completion_tokens=int(completion[i]),
                tool_calls=int(tool_calls[i]),
                tests_passed=int(passed[i]),
                tests_total=total,
                reward_components={
                    "tests": float(passed[i]) / total,
                    "all_tests": float(passed[i] == total),
                    "format": float(format_ok[i]),
                },
                behaviour_logprobs=tuple(logprobs.tolist()),
                duration_ms=int(duration[i]),
            )
            out.append((finish_ms, event))
        return out
