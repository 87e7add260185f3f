"""What an environment is: tasks, the prompt it shows, and how it scores a completion.

An environment is a small Protocol (DESIGN §12): ``reset(task) → prompt``, ``score(task,
completion) → Score`` and ``tasks(split, n, seed)`` (a seeded pool; the ``eval`` split is a fixed
held-out set that the ``train`` split never yields). Environments are registered by name in
:data:`ENVIRONMENTS`; a task carries its environment's name and an environment-specific
``spec`` (JSON text) from which the environment rebuilds everything it needs, hidden tests
included, so tasks travel as events (``agent.tasks``) and any worker can score them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from environments.errors import TaskEnvironmentError

Split = Literal["train", "eval", "eval_extra"]  # eval_extra: a second, report-only held-out set


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


class Environment(Protocol):
    """A family of tasks the agent acts in."""

    name: str

    def reset(self, task: Task) -> str:
        """The prompt the model sees for ``task`` (never the hidden tests)."""
        ...

    def score(self, task: Task, completion: str) -> Score:
        """Run ``completion`` against the task's hidden tests (sandboxed); never raises for
        anything the completion does."""
        ...

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        """``n`` tasks of ``split``, the same for the same seed; ``eval`` tasks never appear in
        ``train``."""
        ...


@runtime_checkable
class Demonstrator(Protocol):
    """An environment that knows a correct completion of its tasks (for supervised warm-up:
    the agent-sft recipe needs one)."""

    def solution(self, task: Task) -> str: ...


@dataclass
class EnvironmentRegistry:
    """Environment name → factory. ``get`` builds (and caches) one instance per name."""

    factories: dict[str, Callable[[], Environment]] = field(default_factory=dict)
    _built: dict[str, Environment] = field(default_factory=dict)

    def register(self, name: str, factory: Callable[[], Environment]) -> None:
        self.factories[name] = factory

    def get(self, name: str) -> Environment:
        """The environment ``name``; TaskEnvironmentError naming the known ones if unknown."""
        if name not in self._built:
            factory = self.factories.get(name)
            if factory is None:
                known = ", ".join(sorted(self.factories)) or "none"
                raise TaskEnvironmentError(f"unknown environment {name!r}; known: {known}")
            self._built[name] = factory()
        return self._built[name]

    def get_any(self, name: str) -> Environment:
        """The environment ``name``, single-turn or multi-turn (a registered
        ``MultiTurnEnvironment`` is returned as it is: callers check which it is)."""
        return self.get(name)

    def names(self) -> list[str]:
        return sorted(self.factories)


def training_tasks(
    environments: EnvironmentRegistry,
    environment: str,
    seed: int,
    difficulties: Sequence[int] = (1, 2, 3),
) -> Iterator[Task]:
    """Endless training tasks from ``environment``'s pool (never its eval set), the same sequence
    for the same ``seed``: drawn by the environment's ``task(rng, difficulty)`` when it has one
    (each at a difficulty drawn from ``difficulties``), else one seeded ``train`` task at a time.
    TaskEnvironmentError (on the first draw) when ``environment`` is not registered."""
    env = environments.get(environment)
    rng = random.Random(seed)
    draw: Callable[[random.Random, int], Task] | None = getattr(env, "task", None)
    counter = 0
    while True:
        if draw is not None:
            yield draw(rng, rng.choice(list(difficulties)))
        else:
            yield env.tasks("train", 1, seed=seed * 1_000_003 + counter)[0]
        counter += 1


def score_all(
    trials: Sequence[tuple[Environment, Task, str]], workers: int | None = None
) -> list[Score]:
    """``environment.score(task, completion)`` of each trial, ``workers`` sandboxes at a time
    (default: the CPU count), in order. Each score is a subprocess: threads only wait on it."""
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda trial: trial[0].score(trial[1], trial[2]), trials))
