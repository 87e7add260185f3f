"""The GRPO objective on hand-computed cases, the sign of its update, the trial filter, the
exact behaviour ratio (temperature and top-p), greedy rows, the reference's device, staleness."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
import torch
from transformers import TopPLogitsWarper

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from learner.engine.causal_lm import next_token_logprobs
from learner.errors import LearnerError
from learner.recipes.agent_rl.grpo import GRPOConfig, GRPOTask, TrialFilter, token_losses
from learner.recipes.agent_rl.recipe import fresh_versions
from learner.recipes.agent_rl.trials import collect_trials
from learner.recipes.agent_rl.windows import AgentRows, agent_rows
from policies.agent_lm import AgentModelConfig, build_model, train_tokenizer
from policies.agent_sampling import SamplingParams, nucleus_filter

ENV = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)

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
    env = ENV
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
    # Rows of versions not fresh weigh nothing: only version-1 rows count.
    batch = trials.batch()
    batch["version"] = torch.tensor([0] * 4 + [1] * 8, dtype=torch.int32)
    _, fresh = GRPOTask(GRPOConfig(), fresh_versions={1}).loss(model, batch)
    assert int(fresh) == int(tokens_per_row[4:].sum())
    # A window's padding rows are all zeros (temperature 0 too): they add nothing, not NaN.
    padded = {k: torch.cat([v, torch.zeros_like(v[:2])]) for k, v in trials.batch().items()}
    total_padded, count_padded = GRPOTask(GRPOConfig()).loss(model, padded)
    assert torch.isfinite(total_padded) and int(count_padded) == int(count)
    assert float(total_padded.detach()) == pytest.approx(float(total.detach()), abs=1e-4)
    # Per-sequence normalisation: each trial's mean over its tokens, one unit per trial, so on
    # policy each row adds -A whatever its length (padding rows still add nothing).
    padded["advantage"] = torch.arange(14, dtype=torch.float32)
    total_seq, rows = GRPOTask(GRPOConfig(normalisation="sequence")).loss(model, padded)
    assert int(rows) == 12
    assert float(total_seq.detach()) == pytest.approx(-sum(range(12)), abs=1e-3)
    with pytest.raises(LearnerError, match="normalisation"):
        GRPOConfig(normalisation="row")  # type: ignore[arg-type]


def _tiny_lm() -> tuple[Any, Any]:
    tokenizer = train_tokenizer([ENV.reset(t) for t in ENV.tasks("train", 100)], 300)
    torch.manual_seed(0)
    shape = AgentModelConfig(hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=32,
                             vocab_size=300)  # fmt: skip
    model = build_model(shape, tokenizer)
    return model.eval(), tokenizer  # type: ignore[no-untyped-call]  # untyped in transformers


def _trials(model: Any, tokenizer: Any, sampling: SamplingParams, tasks: int) -> AgentRows:
    """4 trials of each of ``tasks`` training tasks, sampled with ``sampling``."""
    return collect_trials(model, tokenizer, ENV, ENV.tasks("train", tasks, seed=2), 4, sampling,
                          seq_len=128, seed=1)  # fmt: skip


def test_the_nucleus_filter_is_the_samplers() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 50) * 3
    top_p = torch.tensor([0.1, 0.5, 0.9, 0.95, 0.999, 1.0], dtype=torch.float64)
    filtered = nucleus_filter(logits, top_p.unsqueeze(-1))
    for row, p in enumerate(top_p.tolist()):
        scores = logits[row : row + 1]
        warped = scores if p == 1.0 else TopPLogitsWarper(p)(torch.zeros(1, 1).long(), scores)
        assert torch.equal(filtered[row : row + 1], warped)
    # The token drawn is always kept, even where the filter would drop it.
    least = logits[0].argmin()
    kept = nucleus_filter(logits[:1], top_p[:1].unsqueeze(-1), keep=least.reshape(1))
    assert torch.isfinite(kept[0, least]) and torch.isinf(filtered[0, least])


def test_the_on_policy_ratio_is_one_at_the_rows_temperature_and_top_p() -> None:
    model, tokenizer = _tiny_lm()
    trials = _trials(model, tokenizer, SamplingParams(temperature=0.8, top_p=0.7,
                                                      max_new_tokens=8), tasks=3)  # fmt: skip
    batch = trials.batch()
    target, behaviour = batch["target"][:, 1:].bool(), batch["behaviour"][:, 1:]
    with torch.no_grad():
        args = (model, batch["input_ids"].long(), batch["lengths"], batch["temperature"])
        exact = next_token_logprobs(*args, top_p=batch["top_p"])
        without_top_p = next_token_logprobs(*args)
    assert torch.allclose(exact[target], behaviour[target], atol=1e-4)
    assert not torch.allclose(without_top_p[target], behaviour[target], atol=1e-2)
    # Through the objective: every ratio is 1, so with advantage 1 each token's loss is -1.
    batch["advantage"] = torch.ones(len(trials))
    total, count = GRPOTask(GRPOConfig()).loss(model, batch)
    assert int(count) == int(trials.tokens.target[:, 1:].sum())
    assert float(total.detach()) == pytest.approx(-int(count), abs=1e-3)


def test_greedy_rows_are_not_trained_as_samples() -> None:
    model, tokenizer = _tiny_lm()
    trials = _trials(model, tokenizer, SamplingParams(max_new_tokens=4), tasks=1)
    batch = trials.batch()
    batch["temperature"] = torch.tensor([0.0, 1.0, 0.0, 1.0])  # rows 0 and 2 served greedily
    _, count = GRPOTask(GRPOConfig()).loss(model, batch)
    tokens_per_row = trials.tokens.target[:, 1:].sum(axis=1)
    assert int(count) == int(tokens_per_row[1] + tokens_per_row[3])


class _Recorded(torch.nn.Module):
    """A reference policy that records where it is moved."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.moves: list[Any] = []

    def to(self, *args: Any, **kwargs: Any) -> Any:
        self.moves.append(args[0] if args else kwargs.get("device"))
        return super().to(*args, **kwargs)

    def forward(self, **kwargs: Any) -> Any:
        return self.inner(**kwargs)


