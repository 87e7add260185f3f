"""Parsing Python source into an AST from any thread.

CPython 3.11 builds the Python objects of an AST with a recursion counter kept per
interpreter, not per thread, so two threads parsing at once can fail with ``SystemError: AST
constructor recursion depth mismatch`` (cpython gh-106905): it stopped a rollout worker's
scoring pool in CI. Every parse the platform does from a thread pool (syntax checks, tools,
chunking) goes through :func:`parse`, one at a time; parsing the small files these are takes
microseconds, so the lock costs nothing that matters.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, serialised across threads (module docstring)."""
    with _LOCK:
        return ast.parse(source, filename)
