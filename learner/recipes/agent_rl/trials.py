"""Trials as GRPO training rows: groups sampled from a policy (completions or episodes), scored,
normalised within their group, packed into token rows with the behaviour log-probs at the
completion positions and an episode's tool observations masked out.

The platform's path is rollout workers → ``rollouts.results`` → the joiner's ``grpo@1`` Rewards
→ the lake. This module does the same steps in one process (the same sampling, sandbox and
advantage formula), for studies of the objective (``bench/agent_learning.py``) and tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from contracts.advantages import normalised_advantages
from environments.base import Environment, Task
from environments.episodes import EpisodeLimits, MultiTurnEnvironment
from learner.eval_suite import sample_trials
from learner.recipes.agent_rl.windows import AgentRows, agent_rows
from policies.agent_sampling import SamplingParams


def collect_trials(
    model: Any,
    tokenizer: Any,
    environment: Environment | MultiTurnEnvironment,
    tasks: Sequence[Task],
    group_size: int,
    sampling: SamplingParams,
    *,
    seq_len: int,
    seed: int | None = None,
    version: int = 0,
    limits: EpisodeLimits | None = None,
) -> AgentRows:
    """``group_size`` trials of each task (completions or episodes:
    ``learner.eval_suite.sample_trials``), scored in the sandbox, as training rows (version
    ``version``, one group per task; an episode's observations masked out)."""
    trials = sample_trials(model, tokenizer, environment, tasks, group_size, sampling,
                           limits=limits, seed=seed)  # fmt: skip
    rewards = np.asarray([t.score.reward for t in trials], dtype=np.float32)
    advantages = np.concatenate([
        normalised_advantages(rewards[i * group_size : (i + 1) * group_size].tolist())
        for i in range(len(tasks))
    ]).astype(np.float32)  # fmt: skip
    return agent_rows(
        [t.prompt_ids for t in trials], [t.completion_ids for t in trials],
        [t.logprobs for t in trials], temperature=[sampling.temperature] * len(trials),
        top_p=[sampling.top_p] * len(trials),
        advantage=advantages, reward=rewards,
        version=[version] * len(trials),
        group=[t.task_id for t in tasks for _ in range(group_size)],
        seq_len=seq_len, pad_id=tokenizer.pad_token_id, masks=[t.mask for t in trials],
    )  # fmt: skip
