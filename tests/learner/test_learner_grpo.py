"""The GRPO objective on hand-computed cases, the sign of its update, and the trial filter."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner.errors import LearnerError
from learner.grpo import GRPOConfig, TrialFilter, token_losses

CONFIG = GRPOConfig(clip_low=0.2, clip_high=0.28, tis_cap=2.0)


def _loss(ratio: float, advantage: float, config: GRPOConfig = CONFIG) -> float:
    lp = torch.tensor([[math.log(ratio)]])
    return float(token_losses(lp, torch.zeros(1, 1), torch.tensor([advantage]), config))


@pytest.mark.parametrize(
    ("ratio", "advantage", "expected"),
    [
        (1.0, 1.0, -1.0),  # on-policy: -A
        (1.1, 1.0, -1.1),  # inside the clip range: ratio * A
        (1.5, 1.0, -1.28),  # above 1 + clip_high: clipped, no more credit
        (0.5, 1.0, -0.5),  # below: min keeps the smaller (unclipped) term
        (0.5, -1.0, 0.8),  # A < 0, ratio below 1 - clip_low: clipped at 0.8
        (1.5, -1.0, 1.5),  # A < 0 above the range: ratio * A (pessimistic)
        (5.0, -1.0, 2.0),  # A < 0, ratio beyond the TIS cap: truncated at C
    ],
)
def test_ratio_clip_and_truncation_by_hand(ratio: float, advantage: float, expected: float) -> None:
    assert _loss(ratio, advantage) == pytest.approx(expected)


def test_kl_to_the_reference_is_k3_and_zero_when_equal() -> None:
    config = GRPOConfig(kl_coef=0.5)
    lp, ref = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    delta = math.log(0.25) - math.log(0.5)
    expected = -1.0 * math.exp(math.log(0.5)) + 0.5 * (math.exp(delta) - delta - 1)
    got = token_losses(lp, torch.zeros(1, 1), torch.tensor([1.0]), config, ref)
    assert float(got) == pytest.approx(expected)
    same = token_losses(lp, lp, torch.tensor([1.0]), config, lp)
    assert float(same) == pytest.approx(-1.0)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_the_update_follows_the_sign_of_the_advantage(advantage: float) -> None:
    logits = torch.zeros(3, requires_grad=True)  # a 3-token policy
    behaviour = torch.log_softmax(logits.detach(), 0)[0].reshape(1, 1)
    for _ in range(5):
        lp = torch.log_softmax(logits, 0)[0].reshape(1, 1)
        token_losses(lp, behaviour, torch.tensor([advantage]), CONFIG).sum().backward()
        with torch.no_grad():
            logits -= 0.5 * logits.grad  # type: ignore[operator]
            logits.grad = None
    p = float(torch.softmax(logits.detach(), 0)[0])
    assert (p > 1 / 3) if advantage > 0 else (p < 1 / 3)


def test_the_filter_drops_stale_trials_and_flat_groups() -> None:
    versions = np.array([5, 5, 5, 5, 2, 2])
    groups = np.array(["a", "a", "b", "b", "c", "c"])
    advantages = np.array([1.0, -1.0, 0.0, 0.0, 1.0, -1.0])
    keep, dropped = TrialFilter(max_staleness=2).keep(versions, groups, advantages, production=5)
    assert keep.tolist() == [True, True, False, False, False, False]
    assert dropped == {"stale": 2, "flat_group": 2}


def test_bad_settings_are_refused() -> None:
    with pytest.raises(LearnerError, match="tis_cap"):
        GRPOConfig(tis_cap=1.0)


def test_collected_trials_carry_behaviour_logprobs_at_their_tokens() -> None:
    from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
    from learner.agent_rl import collect_trials
    from learner.grpo import GRPOTask
    from policies.agent_lm import AgentModelConfig, build_model, train_tokenizer
    from policies.agent_sampling import SamplingParams

    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    tasks = env.tasks("train", 3, seed=2)
    tokenizer = train_tokenizer([env.reset(t) for t in env.tasks("train", 100)], 300)
    torch.manual_seed(0)
    shape = AgentModelConfig(hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=32,
                             vocab_size=300)  # fmt: skip
    model = build_model(shape, tokenizer).eval()
    trials = collect_trials(model, tokenizer, env, tasks, 4, SamplingParams(max_new_tokens=6),
                            seq_len=128, seed=1)  # fmt: skip
    assert trials.tokens.input_ids.shape == (12, 128)
    assert len(set(trials.group[:4])) == 1 and trials.group[4] != trials.group[0]
    for row in range(12):
        positions = np.flatnonzero(trials.tokens.target[row])
        assert (trials.behaviour[row][positions] < 0).all()  # log-probs, at the completion only
        assert (np.delete(trials.behaviour[row], positions) == 0).all()
    for g in set(trials.group):
        assert abs(float(trials.advantage[trials.group == g].sum())) < 1e-4
    # On-policy (no step yet), the ratio is 1: the loss is -mean(advantage) over tokens.
    total, count = GRPOTask(GRPOConfig()).loss(model, trials.batch())
    tokens_per_row = trials.tokens.target[:, 1:].sum(axis=1)
    expected = -(trials.advantage * tokens_per_row).sum()
    assert float(total.detach()) == pytest.approx(float(expected), abs=1e-2)
    assert int(count) == int(tokens_per_row.sum())
    # Rows older than the staleness bound weigh nothing: only version-1 rows count.
    batch = trials.batch()
    batch["version"] = torch.tensor([0] * 4 + [1] * 8, dtype=torch.int32)
    _, fresh = GRPOTask(GRPOConfig(), oldest_version=1).loss(model, batch)
    assert int(fresh) == int(tokens_per_row[4:].sum())
    # A window's padding rows are all zeros (temperature 0 too): they add nothing, not NaN.
    padded = {k: torch.cat([v, torch.zeros_like(v[:2])]) for k, v in trials.batch().items()}
    total_padded, count_padded = GRPOTask(GRPOConfig()).loss(model, padded)
    assert torch.isfinite(total_padded) and int(count_padded) == int(count)
    assert float(total_padded.detach()) == pytest.approx(float(total.detach()), abs=1e-4)
