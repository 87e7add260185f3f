"""The scripted expert of repository tasks (the warm-up's demonstrations), read off the spec.

It runs the tests, reads the module under test and, along its imports, each module where a
changed line lives, edits each changed line (``old`` = the buggy line without its indentation,
``new`` = the fixed one), runs the tests again and submits. The generator checks that these
edits, applied in this order with the ``edit`` tool's exact-and-unique rule, turn the buggy
files into the fixed ones, so the expert solves every generated task.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from environments.repository.spec import RepoSpec
from policies.agent_chat import ToolCall

_IMPORT = re.compile(r"^from (\w+) import ", re.MULTILINE)
LIBRARY = "ops.py"  # the named operations every module imports; never where a bug lives


def module_under_test(spec: RepoSpec) -> str:
    """The source file ``spec.test_file`` tests (``test_app.py`` → ``app.py``)."""
    return spec.test_file.removeprefix("test_")


def read_order(spec: RepoSpec) -> list[str]:
    """The files the expert reads: the module under test, then for each changed file the
    modules on the import path to it (shortest, breadth first), each once."""
    top = module_under_test(spec)
    parents: dict[str, str] = {top: ""}
    queue = [top]
    for path in queue:  # breadth first over `from X import` lines, ops.py excluded
        for name in _IMPORT.findall(spec.files.get(path, "")):
            child = f"{name}.py"
            if child != LIBRARY and child in spec.files and child not in parents:
                parents[child] = path
                queue.append(child)
    order = [top]
    for changed in sorted(spec.fixed, key=lambda p: queue.index(p) if p in queue else len(queue)):
        path, chain = changed, []
        while path and path not in order:
            chain.append(path)
            path = parents.get(path, "")
        order.extend(reversed(chain))
    return order


def changed_lines(spec: RepoSpec) -> list[tuple[str, str, str]]:
    """``(path, old, new)`` of each line the fix changes, in reading order (stripped lines)."""
    out: list[tuple[str, str, str]] = []
    for path in read_order(spec):
        if path not in spec.fixed:
            continue
        buggy, fixed = spec.files[path].splitlines(), spec.fixed[path].splitlines()
        out.extend(
            (path, b.strip(), f.strip()) for b, f in zip(buggy, fixed, strict=True) if b != f
        )
    return out


def plan(spec: RepoSpec) -> list[ToolCall]:
    """The expert's whole episode, call by call."""
    reads = [ToolCall("read_file", {"path": path}) for path in read_order(spec)]
    edits = [ToolCall("edit", {"path": p, "old": o, "new": n}) for p, o, n in changed_lines(spec)]
    return [ToolCall("run_tests"), *reads, *edits, ToolCall("run_tests"), ToolCall("submit")]


def next_call(spec: RepoSpec, history: Sequence[tuple[ToolCall, str]]) -> ToolCall:
    """The expert's next call given the calls made so far: the first step of :func:`plan` the
    history has not done yet (tests run first; each read and edit once; tests run again after
    the last edit; then submit)."""
    calls = [call for call, _ in history]
    steps = plan(spec)
    done = {(c.name, tuple(sorted(c.arguments.items()))) for c in calls}
    edited = [i for i, c in enumerate(calls) if c.name == "edit"]
    tested = [i for i, c in enumerate(calls) if c.name == "run_tests"]
    if not tested:
        return steps[0]
    for step in steps[1:-2]:  # reads and edits
        if (step.name, tuple(sorted(step.arguments.items()))) not in done:
            return step
    if edited and tested[-1] < edited[-1]:
        return steps[-2]
    return steps[-1]
