"""The in-process GRPO iteration that bench.agent_learning and bench.agent_reference share: on
the repository environment it returns rows whose tool observations are masked out; it trains on
the groups with signal only, the advantages flipped or cut to the positive ones when asked."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from bench import agent_learning
from bench.agent_learning import GRPOSettings, grpo_iteration
from bench.rollouts_episodes import random_chat_model
from environments.base import Task
from environments.episodes import EpisodeLimits
from environments.repository.environment import RepositoryEnvironment
from learner.recipes.agent_rl.grpo import GRPOConfig, GRPOTask
from learner.recipes.agent_rl.windows import agent_rows
from policies.agent_lm import AgentModelConfig
from policies.agent_sampling import SamplingParams
from tests.environments.counter_world import tiny_chat_lm

TINY = AgentModelConfig(hidden_size=32, layers=2, heads=2, kv_heads=1, intermediate_size=64,
                        vocab_size=1024, max_positions=1024)  # fmt: skip


def _weights(model: Any) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_an_iteration_on_repositories_returns_masked_episode_rows() -> None:
    environment = RepositoryEnvironment(eval_size=3, extra_size=3)
    model, tokenizer = random_chat_model(environment, TINY)
    tasks = environment.tasks("train", 2, seed=5)
    settings = GRPOSettings(group=2, sampling=SamplingParams(1.0, 1.0, 8), seq_len=512,
                            limits=EpisodeLimits(max_turns=2, max_tokens=512))  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = _weights(model)
    done = grpo_iteration(model, tokenizer, environment, tasks, settings,
                          GRPOTask(GRPOConfig()), optimizer, seed=3)  # fmt: skip
    rows = done.rows
    assert len(rows) == 4 and len(set(rows.group.tolist())) == 2  # one group per task
    for target, length in zip(rows.tokens.target, rows.tokens.lengths, strict=True):
        trained = np.flatnonzero(target)
        # Two turns of at most 8 tokens (one closed with a masked end of sequence), and the
        # tool's observation between them is no target: the trained positions have a gap.
        assert 2 <= len(trained) <= 16 and trained[-1] < length
        assert np.any(np.diff(trained) > 1)
    # A random model never fixes the bug: each group's trials score alike, nothing to learn.
    assert done.trained == 0 and done.flat == 4
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def _crafted(tokenizer: Any, rewards: list[float]) -> Any:
    """Two groups of two trials with these rewards (as collect_trials would return them)."""
    eos = tokenizer.eos_token_id
    n = len(rewards)
    advantage = np.concatenate([
        np.asarray(rewards[i : i + 2]) - np.mean(rewards[i : i + 2]) for i in range(0, n, 2)
    ]).astype(np.float32)  # fmt: skip
    return agent_rows(
        [[5, 6, 7]] * n, [[8 + i, 9, eos] for i in range(n)], [[-1.0, -1.0, -1.0]] * n,
        temperature=[1.0] * n, advantage=advantage, reward=rewards, version=[0] * n,
        group=[f"g{i // 2}" for i in range(n)], seq_len=16, pad_id=tokenizer.pad_token_id,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("positive_only", "flip", "trained"), [(False, False, 2), (True, False, 1), (False, True, 2)]
)
def test_an_iteration_trains_on_the_groups_with_signal(
    monkeypatch: pytest.MonkeyPatch, positive_only: bool, flip: bool, trained: int
) -> None:
    model, tokenizer = tiny_chat_lm()
    rewards = [1.0, 0.0, 0.5, 0.5]  # the second group is flat
    seen: dict[str, Any] = {}

    def collect(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs, group=args[4])
        return _crafted(tokenizer, rewards)

    monkeypatch.setattr(agent_learning, "collect_trials", collect)
    settings = GRPOSettings(group=2, sampling=SamplingParams(1.0, 1.0, 4), seq_len=16,
                            positive_only=positive_only, flip=flip, epochs=2)  # fmt: skip
    before = _weights(model)
    tasks = [Task("a", "counter", 1, "{}"), Task("b", "counter", 1, "{}")]
    done = grpo_iteration(model, tokenizer, None, tasks, settings, GRPOTask(GRPOConfig()),
                          torch.optim.SGD(model.parameters(), lr=0.1), seed=11)  # fmt: skip
    assert seen["group"] == 2 and seen["seed"] == 11 and seen["seq_len"] == 16
    assert (done.trained, done.flat) == (trained, 2)
    assert np.sign(done.advantage[0]) == (-1 if flip else 1)
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
