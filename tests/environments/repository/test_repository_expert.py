"""The scripted expert: its calls, decided from the history, for a level-1 and a level-3 task
(tool outputs simulated with plain strings), and its edits fix every generated task."""

from __future__ import annotations

import random
from collections.abc import Sequence

from environments.base import Task
from environments.repository import evaluate, expert
from environments.repository.environment import RepositoryEnvironment
from environments.repository.spec import RepoSpec
from policies.agent_chat import ToolCall

ENV = RepositoryEnvironment(eval_size=3, extra_size=3)


def _play(task: Task, observe: Sequence[str]) -> list[ToolCall]:
    """The expert's calls until it submits, each call answered by the next simulated output."""
    history: list[tuple[ToolCall, str]] = []
    for output in observe:
        call = ENV.expert_action(task, history)
        history.append((call, output))
        if call.name == "submit":
            break
    return [call for call, _ in history]


def test_a_level_1_episode_runs_reads_edits_reruns_and_submits() -> None:
    task = ENV.task(random.Random(1), 1)
    spec = RepoSpec.from_json(task.spec)
    source = spec.test_file.removeprefix("test_")
    [(path, old, new)] = expert.changed_lines(spec)
    calls = _play(task, ["FAILED test_f: f('ab') == 'BA' (got 'ab')\n1 failed", spec.files[source],
                         f"edited {source}", "1 passed", ""])  # fmt: skip
    assert calls == [
        ToolCall("run_tests"),
        ToolCall("read_file", {"path": source}),
        ToolCall("edit", {"path": source, "old": old, "new": new}),
        ToolCall("run_tests"),
        ToolCall("submit"),
    ]
    assert path == source and old in spec.files[source] and new in spec.fixed[source]
    assert old == old.strip() and new == new.strip()


def test_a_level_3_episode_reads_along_the_imports_and_makes_both_edits() -> None:
    task = ENV.task(random.Random(5), 3)
    spec = RepoSpec.from_json(task.spec)
    reads = expert.read_order(spec)
    edits = expert.changed_lines(spec)
    outputs = ["2 failed", *(spec.files[p] for p in reads), "edited", "edited", "2 passed", ""]
    calls = _play(task, outputs)
    assert [c.name for c in calls] == (
        ["run_tests"] + ["read_file"] * len(reads) + ["edit", "edit", "run_tests", "submit"]
    )
    assert reads[0] == spec.test_file.removeprefix("test_") and set(spec.fixed) <= set(reads)
    assert len(edits) == 2 and {p for p, _, _ in edits} == set(spec.fixed)
    # Each module read after the first is imported by one read before it.
    for i, path in enumerate(reads[1:], 1):
        name = path.removesuffix(".py")
        assert any(f"from {name} import" in spec.files[p] for p in reads[:i])


def test_the_expert_decides_from_the_history_not_the_turn_count() -> None:
    task = ENV.task(random.Random(1), 1)
    source = RepoSpec.from_json(task.spec).test_file.removeprefix("test_")
    read = ToolCall("read_file", {"path": source})
    # Already read (e.g. by a model before the expert took over): the next call is the edit.
    history = [(ToolCall("run_tests"), "1 failed"), (read, "..."), (read, "...")]
    assert ENV.expert_action(task, history).name == "edit"
    assert ENV.expert_action(task, []).name == "run_tests"


def test_the_expert_s_edits_fix_every_task_of_both_eval_sets() -> None:
    for task in ENV.tasks("eval", 3) + ENV.tasks("eval_extra", 3) + ENV.tasks("train", 30):
        spec = RepoSpec.from_json(task.spec)
        files = dict(spec.files)
        for call in expert.plan(spec):
            if call.name == "edit":
                path, old, new = (call.arguments[k] for k in ("path", "old", "new"))
                assert files[path].count(old) == 1
                files[path] = files[path].replace(old, new)
        assert evaluate.failing_hidden(files, spec.hidden) == 0