def test_the_kl_reference_follows_the_trained_model_to_its_device() -> None:
    model, tokenizer = _tiny_lm()
    trials = _trials(model, tokenizer, SamplingParams(max_new_tokens=4), tasks=1)
    reference = _Recorded(copy.deepcopy(model))
    task = GRPOTask(GRPOConfig(kl_coef=0.1), reference)
    task.loss(model, trials.batch())
    task.loss(model, trials.batch())
    device = next(model.parameters()).device
    assert reference.moves == [device]  # moved once, to the model's device
    assert task.reference is not None and next(task.reference.parameters()).device == device


def test_trials_of_a_rolled_back_canary_weigh_nothing() -> None:
    fresh = fresh_versions([1, 2], production=2, max_staleness=2)  # v3's canary rolled back
    assert fresh == {1, 2}
    model, _ = _tiny_lm()
    rows = 3
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 8]] * rows), "lengths": torch.full((rows,), 4),
        "target": torch.tensor([[0, 0, 1, 1]] * rows), "behaviour": torch.zeros(rows, 4),
        "temperature": torch.ones(rows), "advantage": torch.ones(rows),
        "weight": torch.ones(rows), "version": torch.tensor([2, 3, 1], dtype=torch.int32),
    }  # fmt: skip
    _, count = GRPOTask(GRPOConfig(), fresh_versions=fresh).loss(model, batch)
    assert int(count) == 4  # the rows of v2 and v1, two tokens each; v3's weigh 0


def test_an_episodes_observation_tokens_are_no_targets_and_its_turns_are_on_policy() -> None:
    """A multi-turn row (turn, tool observation, turn) and a single-shot row: the loss counts
    the generated tokens only, and their behaviour log-probs line up with the policy's (ratio 1)
    although the observation tokens between them carry 0.0, also when the prompt is cut."""
    model, tokenizer = _tiny_lm()
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7]]
    completions = [[10, 11, 2, 40, 41, 42, 12, 2], [13, 2]]
    masks: list[list[int] | None] = [[1, 1, 1, 0, 0, 0, 1, 1], None]
    seq_len = 12  # the episode's row needs 13: its prompt loses a token
    # What the rollout worker records: the sampler's log-prob per generated token, 0.0 elsewhere.
    probe = agent_rows(prompts, completions, [[0.0] * len(c) for c in completions],
                       temperature=[1.0, 1.0], advantage=[1.0, 1.0], reward=[1.0, 0.0],
                       version=[0, 0], group=["g", "g"], seq_len=seq_len,
                       pad_id=tokenizer.pad_token_id, masks=masks)  # fmt: skip
    with torch.no_grad():
        policy = next_token_logprobs(model, torch.from_numpy(probe.tokens.input_ids).long(),
                                     torch.from_numpy(probe.tokens.lengths))  # fmt: skip
    recorded = []
    for row, (completion, mask) in enumerate(zip(completions, masks, strict=True)):
        end = int(probe.tokens.lengths[row])
        values = policy[row, end - len(completion) - 1 : end - 1].tolist()
        recorded.append([v if (mask is None or m) else 0.0
                         for v, m in zip(values, mask or values, strict=True)])  # fmt: skip
    rows = agent_rows(prompts, completions, recorded, temperature=[1.0, 1.0],
                      advantage=[1.0, 1.0], reward=[1.0, 0.0], version=[0, 0], group=["g", "g"],
                      seq_len=seq_len, pad_id=tokenizer.pad_token_id, masks=masks)  # fmt: skip
    assert rows.tokens.input_ids[0].tolist() == [6, 7, 8, 9, *completions[0]]
    assert rows.tokens.target[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1]
    assert rows.tokens.target[1, :5].tolist() == [0, 0, 0, 1, 1]
    assert (rows.behaviour[0, 7:10] == 0).all() and (rows.behaviour[0, 4:7] < 0).all()
    total, count = GRPOTask(GRPOConfig()).loss(model, rows.batch())
    assert int(count) == 5 + 2  # the generated tokens, never the 3 observation tokens
    # On-policy at every target: each token's loss is -A = -1. An observation position in the
    # loss would have rho = exp(π - 0) far from 1 and move the total.
    assert float(total.detach()) == pytest.approx(-7.0, abs=1e-4)
