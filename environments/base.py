"""What an environment is: tasks, the prompt it shows, and how it scores a completion.

An environment is a small Protocol (DESIGN §12): ``reset(task) → prompt``, ``score(task,
completion) → Score`` and ``tasks(split, n, seed)`` (a seeded pool). Splits: ``train``; ``eval``,
the release check's fixed held-out set, never in any training pool by construction; and
``eval_extra``, a second held-out set that is only reported (each environment names it in
``extra_eval``). ``held_out(task)`` says whether a task must never be trained on (training pools
skip it, the task feed refuses it); ``cluster(task)`` groups tasks that are not independent (one
program, one template): the eval check's bootstrap resamples clusters, not tasks. Environments
— single-turn (:class:`Environment`) or multi-turn (``environments.episodes``) — are registered
by name in :data:`ENVIRONMENTS`; a task carries its environment's name and an environment-specific
``spec`` (JSON text) from which the environment rebuilds everything it needs, hidden tests
included, so tasks travel as events (``agent.tasks``) and any worker can score them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, runtime_checkable

from environments.errors import TaskEnvironmentError

if TYPE_CHECKING:  # episodes imports this module
    from environments.episodes import MultiTurnEnvironment

Split = Literal["train", "eval", "eval_extra"]
MAX_HELD_OUT_DRAWS = 10_000  # consecutive held-out draws before training_tasks gives up


@dataclass(frozen=True)
class Task:
    """One task: ``spec`` is the environment's own description (JSON text), never shown whole."""

    task_id: str
    environment: str
    difficulty: int
    spec: str


@dataclass(frozen=True)
class Score:
    """How a completion did: reward ``components`` (their sum is the trial's reward, DESIGN §5),
    tests passed of the total, and the sandbox's status and reason."""

    components: Mapping[str, float]
    tests_passed: int
    tests_total: int
    status: str
    reason: str = ""
    duration_ms: int = 0

    @property
    def passed(self) -> bool:
        """Every hidden test passed."""
        return self.tests_total > 0 and self.tests_passed == self.tests_total

    @property
    def reward(self) -> float:
        return float(sum(self.components.values()))


@runtime_checkable
class TaskFamily(Protocol):
    """What every environment says about its tasks: the pools and which tasks are held out."""

    name: str
    extra_eval: str  # a short label of the eval_extra set ("seen programs")

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        """``n`` tasks of ``split``, the same for the same seed; ``train`` never yields a task
        that :meth:`held_out` holds out."""
        ...

    def held_out(self, task: Task) -> bool:
        """True when ``task`` must never be trained on (an ``eval`` or ``eval_extra`` task, or
        one of a held-out program or template); TaskEnvironmentError when it cannot be read."""
        ...

    def cluster(self, task: Task) -> str:
        """The group ``task`` belongs to for the eval check's bootstrap (its program, its
        template): tasks of one cluster are not independent evidence."""
        ...


@runtime_checkable
class Environment(TaskFamily, Protocol):
    """A family of single-turn tasks the agent acts in: a prompt, one completion, a score."""

    def reset(self, task: Task) -> str:
        """The prompt the model sees for ``task`` (never the hidden tests)."""
        ...

    def score(self, task: Task, completion: str) -> Score:
        """Run ``completion`` against the task's hidden tests (sandboxed); never raises for
        anything the completion does."""
        ...


# What the registry holds: a single-turn environment or a multi-turn one (episodes of tool calls).
AnyEnvironment: TypeAlias = "Environment | MultiTurnEnvironment"


@runtime_checkable
class Demonstrator(Protocol):
    """An environment that knows a correct completion of its tasks (for supervised warm-up:
    the agent-sft recipe needs one)."""

    def solution(self, task: Task) -> str: ...


@dataclass
class EnvironmentRegistry:
    """Environment name → factory. ``get_any`` builds (and caches) one instance per name;
    ``get`` is the same for callers that need a single-turn environment."""

    factories: dict[str, Callable[[], AnyEnvironment]] = field(default_factory=dict)
    _built: dict[str, AnyEnvironment] = field(default_factory=dict)

    def register(self, name: str, factory: Callable[[], AnyEnvironment]) -> None:
        self.factories[name] = factory

    def get_any(self, name: str) -> AnyEnvironment:
        """The environment ``name``; TaskEnvironmentError naming the known ones if unknown."""
        if name not in self._built:
            factory = self.factories.get(name)
            if factory is None:
                known = ", ".join(sorted(self.factories)) or "none"
                raise TaskEnvironmentError(f"unknown environment {name!r}; known: {known}")
            self._built[name] = factory()
        return self._built[name]

    def get(self, name: str) -> Environment:
        """The single-turn environment ``name``; TaskEnvironmentError if unknown or if it is
        multi-turn (its tasks are episodes: ``get_any``)."""
        environment = self.get_any(name)
        if not isinstance(environment, Environment):
            raise TaskEnvironmentError(
                f"environment {name!r} is multi-turn (episodes), not a prompt-and-score one"
            )
        return environment

    def names(self) -> list[str]:
        return sorted(self.factories)


def training_tasks(
    environments: EnvironmentRegistry,
    environment: str,
    seed: int,
    difficulties: Sequence[int] = (1, 2, 3),
    level: Callable[[random.Random], int] | None = None,
) -> Iterator[Task]:
    """Endless training tasks from ``environment``'s pool, the same sequence for the same
    ``seed``: drawn by the environment's ``task(rng, difficulty)`` when it has one (each at a
    difficulty drawn from ``difficulties``, or by ``level`` — a curriculum's draw, asked anew for
    every task), else one seeded ``train`` task at a time. A task the
    environment holds out (:meth:`TaskFamily.held_out`) is never yielded: the pools already avoid
    them, this makes sure. TaskEnvironmentError (on the first draw) when ``environment`` is not
    registered or cannot say what it holds out, or when it draws nothing but held-out tasks."""
    env = family(environments.get_any(environment))
    rng = random.Random(seed)
    draw: Callable[[random.Random, int], Task] | None = getattr(env, "task", None)
    counter, refused = 0, 0
    while True:
        if draw is not None:
            task = draw(rng, level(rng) if level else rng.choice(list(difficulties)))
        else:
            task = env.tasks("train", 1, seed=seed * 1_000_003 + counter)[0]
        counter += 1
        if not env.held_out(task):
            refused = 0
            yield task
            continue
        refused += 1
        if refused >= MAX_HELD_OUT_DRAWS:
            raise TaskEnvironmentError(
                f"{environment}: {refused} training draws in a row were held-out tasks; its "
                "training pool must not draw them"
            )


def family(environment: AnyEnvironment) -> TaskFamily:
    """``environment`` as a :class:`TaskFamily`; TaskEnvironmentError when it cannot say which of
    its tasks are held out (then none of them may be trained on or fed)."""
    if not isinstance(environment, TaskFamily):
        raise TaskEnvironmentError(
            f"environment {getattr(environment, 'name', '?')!r} does not say which tasks are held "
            "out (held_out, cluster, extra_eval): nothing of it may train"
        )
    return environment


def score_all(
    trials: Sequence[tuple[Environment, Task, str]], workers: int | None = None
) -> list[Score]:
    """``environment.score(task, completion)`` of each trial, ``workers`` sandboxes at a time
    (default: the CPU count), in order. Each score is a subprocess: threads only wait on it."""
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda trial: trial[0].score(trial[1], trial[2]), trials))
