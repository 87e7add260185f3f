"""The episode runner on a toy multi-turn world (a counter: ``add(n)`` then ``submit()``, reward
when the total hits the target) with a tiny random chat model: token masks, ids equal to the
chat template's text, limits, malformed turns, batching, the expert's traces."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from environments.episode_runner import EpisodeTrace, expert_trace, run_episodes
from environments.episodes import EpisodeLimits
from policies.agent_chat import ASSISTANT, ToolCall, message_text, render
from policies.agent_sampling import SamplingParams
from tests.environments.counter_world import TOOLS, CounterWorld, tiny_chat_lm

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)


@pytest.fixture(scope="module")
def lm() -> tuple[Any, Any]:
    return tiny_chat_lm()


def _runs(trace: EpisodeTrace, tokenizer: Any) -> list[tuple[int, str]]:
    """The completion as maximal runs of equal mask, decoded."""
    runs: list[tuple[int, list[int]]] = []
    for token, mask in zip(trace.completion_ids, trace.mask, strict=True):
        if runs and runs[-1][0] == mask:
            runs[-1][1].append(token)
        else:
            runs.append((mask, [token]))
    return [(mask, tokenizer.decode(ids)) for mask, ids in runs]


def test_observations_are_masked_and_the_ids_are_the_templates_text(lm) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = lm
    world = CounterWorld()
    limits = EpisodeLimits(max_turns=3, max_tokens=250)
    traces = run_episodes(model, tokenizer, world, world.tasks("eval", 3), GREEDY, limits=limits)
    eos = tokenizer.eos_token
    for trace in traces:
        text = tokenizer.decode([*trace.prompt_ids, *trace.completion_ids])
        assert text == render(trace.messages, eos, TOOLS)
        prompt = render(trace.messages[:2], eos, TOOLS, add_generation_prompt=True)
        assert trace.completion_text() == text.removeprefix(prompt)
        assert len(trace.completion_ids) == len(trace.mask) == len(trace.logprobs)
        assert all(lp == 0.0 for lp, m in zip(trace.logprobs, trace.mask, strict=True) if m == 0)
        assert all(lp < 0.0 for lp, m in zip(trace.logprobs, trace.mask, strict=True) if m == 1)
        assert 0 < trace.generated_tokens <= trace.turns * GREEDY.max_new_tokens
        tool_messages = [m for m in trace.messages if m["role"] == "tool"]
        assert len(tool_messages) == trace.turns - 1  # the ending step's observation is dropped
        masked = [t.removeprefix(eos) for m, t in _runs(trace, tokenizer) if m == 0]
        expected = [message_text(m, eos) + ASSISTANT for m in tool_messages]
        assert masked[: len(expected)] == expected  # each observation whole, never trained
        assert masked[len(expected) :] in ([], [""])  # a cut last turn's closing eos
        generated = [t for m, t in _runs(trace, tokenizer) if m == 1]
        turns = [m["content"] for m in trace.messages if m["role"] == "assistant"]
        assert [t.removesuffix(eos) for t in generated] == turns


def test_limits_end_episodes_with_a_score(lm) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = lm
    world = CounterWorld()
    tasks = world.tasks("eval", 2)
    by_turns = run_episodes(model, tokenizer, world, tasks, GREEDY,
                            limits=EpisodeLimits(max_turns=2, max_tokens=250))  # fmt: skip
    assert [(t.ended, t.turns) for t in by_turns] == [("max_turns", 2)] * 2
    assert all(t.score.tests_total == 1 for t in by_turns)
    prompt = len(by_turns[0].prompt_ids)
    budget = prompt + GREEDY.max_new_tokens + 3  # one turn fits, its observation does not
    by_tokens = run_episodes(model, tokenizer, world, tasks[:1], GREEDY,
                             limits=EpisodeLimits(max_turns=5, max_tokens=budget))  # fmt: skip
    trace = by_tokens[0]
    assert (trace.ended, trace.turns) == ("max_tokens", 1)
    assert len(trace.prompt_ids) + len(trace.completion_ids) <= budget
    none = run_episodes(model, tokenizer, world, tasks[:1], GREEDY,
                        limits=EpisodeLimits(max_tokens=prompt))  # fmt: skip
    assert (none[0].ended, none[0].turns, none[0].completion_ids) == ("max_tokens", 0, ())
    assert all(e.closed for e in world.opened)


def test_a_malformed_turn_is_an_error_observation(lm) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = lm
    world = CounterWorld()
    trace = run_episodes(model, tokenizer, world, world.tasks("eval", 1), GREEDY,
                         limits=EpisodeLimits(max_turns=2, max_tokens=250))[0]  # fmt: skip
    assert trace.outcomes[0].status == "malformed" and trace.tool_calls == 0  # a random model
    reply = next(m for m in trace.messages if m["role"] == "tool")
    assert reply["content"].startswith("error: ")


def test_batched_episodes_equal_episodes_run_alone_under_greedy(lm) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = lm
    world = CounterWorld()
    tasks = world.tasks("eval", 4)
    limits = EpisodeLimits(max_turns=3, max_tokens=250)
    batched = run_episodes(model, tokenizer, world, tasks, GREEDY, limits=limits, workers=2)
    alone = [run_episodes(model, tokenizer, world, [t], GREEDY, limits=limits)[0] for t in tasks]
    for a, b in zip(alone, batched, strict=True):
        assert (a.messages, a.completion_ids, a.mask) == (b.messages, b.completion_ids, b.mask)
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_the_expert_trace_trains_on_the_experts_calls(lm) -> None:  # type: ignore[no-untyped-def]
    _, tokenizer = lm
    world = CounterWorld()
    task = world.tasks("train", 1)[0]
    trace = expert_trace(tokenizer, world, task)
    eos = tokenizer.eos_token
    assert (trace.ended, trace.score.passed) == ("submitted", True)
    assert (trace.turns, trace.tool_calls) == (2, 2)
    calls = [ToolCall("add", {"n": 3, "why": "déjà ✓"}), ToolCall("submit")]
    generated = [t for m, t in _runs(trace, tokenizer) if m == 1]
    assert generated == [c.text() + eos for c in calls]
    assert set(trace.logprobs) == {0.0}
    assert tokenizer.decode([*trace.prompt_ids, *trace.completion_ids]) == render(
        trace.messages, eos, TOOLS
    )
    assistant = [m for m in trace.messages if m["role"] == "assistant"]
    assert [m["tool_calls"][0]["id"] for m in assistant] == ["call_0", "call_1"]
    tool = next(m for m in trace.messages if m["role"] == "tool")
    assert (tool["tool_call_id"], tool["content"]) == ("call_0", "total 3 ✓")


def test_episodes_are_closed_when_a_step_raises(lm) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = lm
    world = CounterWorld(explode=True)
    with pytest.raises(RuntimeError, match="crashed"):
        run_episodes(model, tokenizer, world, world.tasks("eval", 3), GREEDY)
    assert len(world.opened) == 3 and all(e.closed for e in world.opened)
