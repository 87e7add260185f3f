"""Program synthesis from examples: the default environment a small model can learn.

A task is a hidden function ``f``, a composition of 1 to 3 named operations over one kind of
value (strings, lists of ints or ints); difficulty is the composition depth. The prompt shows
three ``f(input) == output`` examples and the function's header; the completion is its body,
e.g. ``    return upper(reverse(x))``. The named operations are in scope in the sandbox (the
:data:`PRELUDE`). Five hidden inputs, never in the prompt, score it: the reward component
``tests`` is the fraction of them the completion gets right, compared outside the sandbox.

Held out by program. A program is a kind and its operations (:func:`program`, e.g.
``str:reverse>upper``, innermost first); in each (kind, depth) stratum a fixed share
(:data:`HELD_OUT_SHARE`, at least one, never all) is held out, chosen by a hash of the program.
``eval`` tasks (the release check's set) are tasks of held-out programs, drawn from their own seed
namespace with the depth uniform, as in training; ``eval_extra`` ("seen programs") are tasks of
training programs with inputs from another eval namespace (in-distribution). ``train`` and
``task(rng, depth)`` draw training programs only and never an ``eval_extra`` task (ids hash the
whole spec, inputs included). A task's cluster, for the eval check's bootstrap, is its program.

Most completions a trained model writes are compositions of the task's own operations
(``    return a(b(x))``). Those are scored without running them: :func:`composition` reads the
text as a syntax tree and accepts nothing but nested calls of the kind's operations on ``x``,
which this module evaluates with its own operation table. Everything else — any other name,
attribute, literal, statement — runs in the sandbox. The verdict is the same either way (a
test checks that both paths agree); the trusted path is about a hundred times faster.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from environments.base import Score, Split, Task
from environments.errors import TaskEnvironmentError
from environments.sandbox import OK, SandboxLimits, run_program
from ground import python_ast

NAME = "program-synthesis"
FUNCTION = "f"
HEADER = "def f(x):\n"
EXAMPLES = 3
TESTS = 5
MAX_DEPTH = 3
HELD_OUT_SHARE = 0.1  # of the programs of each (kind, depth): eval only
TRUSTED_DEPTH = 6  # deeper compositions (square of square of … grows without bound) are sandboxed

# The operations, by the kind of value they map (each maps a kind to itself, so any composition
# within a kind is valid). One source text: the sandbox runs it, this module executes it to
# compute expected outputs.
OPERATIONS: Mapping[str, Mapping[str, str]] = {
    "str": {
        "reverse": "x[::-1]",
        "upper": "x.upper()",
        "lower": "x.lower()",
        "swapcase": "x.swapcase()",
        "double": "x + x",
        "sort_chars": "''.join(sorted(x))",
        "dedupe": "''.join(dict.fromkeys(x))",
        "drop_vowels": "''.join(c for c in x if c.lower() not in 'aeiou')",
        "rotate": "x[1:] + x[:1]",
        "first3": "x[:3]",
    },
    "list": {
        "rev_list": "x[::-1]",
        "sort_list": "sorted(x)",
        "inc_each": "[v + 1 for v in x]",
        "double_each": "[2 * v for v in x]",
        "drop_neg": "[v for v in x if v >= 0]",
        "unique": "list(dict.fromkeys(x))",
        "square_each": "[v * v for v in x]",
        "tail": "x[1:]",
    },
    "int": {
        "inc": "x + 1",
        "dec": "x - 1",
        "twice": "2 * x",
        "square": "x * x",
        "negate": "-x",
        "halve": "x // 2",
    },
}
PRELUDE = "\n".join(
    f"def {name}(x):\n    return {body}\n"
    for ops in OPERATIONS.values()
    for name, body in ops.items()
)
_IMPLEMENTATIONS: dict[str, Any] = {}
exec(PRELUDE, _IMPLEMENTATIONS)  # noqa: S102  # our own operation table, not model output


@dataclass(frozen=True)
class Spec:
    """A task's definition: the kind of value, the operations (innermost first), the inputs."""

    kind: str
    ops: tuple[str, ...]
    examples: tuple[Any, ...]
    tests: tuple[Any, ...]

    def to_json(self) -> str:
        return json.dumps(
            {"kind": self.kind, "ops": list(self.ops), "examples": list(self.examples),
             "tests": list(self.tests)},
            sort_keys=True, separators=(",", ":"),
        )  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> Spec:
        try:
            raw = json.loads(text)
            spec = cls(raw["kind"], tuple(raw["ops"]), tuple(raw["examples"]), tuple(raw["tests"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise TaskEnvironmentError(f"not a {NAME} task spec: {exc}") from exc
        unknown = [op for op in spec.ops if op not in OPERATIONS.get(spec.kind, {})]
        if unknown or not spec.ops:
            raise TaskEnvironmentError(f"{NAME} spec has unknown or no operations: {unknown}")
        return spec


def apply(ops: Sequence[str], value: Any) -> Any:
    """The hidden function: ``ops`` applied innermost first."""
    for op in ops:
        value = _IMPLEMENTATIONS[op](value)
    return value


def solution(ops: Sequence[str]) -> str:
    """A correct completion (function body) for ``ops``: ``    return upper(reverse(x))``."""
    call = "x"
    for op in ops:
        call = f"{op}({call})"
    return f"    return {call}\n"


def composition(completion: str, kind: str) -> tuple[str, ...] | None:
    """The operations of ``completion`` (innermost first) when it is nothing but ``return`` of
    nested calls of ``kind``'s operations on ``x``, at most :data:`TRUSTED_DEPTH` deep; else
    None (the sandbox runs it)."""
    try:
        tree = python_ast.parse(HEADER + completion)
    except (SyntaxError, ValueError):
        return None
    body = tree.body[0].body if len(tree.body) == 1 else []  # type: ignore[attr-defined]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    ops: list[str] = []
    node = body[0].value
    while isinstance(node, ast.Call):
        if (not isinstance(node.func, ast.Name) or node.func.id not in OPERATIONS[kind]
                or len(node.args) != 1 or node.keywords):  # fmt: skip
            return None
        ops.append(node.func.id)
        node = node.args[0]
    if not (isinstance(node, ast.Name) and node.id == "x") or len(ops) > TRUSTED_DEPTH:
        return None
    return tuple(reversed(ops))


_Programs = dict[tuple[str, int], list[tuple[str, ...]]]  # (kind, depth) → its programs


def program(kind: str, ops: Sequence[str]) -> str:
    """A program's name, ``kind:op>op`` (innermost first): held-out rule key and cluster id."""
    return f"{kind}:{'>'.join(ops)}"


def _split_programs(share: float) -> tuple[_Programs, _Programs]:
    """(training, held-out) programs per (kind, depth): in each stratum the ``share`` (at least
    one, never all) whose sha256 of :func:`program` sorts first."""
    training: _Programs = {}
    held: _Programs = {}
    for kind, ops in OPERATIONS.items():
        for depth in range(1, MAX_DEPTH + 1):
            programs = sorted(
                itertools.product(sorted(ops), repeat=depth),
                key=lambda p: hashlib.sha256(program(kind, p).encode()).hexdigest(),
            )
            cut = min(max(1, round(share * len(programs))), len(programs) - 1)
            held[kind, depth] = sorted(programs[:cut])
            training[kind, depth] = sorted(programs[cut:])
    return training, held


TRAINING_PROGRAMS, HELD_OUT_PROGRAMS = _split_programs(HELD_OUT_SHARE)
HELD_OUT = frozenset(program(k, p) for (k, _), ps in HELD_OUT_PROGRAMS.items() for p in ps)

_INPUTS: Mapping[str, Callable[[random.Random], Any]] = {
    "str": lambda r: "".join(r.choice("abcdeiouxyzABCDEO") for _ in range(r.randint(3, 7))),
    "list": lambda r: [r.randint(-9, 9) for _ in range(r.randint(3, 6))],
    "int": lambda r: r.randint(-20, 20),
}


class ProgramSynthesis:
    """The environment (registered as ``program-synthesis``)."""

    name = NAME
    extra_eval = "seen programs"

    def __init__(
        self, eval_size: int = 1000, limits: SandboxLimits | None = None,
        extra_size: int | None = None,
    ) -> None:  # fmt: skip
        """``eval_size`` tasks of held-out programs; ``extra_size`` (default: as many) of
        training programs with unseen inputs."""
        self.limits = limits or SandboxLimits()
        held, seen = HELD_OUT_PROGRAMS, TRAINING_PROGRAMS
        self._sets: dict[Split, list[Task]] = {
            "eval": [self._draw(random.Random(f"eval-{i}"), None, held) for i in range(eval_size)],
            "eval_extra": [
                self._draw(random.Random(f"eval-extra-{i}"), None, seen)
                for i in range(eval_size if extra_size is None else extra_size)
            ],
        }
        self._held_ids = {t.task_id for tasks in self._sets.values() for t in tasks}

    def reset(self, task: Task) -> str:
        spec = self._spec(task)
        shown = "".join(
            f"# f({json.dumps(x)}) == {json.dumps(apply(spec.ops, x))}\n" for x in spec.examples
        )
        return shown + HEADER

    def score(self, task: Task, completion: str) -> Score:
        spec = self._spec(task)
        expected = [repr(apply(spec.ops, x)) for x in spec.tests]
        started, ops = time.monotonic(), composition(completion, spec.kind)
        if ops is not None:  # our own operations: evaluated here, nothing of the model runs
            outputs: Sequence[str | None] = [repr(apply(ops, x)) for x in spec.tests]
            status, reason = OK, ""
            duration_ms = round((time.monotonic() - started) * 1000)
        else:
            run = run_program(HEADER + completion, FUNCTION, spec.tests, prelude=PRELUDE,
                              limits=self.limits)  # fmt: skip
            outputs, status, reason, duration_ms = (
                run.outputs,
                run.status,
                run.reason,
                run.duration_ms,
            )
        passed = sum(o == e for o, e in zip(outputs, expected, strict=True))
        return Score({"tests": passed / len(expected)}, passed, len(expected), status, reason,
                     duration_ms)  # fmt: skip

    def solution(self, task: Task) -> str:
        """A correct completion of ``task`` (the supervised warm-up's reference)."""
        return solution(self._spec(task).ops)

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        """``n`` tasks of ``split``: ``eval`` and ``eval_extra`` are fixed (``seed`` unused),
        ``train`` is seeded; TaskEnvironmentError when a fixed set has fewer than ``n``."""
        if split != "train":
            fixed = self._sets[split]
            if n > len(fixed):
                raise TaskEnvironmentError(f"the {split} set has {len(fixed)} tasks, asked {n}")
            return fixed[:n]
        rng = random.Random(f"train-{seed}")
        return [self._training(rng, None) for _ in range(n)]

    def task(self, rng: random.Random, depth: int) -> Task:
        """One training task of composition depth ``depth`` (1..3)."""
        if not 1 <= depth <= MAX_DEPTH:
            raise TaskEnvironmentError(f"depth {depth} is outside 1..{MAX_DEPTH}")
        return self._training(rng, depth)

    def held_out(self, task: Task) -> bool:
        """True for a task of a held-out program and for an ``eval``/``eval_extra`` task (by its
        id or by the id its spec hashes to)."""
        spec = self._spec(task)
        return (program(spec.kind, spec.ops) in HELD_OUT or task.task_id in self._held_ids
                or _task_id(spec.to_json()) in self._held_ids)  # fmt: skip

    def cluster(self, task: Task) -> str:
        """The task's program (``str:reverse>upper``): its tasks are not independent."""
        spec = self._spec(task)
        return program(spec.kind, spec.ops)

    def _training(self, rng: random.Random, depth: int | None) -> Task:
        while True:
            task = self._draw(rng, depth, TRAINING_PROGRAMS)
            if task.task_id not in self._held_ids:  # an eval_extra task: inputs held out
                return task

    def _draw(self, rng: random.Random, depth: int | None, programs: _Programs) -> Task:
        """A task of ``programs``: kind and depth uniform (depth given or drawn), then one of
        the stratum's programs, then distinct inputs."""
        kind = rng.choice(sorted(OPERATIONS))
        depth = depth or rng.randint(1, MAX_DEPTH)
        ops = rng.choice(programs[kind, depth])
        draw = _INPUTS[kind]
        inputs: list[Any] = []
        while len(inputs) < EXAMPLES + TESTS:
            value = draw(rng)
            if value not in inputs:
                inputs.append(value)
        spec = Spec(kind, ops, tuple(inputs[:EXAMPLES]), tuple(inputs[EXAMPLES:]))
        text = spec.to_json()
        return Task(_task_id(text), NAME, depth, text)

    def _spec(self, task: Task) -> Spec:
        if task.environment != NAME:
            raise TaskEnvironmentError(f"task {task.task_id} is for {task.environment!r}")
        return Spec.from_json(task.spec)


def _task_id(spec_json: str) -> str:
    return f"ps-{hashlib.sha256(spec_json.encode()).hexdigest()[:16]}"
