"""Episode throughput of the rollout worker (``bench.rollouts --env repository``): the worker's
path against a plain loop of ``generate`` + tools at the same concurrency, both in one run.

* worker: ``fleet.rollout_worker.RolloutWorker.run_batch`` on ``tasks`` requests of ``group``
  episodes each, with a subscriber stub that routes every task to the loaded model — so the
  measured path is the worker's own: ``environments.episode_runner.run_episodes`` (per-token
  log-probs, messages, segment-wise tokenization, masks) and the conversion of every episode to a
  ``RolloutResult`` and its ``ToolCallObserved`` events (no Kafka: nothing is produced).
* plain loop (:func:`plain_episodes`): the same tasks x group episodes in lock-step, written by
  hand: each turn one ``model.generate`` (no log-probs) over the running episodes' left-padded
  contexts, each turn read with ``policies.agent_chat.parse_tool_call``, the episodes' tool calls
  stepped in a thread pool of as many threads (``RepositoryEnvironment.episode(task).step``), the
  observation's tokens appended; an episode ends on submit, at its limits (turns, wall time, or a
  context that could not hold another turn: the runner's rule), always scored.

Same tasks, sampling (temperature, top_p, max_new_tokens per turn, the seed of each turn) and
limits on both sides: with the same seeds both usually play the same episodes token for token,
and the report says whether they did (every token id equal). Where turns and episode lengths
differ all the same, the rates per turn and per token still compare: it gives episodes/s,
turns/s and generated tokens/s of each side (medians of ``rounds`` alternating rounds
after a warm-up) and the ratio of each; the target is on episodes/s (>= 0.8x). The worker's
time is split into generation (inside ``generate``), tool calls (``step`` and the final
``finish``, which scores the hidden tests; overlapping calls counted once) and the rest.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from environments.base import EnvironmentRegistry, Split, Task
from environments.episodes import Ending, Episode, EpisodeLimits, Step
from environments.repository.environment import RepositoryEnvironment
from environments.repository.spec import RepoSpec
from fleet.rollout_worker import AgentPolicy, RolloutWorker, TaskRequest
from fleet.subscriber import Routed
from policies.agent_chat import ASSISTANT, TOOL, ParsedTurn, parse_tool_call, render
from policies.agent_lm import AgentModelConfig, build_model, load_checkpoint, train_tokenizer
from policies.agent_sampling import SamplingParams
from schemas.enums import Channel


class Clock:
    """Wall time spent inside timed sections that may overlap (tool calls in threads): the
    length of the union of their intervals."""

    def __init__(self) -> None:
        self._intervals: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    @contextmanager
    def timed(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self._intervals.append((started, time.perf_counter()))

    def seconds(self) -> float:
        total, end = 0.0, float("-inf")
        for start, stop in sorted(self._intervals):
            if stop > end:
                total += stop - max(start, end)
                end = stop
        return total

    def reset(self) -> None:
        with self._lock:
            self._intervals.clear()


class _TimedEpisode:
    """An episode whose tool calls (``step``, ``finish``) are timed on ``clock``."""

    def __init__(self, inner: Episode, clock: Clock) -> None:
        self.inner, self.clock, self.task = inner, clock, inner.task

    def reset(self) -> str:
        return self.inner.reset()

    def step(self, action: ParsedTurn) -> Step:
        with self.clock.timed():
            return self.inner.step(action)

    def finish(self, ended: Ending) -> Step:
        with self.clock.timed():
            return self.inner.finish(ended)

    def close(self) -> None:
        self.inner.close()


class TimedEnvironment:
    """``inner`` (a multi-turn environment) with its episodes' tool calls timed on ``clock``."""

    def __init__(self, inner: RepositoryEnvironment, clock: Clock) -> None:
        self.inner, self.clock = inner, clock
        self.name, self.tools, self.system = inner.name, inner.tools, inner.system
        self.extra_eval = inner.extra_eval

    def episode(self, task: Task, limits: EpisodeLimits | None = None) -> Episode:
        return _TimedEpisode(self.inner.episode(task, limits), self.clock)

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        return self.inner.tasks(split, n, seed)

    def held_out(self, task: Task) -> bool:
        return self.inner.held_out(task)

    def cluster(self, task: Task) -> str:
        return self.inner.cluster(task)


def time_generate(model: Any, clock: Clock) -> None:
    """Time every ``model.generate`` call on ``clock`` (both sides call it)."""
    original = model.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        with clock.timed():
            return original(*args, **kwargs)

    model.generate = generate


@dataclass(frozen=True)
class Played:
    """One side's run of a batch of episodes."""

    episodes: int
    turns: int
    generated: int  # tokens the model wrote (end of sequence included)
    passed: int
    seconds: float
    generate_s: float = 0.0
    tools_s: float = 0.0
    ids: tuple[tuple[int, ...], ...] = ()  # each episode's tokens: prompt, turns, observations

    def rate(self, count: int) -> float:
        return count / self.seconds


