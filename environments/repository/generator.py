"""Seeded generation of repository tasks (:class:`~environments.repository.spec.RepoSpec`).

A repository is ``ops.py`` (the program-synthesis operations of one kind of value, one line
each), the source modules of a :class:`~environments.repository.templates.Template` — functions
that compose one or two named helpers and say so in their docstring::

    def shout_name(s):
        \"\"\"Reverse it, then upper-case it.\"\"\"
        return upper(reverse(s))

— and ``test_<top>.py``, one visible test per function of the module under test, whose assert
message shows the actual value. A module that imports another (``app`` ← ``helpers``) calls at
least one of its functions ("Apply fix_tag, then …"), and every imported function is used.

Bugs change one line of one function: ``wrong-op`` (a helper replaced by another of its kind),
``missing-op`` (one dropped), ``stub`` (the body becomes ``raise NotImplementedError``) and the
eval-only ``extra-op`` (one inserted). Level 1: one module, one change; 2: several modules, the
change in a module another imports; 3: several modules, two changes (the first in an imported
module). Every instance is checked here by running it (our own code, in this process: module
:mod:`~environments.repository.evaluate`): the fixed files pass every visible and hidden test;
the buggy files — and each change alone — fail at least one of each; the expert's edits
(:mod:`~environments.repository.expert`) turn the buggy files into the fixed ones. A draw that
fails a check is drawn again.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from environments.errors import TaskEnvironmentError
from environments.program_synthesis import OPERATIONS, apply
from environments.repository import evaluate, expert
from environments.repository.spec import HiddenTest, RepoSpec
from environments.repository.templates import NOUNS, PARAMS, PHRASES, VERBS, Template

LEVELS = (1, 2, 3)
MAX_FUNCTIONS = 2  # per module (a fan-in top takes more): files stay short, the episode fits
HIDDEN_PER_FUNCTION = 3
VISIBLE_CANDIDATES = 8  # inputs tried for a visible test that shows the bug
REDUNDANCY_SAMPLES = 8
MAX_ATTEMPTS = 500

INPUTS: Mapping[str, Callable[[random.Random], Any]] = {
    "str": lambda r: "".join(r.choice("abcdeioxyzAEB") for _ in range(r.randint(3, 5))),
    "list": lambda r: [r.randint(-5, 9) for _ in range(r.randint(3, 4))],
    "int": lambda r: r.randint(-9, 20),
}


@dataclass(frozen=True)
class Function:
    """``def name(param)``: ``calls`` applied innermost first, or a stub; ``doc`` says what the
    correct function does (a bug leaves it as it was)."""

    name: str
    param: str
    calls: tuple[str, ...]
    doc: str
    stub: bool = False

    def text(self) -> str:
        body = "raise NotImplementedError" if self.stub else f"return {_nest(self)}"
        return f'def {self.name}({self.param}):\n    """{self.doc}"""\n    {body}\n'


def _nest(function: Function) -> str:
    expression = function.param
    for name in function.calls:
        expression = f"{name}({expression})"
    return expression


def docstring(calls: Sequence[str]) -> str:
    """What ``calls`` do in words: operations by their phrase, imported functions by name."""
    words = ", then ".join(PHRASES.get(c, f"apply {c}") for c in calls)
    return words[:1].upper() + words[1:] + "."


Modules = dict[str, list[Function]]  # module name → its functions, in dependency order


def task_message(spec: RepoSpec) -> str:
    """The user's message that opens an episode (short: every token is in every prompt)."""
    return f"Tests in {spec.test_file} fail. Fix the code. Files: {' '.join(sorted(spec.files))}"


def generate(rng: random.Random, level: int, template: Template, bugs: Sequence[str]) -> RepoSpec:
    """A checked instance of ``template`` at ``level`` with one planted change per entry of
    ``bugs`` (one at levels 1 and 2, two at level 3), drawn again until every check passes.
    TaskEnvironmentError when the level does not fit the template or the bugs, or after
    :data:`MAX_ATTEMPTS` failed draws."""
    if level not in LEVELS or template.multi_file != (level > 1) or len(bugs) != 1 + (level == 3):
        raise TaskEnvironmentError(
            f"level {level} takes {'several files' if level > 1 else 'one file'} and "
            f"{1 + (level == 3)} bug(s); got template {template.name!r} and bugs {list(bugs)}"
        )
    for _ in range(MAX_ATTEMPTS):
        spec = _attempt(rng, level, template, tuple(bugs))
        if spec is not None:
            return spec
    raise TaskEnvironmentError(f"no valid {template.name} instance with {list(bugs)}")


