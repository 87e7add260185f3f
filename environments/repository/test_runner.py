"""Running a repository's code: the visible tests (``run_tests``) and the hidden tests (the
score), each in the sandbox on a throwaway copy of the episode's copy.

Both start ``environments/repo_runner.py`` (with ``sandbox_runner.py`` beside it, read-only)
through ``environments.sandbox.run_child``: the same boundary, limits, deadline, kill and
exit-signal verdict as a single-shot program. Each run gets a fresh work dir holding a copy of
the episode's files, removed afterwards, so the code can neither change the episode's copy nor
leave anything for a later run.

What the runner reports are *claims* (the code shares its interpreter): the parent checks their
shape, and anything malformed is a crash. Visible results are only shown to the model; hidden
results are ``repr`` strings compared here with ``expected``, which never enters the sandbox.
Every failure — a syntax error, a timeout, a crash, a refused operation — is an observation or
a failed score, never an exception (but SandboxUnavailableError where this machine cannot
isolate code and the operator did not trust it).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from environments.base import Score
from environments.episodes import ToolStatus
from environments.isolation import require_isolation
from environments.repository.spec import HiddenTest
from environments.repository.tools import ToolFailure, read_text, repo_files, resolve
from environments.sandbox import (
    CRASHED,
    EXCEPTION_NAME,
    REFUSED_EVENT,
    SYNTAX_ERROR,
    TIMEOUT,
    VERDICT,
    SandboxLimits,
    limit_verdict,
    matches,
    run_calls,
    run_child,
    syntax_error,
    work_dir,
)
from ground import python_ast

_HERE = Path(__file__).resolve().parent.parent
REPO_RUNNER = _HERE / "repo_runner.py"
_SHARED = (_HERE / "sandbox_runner.py",)  # imported by the runner, bound beside it
_MAX_DETAIL = 300  # as the runner cuts a failure's message
_OUTCOMES = ("passed", "failed", "error")
FULL_PASS_BONUS = 0.5


def run_tests(
    root: Path, selector: str, default_file: str, limits: SandboxLimits
) -> tuple[str, ToolStatus]:
    """Run the visible tests ``selector`` names on the copy at ``root``: "" (``default_file``),
    a test file, or ``file::test_name``. The observation is one ``FAILED name: detail`` or
    ``ERROR name: Exception`` line per test that did not pass, then the counts (``1 failed, 2
    passed``); the status is "ok" when the tests ran (whatever their outcome), "timeout" or
    "error" (a crash or a limit) otherwise. ToolFailure for a selector that names nothing."""
    module, names = _selection(root, selector or default_file)
    problem = _syntax(root)
    if problem is not None:
        return f"{problem}; no tests ran", "ok"
    isolation = require_isolation()
    request = {"mode": "tests", "module": module, "tests": names, "limits": asdict(limits)}
    with work_dir() as work:
        _copy_files(root, work)
        try:
            ended, reason = run_child(isolation, REPO_RUNNER, work, json.dumps(request), limits,
                                      _SHARED)  # fmt: skip
        except OSError as exc:
            return f"error: the sandbox failed to start ({exc.strerror})", "error"
        claims = None if ended is not None else _test_claims(work / VERDICT, names)
    if ended is not None:
        status: ToolStatus = "timeout" if ended == TIMEOUT else "error"
        return f"{ended}: {reason}; no test results", status
    if claims is None:
        return f"{CRASHED}: {reason}, no test results", "error"
    hit = limit_verdict(claims["limit"], None, limits)
    if hit is not None:
        return f"{hit[0]}: {hit[1]}; no test results", "error"
    lines = _report(claims, module)
    refused = limit_verdict(None, claims["refused"], limits)
    if refused is not None:
        lines.append(f"refused: {refused[1]}")
    return "\n".join(lines), "ok"


def score_hidden(root: Path, hidden: Sequence[HiddenTest], limits: SandboxLimits) -> Score:
    """The copy's score: each hidden test's ``module.function(*args)`` run in the sandbox, its
    ``repr`` compared here with ``expected``. Components ``tests`` (the pass fraction) and
    ``full_pass`` (:data:`FULL_PASS_BONUS` when every one passes); status and reason are the
    sandbox's. A copy that does not parse scores 0 without running."""
    started = time.monotonic()
    n = len(hidden)
    problem = _syntax(root)
    if problem is not None:
        status, reason = SYNTAX_ERROR, problem
        outputs: tuple[str | None, ...] = (None,) * n
    else:
        isolation = require_isolation()
        calls = [[h.module, h.function, list(h.args)] for h in hidden]
        request = {"mode": "calls", "calls": calls, "limits": asdict(limits)}
        with work_dir() as work:
            _copy_files(root, work)
            status, reason, outputs = run_calls(isolation, REPO_RUNNER, work, request, limits, n,
                                                _SHARED)  # fmt: skip
    passed = sum(o is not None and o == h.expected for o, h in zip(outputs, hidden, strict=True))
    components = {"tests": passed / n if n else 0.0,
                  "full_pass": FULL_PASS_BONUS if n and passed == n else 0.0}  # fmt: skip
    duration_ms = round((time.monotonic() - started) * 1000)
    return Score(components, passed, n, status, reason, duration_ms)


