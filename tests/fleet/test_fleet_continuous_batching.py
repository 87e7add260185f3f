"""Continuous batching in the agent engine: requests join a running batch and leave it at their
own end, each row decoding exactly what it would alone, with the log-prob of the distribution
its token was drawn from; a failure fails only the requests it touched."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fleet.agent_engine import Engine, Job, Overloaded
from fleet.errors import ServingError
from fleet.prefix_cache import PrefixCache
from fleet.running_batch import RunningBatch
from policies.agent_sampling import Completion, SamplingParams, nucleus_filter, sample_ids
from tests.fleet.agent_lm_fixture import LONG_PREFIX, ids, tiny_lm


@pytest.fixture(scope="module", params=["llama", "qwen3_moe"])
def lm(request: pytest.FixtureRequest) -> tuple[Any, Any]:
    return tiny_lm(request.param)


def greedy(tokens: int, **kwargs: Any) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_new_tokens=tokens, **kwargs)


def solo(lm: tuple[Any, Any], prompt: list[int], tokens: int) -> Completion:
    """Plain greedy decoding of ``prompt`` alone (``generate``)."""
    return sample_ids(*lm, [prompt], greedy(tokens))[0]


def assert_decodes_as_alone(job: Job, want: Completion, tokens: int | None = None) -> None:
    got = job.choices[0]
    end = len(got.token_ids) if tokens is None else tokens
    assert tuple(got.token_ids) == want.token_ids[:end]
    assert torch.allclose(
        torch.tensor(got.logprobs), torch.tensor(want.logprobs[:end]), atol=1e-4
    ), "greedy log-probs are generate's plain softmax"


def test_a_request_joining_mid_batch_decodes_what_it_would_alone(lm: Any) -> None:
    model, tokenizer = lm
    first, second = ids(tokenizer, "def f3(x):\n"), ids(tokenizer, LONG_PREFIX + "def f9(x):\n")
    engine = Engine(prefix_cache=PrefixCache(min_tokens=16))
    engine.start()
    late = Job(model, tokenizer, second, greedy(16))
    submitted = threading.Event()

    def submit_late(_index: int, _text: str) -> None:  # once the first request decodes
        if not submitted.is_set():
            submitted.set()
            engine.submit(late)

    early = Job(model, tokenizer, first, greedy(40, stop=("\x00",)), on_text=submit_late)
    early_done: list[float] = []
    early.future.add_done_callback(lambda _: early_done.append(time.monotonic()))
    try:
        engine.submit(early)
        late.future.result(timeout=60)
        early.future.result(timeout=60)
    finally:
        engine.close()
    assert submitted.is_set()
    assert late.first_token_at is not None
    assert late.first_token_at < early_done[0], "the late request joined the running batch"
    assert engine.stats.sequences > engine.stats.batches, "steps decoded both rows together"
    assert_decodes_as_alone(early, solo(lm, first, 40))
    assert_decodes_as_alone(late, solo(lm, second, 16))


def test_rows_of_different_lengths_leave_at_their_own_end_and_the_rest_decode_on(lm: Any) -> None:
    model, tokenizer = lm
    prompts = [ids(tokenizer, p) for p in ("def f3(x):\n", LONG_PREFIX, "def f12(x):\n    return")]
    alone = [solo(lm, p, 24) for p in prompts]
    stop = tokenizer.decode(alone[2].token_ids[3:5])  # the third row's text reaches it early
    jobs = [
        Job(model, tokenizer, prompts[0], greedy(24)),
        Job(model, tokenizer, prompts[1], greedy(3)),  # leaves after 3 tokens
        Job(model, tokenizer, prompts[2], greedy(24, stop=(stop,))),
        Job(model, tokenizer, prompts[0], greedy(24, n=2)),  # two rows of one prefill
    ]
    Engine(max_batch_rows=8).run(jobs)
    assert_decodes_as_alone(jobs[0], alone[0])
    assert jobs[1].choices[0].finish_reason == "length"
    assert_decodes_as_alone(jobs[1], alone[1], tokens=3)
    assert jobs[2].choices[0].finish_reason == "stop"
    assert stop not in jobs[2].choices[0].text
    assert len(jobs[2].choices[0].token_ids) < 24
    for choice in jobs[3].choices:
        assert tuple(choice.token_ids) == alone[0].token_ids


def test_sampled_log_probs_are_those_of_each_rows_own_distribution(lm: Any) -> None:
    model, tokenizer = lm
    prompt = ids(tokenizer, "def f5(x):\n")
    settings = [(0.7, 0.9), (1.3, 1.0), (0.0, 1.0)]  # one batch, three distributions
    jobs = [Job(model, tokenizer, prompt, SamplingParams(t, p, 12)) for t, p in settings]
    torch.manual_seed(0)
    Engine().run(jobs)
    for job, (temperature, top_p) in zip(jobs, settings, strict=True):
        tokens = job.choices[0].token_ids
        with torch.inference_mode():
            logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
        drawn = torch.tensor(tokens)
        if temperature:
            logits = nucleus_filter(logits / temperature, torch.tensor([[top_p]]), keep=drawn)
        want = torch.log_softmax(logits, -1).gather(-1, drawn.unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(torch.tensor(job.choices[0].logprobs), want, atol=1e-4)


def test_a_sessions_next_turn_prefills_only_what_follows_the_last_completion(lm: Any) -> None:
    model, tokenizer = lm
    engine = Engine(prefix_cache=PrefixCache(min_tokens=16))
    turn = ids(tokenizer, LONG_PREFIX)
    first = Job(model, tokenizer, turn, greedy(8))
    engine.run([first])
    following = [*turn, *first.choices[0].token_ids, *ids(tokenizer, "# observed: ok\n")]
    second = Job(model, tokenizer, following, greedy(8))
    engine.run([second])
    assert second.cached_tokens >= len(turn) + 7  # the prompt and the completion's KV
    assert_decodes_as_alone(second, solo(lm, following, 8))


def test_a_request_for_another_model_waits_for_the_batch_to_drain() -> None:
    one, other = tiny_lm("llama"), tiny_lm("qwen3_moe")
    prompt = ids(one[1], "def f3(x):\n")
    jobs = [Job(*one, prompt, greedy(10)), Job(*other, prompt, greedy(10))]
    Engine().run(jobs)
    assert_decodes_as_alone(jobs[0], solo(one, prompt, 10))
    assert_decodes_as_alone(jobs[1], solo(other, prompt, 10))


def test_a_failed_prefill_or_step_fails_its_requests_and_the_engine_serves_on(
    lm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = lm
    prompt = ids(tokenizer, "def f3(x):\n")
    broken = Job(model, tokenizer, [10**6], greedy(4))  # no such token: the prefill raises
    fine = Job(model, tokenizer, prompt, greedy(4))
    engine = Engine()
    engine.run([broken, fine])
    with pytest.raises(ServingError, match="generation failed"):
        broken.future.result()
    assert len(fine.future.result()[0].token_ids) == 4

    def fail_step(_self: RunningBatch) -> None:
        raise RuntimeError("device lost")

    engine.start()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(RunningBatch, "step", fail_step)
            doomed = Job(model, tokenizer, prompt, greedy(4))
            engine.submit(doomed)
            with pytest.raises(ServingError, match="device lost"):
                doomed.future.result(timeout=30)
        after = Job(model, tokenizer, prompt, greedy(4))
        engine.submit(after)
        assert len(after.future.result(timeout=30)[0].token_ids) == 4
    finally:
        engine.close()


def test_a_full_queue_refuses_while_the_batch_is_full(lm: Any) -> None:
    model, tokenizer = lm
    prompt = ids(tokenizer, "def f3(x):\n")
    engine = Engine(max_batch_rows=1, max_queue=1)
    running = Job(model, tokenizer, prompt, greedy(1000, stop=("\x00",)))  # until cancelled
    engine.run([Job(model, tokenizer, prompt, greedy(1))])  # warm
    engine.start()
    try:
        engine.submit(running)
        deadline = time.monotonic() + 30
        while running.first_token_at is None and time.monotonic() < deadline:
            time.sleep(0.01)
        accepted = submit_until_refused(engine, lambda: Job(model, tokenizer, prompt, greedy(2)))
        assert len(accepted) <= 2  # one waits for a row (taken from the queue), one is queued
        running.cancel()
        assert running.future.result(timeout=30)[0].finish_reason == "cancelled"
        for job in accepted:
            assert len(job.future.result(timeout=30)[0].token_ids) == 2
    finally:
        engine.close()


def submit_until_refused(engine: Engine, make: Callable[[], Job]) -> list[Job]:
    """Jobs ``engine`` accepted before it answered Overloaded (a pause after each lets the
    engine take it from the queue if it will)."""
    accepted: list[Job] = []
    for _ in range(10):
        job = make()
        try:
            engine.submit(job)
        except Overloaded:
            return accepted
        accepted.append(job)
        time.sleep(0.05)
    raise AssertionError(f"{len(accepted)} jobs accepted, none refused")
