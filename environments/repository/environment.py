"""The repository environment (registered as ``repository``): generated repositories with a
planted bug, fixed over several turns with tools (DESIGN §12, "Repositories with tools").

Pools and the held-out split (by construction, two ways):

* ``eval`` — a fixed set of instances of the training templates and bug kinds, drawn from its own
  seed namespace; training never yields one, nor any task with the same source files (the same
  repository with the same bug, whatever its test inputs: :func:`source_key`), wherever it was
  drawn.
* ``eval_extra`` ("unseen templates") — instances of the eval-only templates or bug kinds
  (:data:`~environments.repository.templates.EVAL_TEMPLATES`, ``EVAL_BUGS``), which training
  never draws; report-only.
* ``train`` — :meth:`RepositoryEnvironment.task` at a level (the curriculum's knob), or
  ``tasks("train", n, seed)``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from environments.base import Split, Task
from environments.episodes import Episode, EpisodeLimits
from environments.errors import TaskEnvironmentError
from environments.repository import expert
from environments.repository.episode import RepoEpisode
from environments.repository.generator import LEVELS, generate
from environments.repository.spec import NAME, RepoSpec
from environments.repository.templates import (
    EVAL_BUGS,
    EVAL_TEMPLATES,
    TRAIN_BUGS,
    TRAIN_TEMPLATES,
    Template,
)
from environments.repository.tools import TOOLS
from environments.sandbox import SandboxLimits
from policies.agent_chat import ToolCall

SYSTEM = "Fix the repository so its tests pass: one tool call per turn, then submit."
_TRAIN_BY_LEVEL = {
    level: [t for t in TRAIN_TEMPLATES.values() if t.multi_file == (level > 1)] for level in LEVELS
}
_MULTI_FILE = [t for t in (*TRAIN_TEMPLATES.values(), *EVAL_TEMPLATES.values()) if t.multi_file]


def _bug_count(level: int) -> int:
    return 2 if level == 3 else 1


def source_key(spec: RepoSpec) -> str:
    """A hash of the repository as its buggy source reads (every file but the visible tests):
    two instances that differ only in test inputs are one instance for the held-out split."""
    sources = sorted((p, text) for p, text in spec.files.items() if p != spec.test_file)
    digest = hashlib.sha256(json.dumps(sources, separators=(",", ":")).encode()).hexdigest()
    return "src-" + digest[:16]


class RepositoryEnvironment:
    """A :class:`~environments.episodes.MultiTurnEnvironment` and
    :class:`~environments.episodes.ExpertDemonstrator`. The held-out sets (``eval_size`` and
    ``extra_size`` tasks, levels 1 to 3 in turn) are generated on first use."""

    name = NAME
    tools: Sequence[Mapping[str, Any]] = TOOLS
    system = SYSTEM
    extra_eval = "unseen templates"

    def __init__(
        self, eval_size: int = 300, extra_size: int = 300, limits: SandboxLimits | None = None
    ) -> None:
        self.eval_size, self.extra_size = eval_size, extra_size
        self.sandbox_limits = limits or SandboxLimits()

    @functools.cached_property
    def _eval(self) -> list[Task]:
        out = []
        for i in range(self.eval_size):
            rng, level = random.Random(f"repo-eval-{i}"), LEVELS[i % len(LEVELS)]
            out.append(self._draw(rng, level, _TRAIN_BY_LEVEL[level], TRAIN_BUGS))
        return out

    @functools.cached_property
    def _extra(self) -> list[Task]:
        out = []
        for i in range(self.extra_size):
            rng, level = random.Random(f"repo-eval-extra-{i}"), LEVELS[i % len(LEVELS)]
            templates = _MULTI_FILE if level > 1 else _TRAIN_BY_LEVEL[1]
            out.append(self._draw(rng, level, templates, TRAIN_BUGS + EVAL_BUGS, unseen=True))
        return out

    @functools.cached_property
    def _held_out_keys(self) -> frozenset[str]:
        held_out = [*self._eval, *self._extra]
        return frozenset(
            [t.task_id for t in held_out] + [source_key(self.spec(t)) for t in held_out]
        )

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        """``n`` tasks of ``split``: the first ``n`` of a fixed held-out set (``eval``,
        ``eval_extra``; ``seed`` unused), or seeded training tasks at levels drawn from 1 to 3.
        TaskEnvironmentError when ``n`` exceeds a held-out set."""
        if split in ("eval", "eval_extra"):
            pool = self._eval if split == "eval" else self._extra
            if n > len(pool):
                raise TaskEnvironmentError(f"the {split} set has {len(pool)} tasks, asked {n}")
            return pool[:n]
        rng = random.Random(f"repo-train-{seed}")
        return [self.task(rng, rng.choice(LEVELS)) for _ in range(n)]

    def task(self, rng: random.Random, level: int) -> Task:
        """One training task at ``level`` (1..3): a training template and bug kinds, never a
        held-out instance."""
        if level not in LEVELS:
            raise TaskEnvironmentError(f"level {level} is outside {LEVELS[0]}..{LEVELS[-1]}")
        while True:
            task = self._draw(rng, level, _TRAIN_BY_LEVEL[level], TRAIN_BUGS)
            if not self._held_out_instance(task, self.spec(task)):
                return task

    def held_out(self, task: Task) -> bool:
        """True for an eval or eval_extra instance (by content: its id or its source files) and
        for any task of an eval-only template or bug kind. TaskEnvironmentError when the spec
        cannot be read."""
        spec = self.spec(task)
        return (
            self._held_out_instance(task, spec)
            or spec.template not in TRAIN_TEMPLATES
            or not set(spec.bugs) <= set(TRAIN_BUGS)
        )

    def _held_out_instance(self, task: Task, spec: RepoSpec) -> bool:
        keys = self._held_out_keys
        return task.task_id in keys or spec.instance_id in keys or source_key(spec) in keys

    def cluster(self, task: Task) -> str:
        """The task's template (the eval check resamples templates, not instances)."""
        return self.spec(task).template

    def expert_action(self, task: Task, history: Sequence[tuple[ToolCall, str]]) -> ToolCall:
        """The scripted expert's next call (``environments.repository.expert.next_call``)."""
        return expert.next_call(self.spec(task), history)

    def episode(self, task: Task, limits: EpisodeLimits | None = None) -> Episode:
        """An episode on a private copy of ``task``'s repository."""
        return RepoEpisode(task, self.spec(task), limits or EpisodeLimits(), self.sandbox_limits)

    def spec(self, task: Task) -> RepoSpec:
        """``task``'s :class:`RepoSpec`; TaskEnvironmentError for another environment's task."""
        if task.environment != NAME:
            raise TaskEnvironmentError(f"task {task.task_id} is for {task.environment!r}")
        return RepoSpec.from_json(task.spec)

    @staticmethod
    def _draw(
        rng: random.Random,
        level: int,
        templates: Sequence[Template],
        bugs: Sequence[str],
        unseen: bool = False,
    ) -> Task:
        """A task of a template and bug kinds drawn from these; ``unseen``: at least one of
        them eval-only (a training template gets an eval-only bug kind)."""
        template = rng.choice(list(templates))
        kinds = [rng.choice(list(bugs)) for _ in range(_bug_count(level))]
        if unseen and template.name in TRAIN_TEMPLATES and not set(kinds) & set(EVAL_BUGS):
            kinds[rng.randrange(len(kinds))] = rng.choice(EVAL_BUGS)
        spec = generate(rng, level, template, kinds)
        return Task(spec.instance_id, NAME, level, spec.to_json())