def _selection(root: Path, selector: str) -> tuple[str, list[str]]:
    """(module, test names) of ``selector``; ToolFailure when it names no test."""
    if not selector:
        raise ToolFailure("error: no test file; name one, e.g. run_tests(selector='test_x.py')")
    file, _, wanted = selector.partition("::")
    path = resolve(root, file)
    parts = file.removesuffix(".py").split("/")
    if not file.endswith(".py") or not all(p.isidentifier() for p in parts):
        raise ToolFailure(f"error: {file} is not a Python test file")
    try:
        tree = python_ast.parse(read_text(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ".".join(parts), []  # the syntax check reports it before anything runs
    names = [node.name for node in tree.body
             if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]  # fmt: skip
    if wanted:
        if wanted not in names:
            known = ", ".join(names) or "none"
            raise ToolFailure(f"error: no test {wanted} in {file}; its tests: {known}")
        names = [wanted]
    if not names:
        raise ToolFailure(f"error: no test functions in {file}")
    return ".".join(parts), names


def _syntax(root: Path) -> str | None:
    """The first Python file of the copy that does not parse, with the parser's line."""
    for rel in repo_files(root):
        if rel.endswith(".py"):
            problem = syntax_error(read_text(root / rel), rel)
            if problem is not None:
                return problem
    return None


def _copy_files(root: Path, work: Path) -> None:
    """The copy's regular files into the run's fresh work dir (links are left behind)."""
    for rel in repo_files(root):
        target = work / rel
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copyfile(root / rel, target, follow_symlinks=False)
        os.chmod(target, 0o600)


def _test_claims(verdict: Path, names: Sequence[str]) -> dict[str, Any] | None:
    """The runner's last line if it is well-formed claims for ``names``: every test in order
    (or none, with an import error or a limit); None otherwise (a crash)."""
    try:
        lines = verdict.read_bytes().decode("utf-8", errors="replace").splitlines()
        raw = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or set(raw) != {"results", "import_error", "limit", "refused"}:
        return None
    results = raw["results"]
    if not isinstance(results, list) or not all(_result(r) for r in results):
        return None
    ran = [r[0] for r in results]
    stopped = raw["import_error"] is not None or raw["limit"] is not None
    shaped = (
        (ran == list(names) and not stopped) or (ran == [] and stopped)
    ) and matches(EXCEPTION_NAME, raw["import_error"]) and raw["limit"] in (
        None, "memory", "output") and matches(REFUSED_EVENT, raw["refused"])  # fmt: skip
    return raw if shaped else None


def _result(entry: object) -> bool:
    """A well-formed ``[name, outcome, detail]``."""
    if not (isinstance(entry, list) and len(entry) == 3 and all(isinstance(e, str) for e in entry)):
        return False
    name, outcome, detail = entry
    if outcome not in _OUTCOMES or len(detail) > _MAX_DETAIL or not name.isidentifier():
        return False
    return outcome != "error" or matches(EXCEPTION_NAME, detail)


def _report(claims: dict[str, Any], module: str) -> list[str]:
    if claims["import_error"] is not None:
        return [f"ERROR importing {module}: {claims['import_error']}", "no tests ran"]
    lines, counts = [], {"failed": 0, "passed": 0, "error": 0}
    for name, outcome, detail in claims["results"]:
        counts[outcome] += 1
        if outcome != "passed":
            label = "FAILED" if outcome == "failed" else "ERROR"
            shown = " ".join(detail.split()) or "assertion failed"
            lines.append(f"{label} {name}: {shown}")
    summary = [f"{counts['failed']} failed"] if counts["failed"] else []
    summary.append(f"{counts['passed']} passed")
    if counts["error"]:
        summary.append(f"{counts['error']} error{'s' if counts['error'] > 1 else ''}")
    return [*lines, ", ".join(summary)]