def _attempt(
    rng: random.Random, level: int, template: Template, bugs: tuple[str, ...]
) -> RepoSpec | None:
    kind = template.kind or rng.choice(sorted(OPERATIONS))
    fixed = _modules(rng, level, template, kind)
    if _redundant(rng, fixed, kind):
        return None
    changes = _plant(rng, level, template, fixed, kind, bugs)
    if changes is None:
        return None
    buggy = _with(fixed, changes)
    fixed_files, buggy_files = _files(fixed, fixed, kind), _files(buggy, fixed, kind)
    draw = INPUTS[kind]
    top, test_file = template.top, f"test_{template.top}.py"
    visible = {f.name: _visible_input(rng, draw, fixed_files, buggy_files, top, f.name)
               for f in fixed[top]}  # fmt: skip
    test_text = _test_file(evaluate.load(fixed_files), top, visible)
    fixed_files[test_file] = buggy_files[test_file] = test_text
    hidden = _hidden(rng, draw, fixed, fixed_files, visible)
    if evaluate.FAILED in test_text or any(h.expected == evaluate.FAILED for h in hidden):
        return None  # the fix itself raised: never a task
    # Each change alone shows in the visible and the hidden tests; the fix passes all of them.
    variants = [buggy_files] if len(changes) == 1 else [buggy_files] + [
        {**_files(_with(fixed, [c]), fixed, kind), test_file: test_text} for c in changes
    ]  # fmt: skip
    for files in variants:
        if not evaluate.failing_visible(files, test_file) or not evaluate.failing_hidden(
            files, hidden
        ):
            return None
    if evaluate.failing_visible(fixed_files, test_file) or evaluate.failing_hidden(
        fixed_files, hidden
    ):
        return None
    changed = {path for path in fixed_files if fixed_files[path] != buggy_files[path]}
    spec = RepoSpec(template.name, bugs, level, buggy_files, hidden,
                    {p: fixed_files[p] for p in sorted(changed)}, test_file)  # fmt: skip
    return spec if _expert_edits_fix(spec) else None


