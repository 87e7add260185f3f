"""Trials as GRPO training rows: groups sampled from a policy, scored, normalised within their
group, packed into token rows with the behaviour log-probs at the completion positions.

The platform's path is rollout workers → ``rollouts.results`` → the joiner's ``grpo@1`` Rewards
→ the lake. This module does the same steps in one process (the same sampling, sandbox and
advantage formula), for studies of the objective (``bench/agent_learning.py``) and tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from environments.base import Environment, Task, score_all
from learner.token_windows import TokenRows, pack_sequences
from policies.agent_sampling import SamplingParams, sample
from processors.rewards.rollouts import normalised_advantages


@dataclass(frozen=True)
class TrialRows:
    """Token rows of trials plus what GRPO needs: ``behaviour`` (n, L) float32 (μ of the token
    at each target position, 0 elsewhere), ``advantage`` (n,), ``reward`` (n,), ``group`` (n,)."""

    tokens: TokenRows
    behaviour: np.ndarray
    advantage: np.ndarray
    reward: np.ndarray
    group: np.ndarray

    def batch(self, keep: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        """The rows (or those ``keep`` selects) as the tensors `learner.grpo.GRPOTask` reads."""
        rows = slice(None) if keep is None else keep
        n = len(self.advantage) if keep is None else int(np.count_nonzero(keep))
        return {
            "input_ids": torch.from_numpy(self.tokens.input_ids[rows]),
            "target": torch.from_numpy(self.tokens.target[rows]),
            "lengths": torch.from_numpy(self.tokens.lengths[rows]),
            "behaviour": torch.from_numpy(self.behaviour[rows]),
            "advantage": torch.from_numpy(self.advantage[rows]),
            "weight": torch.ones(n),
        }


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
) -> TrialRows:
    """``group_size`` trials of each task, scored in the sandbox, as training rows."""
    groups = sample(model, tokenizer, [environment.reset(t) for t in tasks], group_size,
                    sampling, seed=seed)  # fmt: skip
    trials = [(environment, task, c.text) for task, group in zip(tasks, groups, strict=True)
              for c in group]  # fmt: skip
    rewards = np.asarray([s.reward for s in score_all(trials)], dtype=np.float32)
    advantages = np.concatenate([
        normalised_advantages(rewards[i * group_size : (i + 1) * group_size].tolist())
        for i in range(len(tasks))
    ]).astype(np.float32)  # fmt: skip
    completions = [c for group in groups for c in group]
    tokens = pack_sequences(
        [c.prompt_ids for c in completions], [c.token_ids for c in completions], seq_len,
        tokenizer.pad_token_id,
    )  # fmt: skip
    behaviour = np.zeros(tokens.input_ids.shape, dtype=np.float32)
    for row, completion in enumerate(completions):
        positions = np.flatnonzero(tokens.target[row])
        behaviour[row, positions] = completion.logprobs
    names = np.repeat(np.arange(len(tasks)), group_size)  # a group per task of this batch
    return TrialRows(tokens, behaviour, advantages, rewards, names)
