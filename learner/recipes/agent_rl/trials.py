"""Trials as GRPO training rows: groups sampled from a policy, scored, normalised within their
group, packed into token rows with the behaviour log-probs at the completion positions.

The platform's path is rollout workers → ``rollouts.results`` → the joiner's ``grpo@1`` Rewards
→ the lake. This module does the same steps in one process (the same sampling, sandbox and
advantage formula), for studies of the objective (``bench/agent_learning.py``) and tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from contracts.advantages import normalised_advantages
from environments.base import Environment, Score, Task, score_all
from learner.recipes.agent_rl.windows import AgentRows, agent_rows
from policies.agent_sampling import Completion, SamplingParams, sample


def sample_scored(
    model: Any,
    tokenizer: Any,
    environment: Environment,
    tasks: Sequence[Task],
    group_size: int,
    sampling: SamplingParams,
    *,
    seed: int | None = None,
) -> tuple[list[list[Completion]], list[Score]]:
    """``group_size`` completions of each task (one batched generate) and their sandbox scores,
    task by task in order."""
    groups = sample(model, tokenizer, [environment.reset(t) for t in tasks], group_size,
                    sampling, seed=seed)  # fmt: skip
    trials = [(environment, task, c.text) for task, group in zip(tasks, groups, strict=True)
              for c in group]  # fmt: skip
    return groups, score_all(trials)


def collect_trials(
    model: Any,
    tokenizer: Any,
    environment: Environment,
    tasks: Sequence[Task],
    group_size: int,
    sampling: SamplingParams,
    *,
    seq_len: int,
    seed: int | None = None,
    version: int = 0,
) -> AgentRows:
    """``group_size`` trials of each task, scored in the sandbox, as training rows (version
    ``version``, one group per task)."""
    groups, scores = sample_scored(model, tokenizer, environment, tasks, group_size, sampling,
                                   seed=seed)  # fmt: skip
    rewards = np.asarray([s.reward for s in scores], dtype=np.float32)
    advantages = np.concatenate([
        normalised_advantages(rewards[i * group_size : (i + 1) * group_size].tolist())
        for i in range(len(tasks))
    ]).astype(np.float32)  # fmt: skip
    completions = [c for group in groups for c in group]
    return agent_rows(
        [c.prompt_ids for c in completions], [c.token_ids for c in completions],
        [c.logprobs for c in completions], temperature=[sampling.temperature] * len(completions),
        top_p=[sampling.top_p] * len(completions),
        advantage=advantages, reward=rewards,
        version=[version] * len(completions),
        group=[t.task_id for t in tasks for _ in range(group_size)],
        seq_len=seq_len, pad_id=tokenizer.pad_token_id,
    )  # fmt: skip
