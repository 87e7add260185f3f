"""A repository task's definition: the files, the hidden tests, where it came from.

A :class:`RepoSpec` is the ``spec`` of a repository :class:`~environments.base.Task` (JSON text):
everything a worker needs to rebuild the episode's private copy and to score it, so tasks travel
as events (``agent.tasks``) like program-synthesis tasks. ``files`` is what the model may see and
change (sources and the visible tests); ``hidden`` is what scores the copy at the end and is never
written into it. A hidden test calls ``module.function(*args)`` in the sandbox and compares the
``repr`` of what it returned with ``expected`` outside the sandbox: a claim the code could forge
is worth exactly what returning that value would be.

``template`` and ``bugs`` name the generator's layout and bug kinds (the held-out split is by
both); ``level`` is the difficulty (1: one file, one change; 2: several files, one change; 3:
several files, two changes). The instance id hashes the files and the hidden tests, so the same
repository with the same bug is the same task wherever it was generated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from environments.errors import TaskEnvironmentError

NAME = "repository"
ID_PREFIX = "repo-"


@dataclass(frozen=True)
class HiddenTest:
    """``module.function(*args)`` must return a value whose ``repr`` is ``expected``."""

    module: str
    function: str
    args: tuple[Any, ...]
    expected: str


@dataclass(frozen=True)
class RepoSpec:
    """One repository task (see the module docstring). ``fixed`` holds the correct text of each
    file the bug changed (the expert's target and a check that the task is solvable)."""

    template: str
    bugs: tuple[str, ...]
    level: int
    files: Mapping[str, str]
    hidden: tuple[HiddenTest, ...]
    fixed: Mapping[str, str] = field(default_factory=dict)
    test_file: str = ""  # the visible tests run_tests runs by default

    def to_json(self) -> str:
        raw = {
            "template": self.template, "bugs": list(self.bugs), "level": self.level,
            "files": dict(sorted(self.files.items())),
            "hidden": [[h.module, h.function, list(h.args), h.expected] for h in self.hidden],
            "fixed": dict(sorted(self.fixed.items())), "test_file": self.test_file,
        }  # fmt: skip
        return json.dumps(raw, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RepoSpec:
        try:
            raw = json.loads(text)
            hidden = tuple(HiddenTest(m, f, tuple(a), e) for m, f, a, e in raw["hidden"])
            spec = cls(raw["template"], tuple(raw["bugs"]), int(raw["level"]),
                       dict(raw["files"]), hidden, dict(raw.get("fixed", {})),
                       raw.get("test_file", ""))  # fmt: skip
        except (ValueError, KeyError, TypeError) as exc:
            raise TaskEnvironmentError(f"not a {NAME} task spec: {exc}") from exc
        if not spec.files or not spec.hidden:
            raise TaskEnvironmentError(f"{NAME} spec needs files and hidden tests")
        return spec

    @property
    def instance_id(self) -> str:
        """The task id: a hash of the files and the hidden tests (content, not seed)."""
        content = json.dumps([dict(sorted(self.files.items())),
                              [[h.module, h.function, list(h.args), h.expected]
                               for h in self.hidden]],
                             sort_keys=True, separators=(",", ":"))  # fmt: skip
        return ID_PREFIX + hashlib.sha256(content.encode()).hexdigest()[:16]