def plain_episodes(
    model: Any,
    tokenizer: Any,
    environment: Any,
    tasks: Sequence[Task],
    params: SamplingParams,
    limits: EpisodeLimits,
    *,
    seed: int | None,
    workers: int,
) -> Played:
    """The plain loop (module docstring): one episode per entry of ``tasks``."""
    started = time.perf_counter()
    episodes: list[Any] = [environment.episode(t, limits) for t in tasks]
    finals: list[Step | None] = [None] * len(tasks)
    eos, eos_id, pad = tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.pad_token_id
    turns = generated = 0

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    try:
        contexts = []
        for episode in episodes:
            messages = [{"role": "system", "content": environment.system},
                        {"role": "user", "content": episode.reset()}]  # fmt: skip
            contexts.append(encode(render(messages, eos, environment.tools, True)))
        pending: list[list[int]] = [[] for _ in tasks]  # an observation waits for its turn
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for turn in range(limits.max_tokens):
                running = [i for i, f in enumerate(finals) if f is None]
                full = [i for i in running if len(contexts[i]) + len(pending[i])
                        + params.max_new_tokens > limits.max_tokens]  # fmt: skip
                ended = pool.map(lambda i: episodes[i].finish("max_tokens"), full)
                for i, step in zip(full, ended, strict=True):
                    finals[i] = step
                active = [i for i in running if finals[i] is None]
                if not active:
                    break
                for i in active:
                    contexts[i] += pending[i]
                new = _generate(model, [contexts[i] for i in active], params, pad, eos_id,
                                None if seed is None else seed + turn)  # fmt: skip
                actions = []
                for i, ids in zip(active, new, strict=True):
                    body = ids[: ids.index(eos_id)] if eos_id in ids else ids
                    generated += len(body) + (eos_id in ids)
                    contexts[i] += [*body, eos_id]  # a turn cut at max_new_tokens is closed
                    actions.append(parse_tool_call(tokenizer.decode(body)))
                turns += len(active)
                steps = pool.map(lambda i, a: episodes[i].step(a), active, actions)
                for i, step in zip(active, steps, strict=True):
                    if step.done:
                        finals[i] = step
                    else:
                        pending[i] = encode(f"{TOOL}{step.observation}\n{ASSISTANT}")
    finally:
        for episode in episodes:
            episode.close()
    passed = sum(1 for f in finals if f is not None and f.score is not None and f.score.passed)
    seconds = time.perf_counter() - started
    return Played(len(tasks), turns, generated, passed, seconds,
                  ids=tuple(tuple(c) for c in contexts))  # fmt: skip


def _generate(
    model: Any, contexts: Sequence[Sequence[int]], params: SamplingParams, pad: int, eos: int,
    seed: int | None,
) -> list[list[int]]:  # fmt: skip
    """One plain ``generate`` over left-padded ``contexts``: each row's new tokens."""
    if seed is not None:
        torch.manual_seed(seed)
    width = max(len(c) for c in contexts)
    device = next(model.parameters()).device
    ids = torch.tensor([[pad] * (width - len(c)) + list(c) for c in contexts], device=device)
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
    greedy = params.temperature == 0
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p, top_k=None,
            max_new_tokens=params.max_new_tokens, pad_token_id=pad, eos_token_id=eos,
        )  # fmt: skip
    return [row[width:] for row in out.tolist()]


class _Subscriber:
    """Routes every task to the one loaded policy (the worker's ModelSubscriber, without
    Kafka or a registry)."""

    model_name = "agent-lm"

    def __init__(self, policy: AgentPolicy) -> None:
        self.policy = policy

    def route(self, _key: str) -> Routed[AgentPolicy]:
        return Routed(Channel.PRODUCTION, 1, self.policy)


def worker_episodes(worker: RolloutWorker, tasks: Sequence[Task], group: int) -> Played:
    """The worker's run of ``group`` episodes of each task."""
    requests = [TaskRequest(t, group, f"bench-{i}") for i, t in enumerate(tasks)]
    started = time.perf_counter()
    results = worker.run_batch(requests).results
    seconds = time.perf_counter() - started
    passed = sum(1 for r in results if r.tests_total and r.tests_passed == r.tests_total)
    ids = tuple(r.prompt_token_ids + r.completion_token_ids for r in results)
    return Played(len(results), sum(r.turns for r in results),
                  sum(r.completion_tokens for r in results), passed, seconds, ids=ids)  # fmt: skip