def _modules(rng: random.Random, level: int, template: Template, kind: str) -> Modules:
    ops = sorted(OPERATIONS[kind])
    names = [f"{verb}_{noun}" for verb in VERBS for noun in NOUNS[kind]]
    rng.shuffle(names)
    param = rng.choice(PARAMS[kind])
    modules: Modules = {}
    for module in template.modules:
        imported = [f.name for dep in module.imports for f in modules[dep]]
        unused = rng.sample(imported, len(imported))
        count = max(rng.randint(1, MAX_FUNCTIONS), (len(imported) + 1) // 2)
        functions = []
        for i in range(count):
            # Every imported function is used: take unused ones first, two per function if needed.
            depth = 2 if len(unused) > count - i else rng.randint(1, 2)
            calls: list[str] = []
            if imported:
                calls.append(unused.pop() if unused else rng.choice(imported))
            while len(calls) < depth:
                pick = unused.pop() if unused else rng.choice(ops)
                if pick not in calls:
                    calls.append(pick)
            rng.shuffle(calls)
            functions.append(Function(names.pop(), param, tuple(calls), docstring(calls)))
        modules[module.name] = functions
    return modules


def _redundant(rng: random.Random, modules: Modules, kind: str) -> bool:
    """Whether a function does what less of it does ("Add one, then subtract one"; lower(upper))
    on every one of a few inputs: its calls are expanded into operations and compared with the
    identity and with each of its calls alone."""
    chains: dict[str, tuple[str, ...]] = {}
    samples = [INPUTS[kind](rng) for _ in range(REDUNDANCY_SAMPLES)]
    for functions in modules.values():
        for f in functions:
            chains[f.name] = tuple(op for c in f.calls for op in chains.get(c, (c,)))
            shorter = [(), *(chains.get(c, (c,)) for c in f.calls if len(f.calls) > 1)]
            outputs = [apply(chains[f.name], x) for x in samples]
            if any(outputs == [apply(s, x) for x in samples] for s in shorter):
                return True
    return False


def _plant(
    rng: random.Random,
    level: int,
    template: Template,
    modules: Modules,
    kind: str,
    bugs: tuple[str, ...],
) -> list[tuple[str, int, Function]] | None:
    """``(module, index, buggy function)`` per bug, in distinct functions; the first in an
    imported module at levels 2 and 3. None when a bug does not apply to the drawn functions."""
    sites = [(m, i) for m in modules for i in range(len(modules[m]))]
    imported = [(m, i) for m, i in sites if m != template.top]
    changes: list[tuple[str, int, Function]] = []
    for number, bug in enumerate(bugs):
        pool = imported if level > 1 and number == 0 else sites
        pool = [s for s in pool if s not in {(m, i) for m, i, _ in changes}]
        if not pool:
            return None
        module, index = rng.choice(pool)
        planted = _bug(rng, bug, modules[module][index], sorted(OPERATIONS[kind]))
        if planted is None:
            return None
        changes.append((module, index, planted))
    return changes


def _bug(rng: random.Random, bug: str, function: Function, ops: list[str]) -> Function | None:
    calls = list(function.calls)
    if bug == "stub":
        return dataclasses.replace(function, stub=True)
    if bug == "missing-op":
        del calls[rng.randrange(len(calls))]
    elif bug == "wrong-op":
        positions = [i for i, c in enumerate(calls) if c in ops]
        if not positions:
            return None
        i = rng.choice(positions)
        calls[i] = rng.choice([op for op in ops if op not in calls])
    elif bug == "extra-op":
        calls.insert(rng.randint(0, len(calls)), rng.choice([op for op in ops if op not in calls]))
    else:
        raise TaskEnvironmentError(f"unknown bug kind {bug!r}")
    return dataclasses.replace(function, calls=tuple(calls))


def _with(modules: Modules, changes: Sequence[tuple[str, int, Function]]) -> Modules:
    out = {name: list(functions) for name, functions in modules.items()}
    for module, index, function in changes:
        out[module][index] = function
    return out


def _files(modules: Modules, imports_of: Modules, kind: str) -> dict[str, str]:
    """The repository's source files; each module's imports are those of ``imports_of`` (the
    fixed modules: a change never touches an import line)."""
    files = {"ops.py": "".join(f"def {op}(x): return {body}\n"
                               for op, body in OPERATIONS[kind].items())}  # fmt: skip
    defined: dict[str, str] = {}  # function → its module
    for module, functions in modules.items():
        used: dict[str, list[str]] = {}
        for f in imports_of[module]:
            for c in f.calls:
                if c in defined and c not in used.setdefault(defined[c], []):
                    used[defined[c]].append(c)
        imports = "from ops import *\n" + "".join(
            f"from {m} import {', '.join(sorted(names))}\n" for m, names in sorted(used.items())
        )
        files[f"{module}.py"] = imports + "\n" + "\n".join(f.text() for f in functions)
        defined.update((f.name, module) for f in functions)
    return files


def _visible_input(
    rng: random.Random,
    draw: Callable[[random.Random], Any],
    fixed: Mapping[str, str],
    buggy: Mapping[str, str],
    module: str,
    function: str,
) -> Any:
    """An input on which the buggy function differs from the fixed one, if one is found."""
    candidates = [draw(rng) for _ in range(VISIBLE_CANDIDATES)]
    good, bad = evaluate.load(fixed), evaluate.load(buggy)
    for value in candidates:
        if evaluate.call(good, module, function, (value,)) != evaluate.call(
            bad, module, function, (value,)
        ):
            return value
    return candidates[0]


def _test_file(fixed: evaluate.Loader, module: str, visible: Mapping[str, Any]) -> str:
    """One test per function; the assert's message is the actual value (run_tests shows it)."""
    tests = "".join(
        f"\ndef test_{name}():\n    assert {name}({value!r}) == "
        f"{evaluate.call(fixed, module, name, (value,))}, {name}({value!r})\n"
        for name, value in visible.items()
    )
    return f"from {module} import {', '.join(visible)}\n" + tests


def _hidden(
    rng: random.Random,
    draw: Callable[[random.Random], Any],
    modules: Modules,
    fixed_files: dict[str, str],
    visible: Mapping[str, Any],
) -> tuple[HiddenTest, ...]:
    """:data:`HIDDEN_PER_FUNCTION` tests per source function on inputs the visible tests do not
    show, expected values from the fixed files."""
    good = evaluate.load(fixed_files)
    hidden: list[HiddenTest] = []
    for module, functions in modules.items():
        for f in functions:
            inputs: list[Any] = []
            while len(inputs) < HIDDEN_PER_FUNCTION:
                value = draw(rng)
                if value not in inputs and (f.name not in visible or value != visible[f.name]):
                    inputs.append(value)
            hidden.extend(
                HiddenTest(module, f.name, (v,), evaluate.call(good, module, f.name, (v,)))
                for v in inputs
            )
    return tuple(hidden)


def _expert_edits_fix(spec: RepoSpec) -> bool:
    """The expert's edits, each an exact and unique replace, turn the files into the fix."""
    files = dict(spec.files)
    for path, old, new in expert.changed_lines(spec):
        if files[path].count(old) != 1:
            return False
        files[path] = files[path].replace(old, new)
    return all(files[path] == text for path, text in spec.fixed.items())
