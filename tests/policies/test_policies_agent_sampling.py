"""Sampling: log-probs aligned with tokens, greedy is deterministic, groups come per prompt."""

from __future__ import annotations

import pytest
import torch

from policies.agent_lm import AgentModelConfig, build_model, train_tokenizer
from policies.agent_sampling import SamplingParams, sample, sample_ids
from policies.errors import PolicyError

CORPUS = [f"f({i}) == {i + 1}\n" for i in range(100)]


@pytest.fixture(scope="module")
def lm():  # type: ignore[no-untyped-def]
    tokenizer = train_tokenizer(CORPUS, 280)
    torch.manual_seed(1)
    config = AgentModelConfig(hidden_size=32, layers=2, heads=2, kv_heads=1,
                              intermediate_size=64, vocab_size=280)  # fmt: skip
    return build_model(config, tokenizer).eval(), tokenizer


def test_logprobs_are_those_of_the_sampled_tokens(lm) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = lm
    prompts = ["f(1) == ", "f(22) == 2"]  # different lengths: left padding
    groups = sample(model, tokenizer, prompts, 4, SamplingParams(temperature=0.7,
                    max_new_tokens=6), seed=3)  # fmt: skip
    assert [len(g) for g in groups] == [4, 4]
    for prompt, group in zip(prompts, groups, strict=True):
        for completion in group:
            assert tokenizer.decode(completion.prompt_ids) == prompt
            assert len(completion.logprobs) == len(completion.token_ids) > 0
            # Recompute under the sampling distribution (logits / temperature).
            ids = torch.tensor([[*completion.prompt_ids, *completion.token_ids]])
            with torch.no_grad():
                logits = model(ids).logits[0, len(completion.prompt_ids) - 1 : -1] / 0.7
            expected = (
                torch.log_softmax(logits, -1)
                .gather(-1, torch.tensor(completion.token_ids).unsqueeze(-1))
                .squeeze(-1)
            )
            assert torch.allclose(expected, torch.tensor(completion.logprobs), atol=1e-4)


def test_greedy_is_deterministic_and_stops_at_eos(lm) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = lm
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    first = sample(model, tokenizer, ["f(5) == "], 2, greedy)[0]
    assert first[0].token_ids == first[1].token_ids
    for c in first:
        eos = tokenizer.eos_token_id
        assert eos not in c.token_ids[:-1]
        assert c.finished == (c.token_ids[-1] == eos)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(PolicyError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(PolicyError, match="n >= 1"):
        SamplingParams(n=0)


def test_serving_fields_follow_the_three_positional_ones() -> None:
    params = SamplingParams(0.0, 0.9, 24)
    assert (params.temperature, params.top_p, params.max_new_tokens) == (0.0, 0.9, 24)
    assert (params.stop, params.n, params.greedy) == ((), 1, True)
    assert not SamplingParams(temperature=0.7, stop=("\n",), n=2).greedy


def test_sample_ids_continues_token_contexts_like_sample(lm) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = lm
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    prompts = ["f(1) == ", "f(22) == 2"]
    contexts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    batched = sample_ids(model, tokenizer, contexts, greedy)
    assert [c.prompt_ids for c in batched] == [tuple(c) for c in contexts]
    assert [c.token_ids for c in batched] == [g[0].token_ids for g in sample(
        model, tokenizer, prompts, 1, greedy)]  # fmt: skip
    alone = [sample_ids(model, tokenizer, [c], greedy)[0] for c in contexts]  # no padding
    assert [c.token_ids for c in alone] == [c.token_ids for c in batched]
    for a, b in zip(alone, batched, strict=True):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    with pytest.raises(PolicyError, match="at least one token"):
        sample_ids(model, tokenizer, [[]], greedy)
    assert sample_ids(model, tokenizer, [], greedy) == []
