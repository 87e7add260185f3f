"""The plain loop of bench.rollouts --env repository plays the episodes the worker's runner plays
(same tasks, sampling and seeds): the benchmark compares the same work; the clock counts
overlapping tool calls once."""

from __future__ import annotations

import threading
import time

from bench.rollouts_episodes import Clock, plain_episodes
from environments.episode_runner import run_episodes
from environments.episodes import EpisodeLimits
from policies.agent_sampling import SamplingParams
from tests.environments.counter_world import CounterWorld, tiny_chat_lm


def test_the_plain_loop_plays_the_runners_episodes() -> None:
    model, tokenizer = tiny_chat_lm()
    world = CounterWorld()
    tasks = [t for t in world.tasks("train", 3) for _ in range(2)]
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    limits = EpisodeLimits(max_turns=4, max_tokens=120)  # some episodes end at the token limit
    traces = run_episodes(model, tokenizer, world, tasks, params, limits=limits, seed=7)
    played = plain_episodes(model, tokenizer, world, tasks, params, limits, seed=7, workers=2)
    assert played.episodes == len(tasks)
    assert played.ids == tuple(t.prompt_ids + t.completion_ids for t in traces)
    assert played.turns == sum(t.turns for t in traces) > len(tasks)
    assert played.generated == sum(t.generated_tokens for t in traces)
    assert "max_tokens" in {t.ended for t in traces}
    assert all(e.closed for e in world.opened)  # both sides closed every episode
    other = plain_episodes(model, tokenizer, world, tasks, params, limits, seed=8, workers=2)
    assert other.ids != played.ids  # the seed decides the episodes


def test_the_clock_counts_overlapping_sections_once() -> None:
    clock = Clock()

    def nap() -> None:
        with clock.timed():
            time.sleep(0.2)

    threads = [threading.Thread(target=nap) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 0.19 < clock.seconds() < 0.35
    clock.reset()
    assert clock.seconds() == 0.0
