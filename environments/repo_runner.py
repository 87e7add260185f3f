"""The repository sandbox's child: ``python -I -S -B repo_runner.py`` with a JSON request on
stdin, run inside the operating-system boundary with a throwaway copy of the episode's repository
as its work dir (environments/repository/test_runner.py starts it).

It sets the same resource limits and audit hook as ``sandbox_runner.py`` (bound read-only beside
it and imported from there), puts the work dir on ``sys.path`` and answers one of two requests:

* ``{"mode": "tests", "module": "test_text", "tests": ["test_shout", …]}``: import the test
  module and call each named ``test_*`` function; per test ``[name, "passed" | "failed" |
  "error", detail]`` where ``detail`` is the AssertionError's message (or, when it has none, the
  failing line of the test file) or the class name of what else was raised;
* ``{"mode": "calls", "calls": [[module, function, args], …]}``: per call ``repr(f(*args))`` or
  the class name of what it raised, in ``sandbox_runner``'s claims shape, so the parent
  validates and decides them with the same code.

It writes one line of *claims* to ``.verdict``; the repository's code runs in this interpreter
and could have written anything, so the parent validates the shape, decides the status itself,
and compares hidden outputs with expectations that never enter the sandbox. Standard library
only (``-S``: no site).
"""

import errno
import importlib
import json
import linecache
import os
import sys
import traceback
from typing import Any

_MAX_REPR = 4096  # as sandbox_runner's: an output longer than this is wrong for any task here
_MAX_DETAIL = 300  # a failure's message, cut


class _Limit(Exception):
    """A resource limit was hit: the run stops (``kind`` is "memory" or "output")."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def _limit(exc: BaseException) -> str | None:
    """The limit ``exc`` means, if any (Python ignores SIGXFSZ: an oversized write fails)."""
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return "output"
    return None


def _failure_detail(exc: AssertionError, test_file: str) -> str:
    """The assertion's message, or the test file's line that failed when it has none."""
    message = str(exc)
    if message:
        return message[:_MAX_DETAIL]
    line = ""
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == test_file:
            line = linecache.getline(test_file, lineno).strip()
    return line[:_MAX_DETAIL]


def _empty(request: dict[str, Any]) -> dict[str, Any]:
    """The claims' shape with nothing run (the parent checks it: one entry per call)."""
    if request["mode"] == "tests":
        return {"results": [], "import_error": None, "limit": None}
    n = len(request["calls"])
    return {"outputs": [None] * n, "errors": [None] * n, "define_error": None, "limit": None}


def _tests(request: dict[str, Any]) -> dict[str, Any]:
    claims = _empty(request)
    try:
        module = importlib.import_module(request["module"])
    except BaseException as exc:  # code may raise anything at import, SystemExit too
        if (kind := _limit(exc)) is not None:
            raise _Limit(kind) from None
        claims["import_error"] = _name(exc)
        return claims
    test_file = getattr(module, "__file__", None) or ""
    for name in request["tests"]:
        try:
            getattr(module, name)()
            claims["results"].append([name, "passed", ""])
        except AssertionError as exc:
            claims["results"].append([name, "failed", _failure_detail(exc, test_file)])
        except BaseException as exc:
            if (kind := _limit(exc)) is not None:
                raise _Limit(kind) from None
            claims["results"].append([name, "error", _name(exc)])
    return claims


def _calls(request: dict[str, Any]) -> dict[str, Any]:
    claims = _empty(request)
    for i, (module_name, function, args) in enumerate(request["calls"]):
        try:
            module = importlib.import_module(module_name)
            claims["outputs"][i] = repr(getattr(module, function)(*args))[:_MAX_REPR]
        except BaseException as exc:
            if (kind := _limit(exc)) is not None:
                raise _Limit(kind) from None
            claims["errors"][i] = _name(exc)
    return claims


def main() -> None:
    request = json.loads(sys.stdin.read())
    sys.dont_write_bytecode = True
    sys.setrecursionlimit(2000)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    shared = importlib.import_module("sandbox_runner")  # before the work dir is on the path
    work = os.path.realpath(os.getcwd())
    sys.path[0] = work  # the repository's modules, and nothing beside the runner, import
    refused: list[str] = []
    verdict = os.open(".verdict", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    shared.apply_limits(request["limits"])
    shared.install_hook(work, refused)
    run = _tests if request["mode"] == "tests" else _calls
    try:
        claims = run(request)
    except _Limit as hit:
        claims = _empty(request)
        claims["limit"] = hit.kind
    claims["refused"] = refused[0] if refused else None
    shared.write_claims(verdict, claims)


if __name__ == "__main__":
    main()
