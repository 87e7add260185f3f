"""The agent engine: batched, speculative and prefix-cached generation give plain greedy
decoding's tokens; stop strings, max_tokens, streaming text and cancellation per row."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fleet.agent_engine import Engine, Job, Overloaded
from fleet.prefix_cache import PrefixCache
from policies.agent_sampling import SamplingParams, sample
from tests.fleet.agent_lm_fixture import CORPUS, LONG_PREFIX, ids, tiny_lm

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=24)
PROMPTS = ["def f3(x):\n", "def f12(x):\n    return", LONG_PREFIX + "def f7(x):\n"]


@pytest.fixture(scope="module", params=["llama", "qwen3_moe"])
def lm(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    return tiny_lm(request.param)


def run(engine: Engine, job: Job) -> list[Any]:
    engine.run([job])
    return job.future.result()


def test_every_path_decodes_exactly_what_plain_greedy_decoding_does(lm: Any) -> None:
    model, tokenizer = lm
    plain = [c[0] for c in sample(model, tokenizer, PROMPTS, 1, SamplingParams(0.0, 1.0, 24))]
    engine = Engine(prefix_cache=PrefixCache(min_tokens=16))
    batched = [Job(model, tokenizer, ids(tokenizer, p), GREEDY) for p in PROMPTS[:2]]
    engine.run(batched)  # one generate, left-padded
    speculative = [
        run(engine, Job(model, tokenizer, ids(tokenizer, p), GREEDY, speculative=True))[0]
        for p in PROMPTS
    ]
    # The long prompt: first run fills the prefix cache, a second prompt sharing it reuses it.
    other = LONG_PREFIX + "def f9(x):\n    return"
    run(engine, Job(model, tokenizer, ids(tokenizer, PROMPTS[2]), GREEDY))
    cached = Job(model, tokenizer, ids(tokenizer, other), GREEDY)
    run(engine, cached)
    reference = sample(model, tokenizer, [other], 1, SamplingParams(0.0, 1.0, 24))[0][0]

    for job, want in zip(batched, plain[:2], strict=True):
        assert tuple(job.choices[0].token_ids) == want.token_ids
    for got, want in zip(speculative, plain, strict=True):
        assert tuple(got.token_ids) == want.token_ids
        assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=1e-4)
    assert cached.cached_tokens >= len(ids(tokenizer, LONG_PREFIX)) - 1
    assert tuple(cached.choices[0].token_ids) == reference.token_ids
    assert engine.stats.speculative == 3


def test_rows_end_at_their_own_stop_string_or_max_tokens_and_stream_their_text(lm: Any) -> None:
    model, tokenizer = lm
    streamed: dict[int, list[str]] = {0: [], 1: []}
    prompt = ids(tokenizer, "def f3(x):\n")
    free = Job(model, tokenizer, prompt, SamplingParams(temperature=0.0, max_new_tokens=12))
    Engine().run([free])
    text = free.choices[0].text
    assert len(text) > 3
    stop = text[2:4]  # a stop string the greedy text contains
    short = Job(model, tokenizer, prompt, SamplingParams(temperature=0.0, max_new_tokens=5, n=1))
    stopped = Job(
        model, tokenizer, prompt, SamplingParams(temperature=0.0, max_new_tokens=12, stop=(stop,)),
        on_text=lambda i, t: streamed[i].append(t),
    )  # fmt: skip
    Engine().run([short, stopped])
    assert short.choices[0].finish_reason == "length"
    assert len(short.choices[0].token_ids) == 5
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == text[: text.index(stop)]
    assert "".join(streamed[0]) == stopped.choices[0].text  # the stop string never streamed
    assert len(stopped.choices[0].logprobs) == len(stopped.choices[0].token_ids)


def test_a_cancelled_request_stops_generating_and_says_so(lm: Any) -> None:
    model, tokenizer = lm
    two = SamplingParams(max_new_tokens=40, n=2)
    job = Job(model, tokenizer, ids(tokenizer, "def f3(x):\n"), two)
    job.on_text = lambda _i, _t: job.cancel()  # the client goes after its first text
    Engine().run([job])
    assert [c.finish_reason for c in job.choices] == ["cancelled", "cancelled"]
    assert all(len(c.token_ids) < 40 for c in job.choices)


def test_a_full_queue_refuses_with_a_retry_time(lm: Any) -> None:
    model, tokenizer = lm
    engine = Engine(max_queue=1)  # not started: nothing drains the queue
    engine.submit(Job(model, tokenizer, [1, 2], GREEDY))
    with pytest.raises(Overloaded) as refused:
        engine.submit(Job(model, tokenizer, [1, 2], GREEDY))
    assert refused.value.retry_after_s >= 1
    engine.close()


def test_the_prefix_cache_is_bounded_and_keyed_by_model(lm: Any) -> None:
    model, tokenizer = lm
    cache = PrefixCache(max_tokens=600, min_tokens=16)
    engine = Engine(prefix_cache=cache)
    for prompt in (LONG_PREFIX + "a", "".join(CORPUS[40:70]) + "b"):
        run(engine, Job(model, tokenizer, ids(tokenizer, prompt), GREEDY))
    assert cache.held_tokens <= 600
    assert cache.stats.evictions == 1
    assert cache.lookup(object(), ids(tokenizer, "".join(CORPUS[40:70]) + "c")) == (0, None)
    hit, kv = cache.lookup(model, ids(tokenizer, "".join(CORPUS[40:70]) + "c"))
    assert hit > 16
    assert kv is not None
    assert kv.get_seq_length() == hit