def random_chat_model(
    environment: RepositoryEnvironment, config: AgentModelConfig | None = None
) -> tuple[Any, Any]:
    """A chat tokenizer trained on training tasks' files and a random model of ``config``
    (default: the agent's shape, 1,024 positions; for a smoke run: its turns are rarely tool
    calls)."""
    config = config or AgentModelConfig(vocab_size=1024, max_positions=1024)
    corpus = [text for t in environment.tasks("train", 200, seed=3)
              for text in RepoSpec.from_json(t.spec).files.values()]  # fmt: skip
    corpus.append(environment.system)
    tokenizer = train_tokenizer(corpus, config.vocab_size, chat=True)
    torch.manual_seed(0)
    return build_model(config, tokenizer).eval(), tokenizer


def _median(values: Sequence[Played], rate: Callable[[Played], float]) -> float:
    return statistics.median(rate(p) for p in values)


def run(args: argparse.Namespace) -> None:
    """``bench.rollouts --env repository``: both sides, alternating; prints the report."""
    inner = RepositoryEnvironment()
    if args.checkpoint:
        dtype = getattr(torch, args.dtype)
        model, tokenizer = load_checkpoint(Path(args.checkpoint), device=args.device, dtype=dtype)
    else:
        model, tokenizer = random_chat_model(inner)
        model.to(args.device)
    generate_clock, tools_clock = Clock(), Clock()
    time_generate(model, generate_clock)
    environment = TimedEnvironment(inner, tools_clock)
    registry = EnvironmentRegistry()
    registry.register(inner.name, lambda: environment)
    tasks = inner.tasks("train", args.tasks, seed=1)
    params = SamplingParams(args.temperature, args.top_p, args.max_new_tokens)
    limits = EpisodeLimits(max_turns=args.max_turns, max_tokens=args.max_context)
    subscriber = _Subscriber(AgentPolicy(model, tokenizer))
    workers = os.cpu_count() or 1  # run_episodes' tool threads

    def timed(side: Callable[[], Played]) -> Played:
        generate_clock.reset()
        tools_clock.reset()
        played = side()
        return replace(played, generate_s=generate_clock.seconds(), tools_s=tools_clock.seconds())

    def worker_side() -> Played:
        worker = RolloutWorker(subscriber, registry, sampling=params,  # type: ignore[arg-type]
                               producer="bench", seed=args.seed, limits=limits)  # fmt: skip
        return worker_episodes(worker, tasks, args.group)

    def plain_side() -> Played:
        # The worker's first batch seed: RolloutWorker draws it from Random(seed).
        seed = random.Random(args.seed).randrange(1 << 31)
        every = [t for t in tasks for _ in range(args.group)]
        return plain_episodes(model, tokenizer, environment, every, params, limits, seed=seed,
                              workers=workers)  # fmt: skip

    timed(plain_side), timed(worker_side)  # warm-up
    base, ours = [], []
    for _ in range(args.rounds):  # alternate, so drift hits both sides alike
        base.append(timed(plain_side))
        ours.append(timed(worker_side))
    _report(args, base, ours, workers)


def _report(args: argparse.Namespace, base: list[Played], ours: list[Played], workers: int) -> None:
    pairs = zip(base, ours, strict=True)
    same = all(b.ids == o.ids for b, o in pairs)
    print(f"episodes, {args.tasks} tasks x {args.group} trials (repository; <= {args.max_turns} "
          f"turns, {args.max_context} tokens, {args.max_new_tokens} tokens a turn, temperature "
          f"{args.temperature:g}) on {args.device}, {workers} tool threads, median of "
          f"{args.rounds} rounds:")  # fmt: skip
    rates: Mapping[str, Callable[[Played], float]] = {
        "episodes/s": lambda p: p.rate(p.episodes),
        "turns/s": lambda p: p.rate(p.turns),
        "generated tokens/s": lambda p: p.rate(p.generated),
    }
    print(f"  {'':20} {'plain loop':>12} {'rollout worker':>15} {'ratio':>7}")
    for name, rate in rates.items():
        b, o = _median(base, rate), _median(ours, rate)
        target = "  (target >= 0.8)" if name == "episodes/s" else ""
        print(f"  {name:20} {b:12,.2f} {o:15,.2f} {o / b:6.2f}x{target}")
    last = ours[-1]
    print(f"  per round: {last.turns} turns, {last.generated} generated tokens, {last.passed} "
          f"of {last.episodes} passed; the same episodes on both sides: "
          f"{'yes' if same else 'no'}")  # fmt: skip
    for name, side in (("plain loop", base), ("rollout worker", ours)):
        gen = statistics.median(p.generate_s / p.seconds for p in side)
        tools = statistics.median(p.tools_s / p.seconds for p in side)
        print(f"  {name}'s time: generation {gen:.0%}, tool calls {tools:.0%} (overlapping "
              f"calls once), the rest {max(0.0, 1 - gen - tools):.0%}")  # fmt: skip
