"""Parsing from many threads at once (CPython 3.11's AST builder is not thread-safe)."""

from __future__ import annotations

import ast
import gc
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from ground import python_ast

# Deep enough that building its AST objects takes many recursive steps, where another thread
# parsing at the same moment broke the interpreter-wide depth count (SystemError).
NESTED_CALL = "(" * 60 + "x" + ")" * 60
SOURCE = f"def f(x):\n    return {NESTED_CALL}\ny = {'[' * 40}{']' * 40}\n"


class _Garbage:
    """Cyclic garbage with a finalizer: collected mid-parse, it runs Python code, so another
    thread can take the interpreter there (how the race showed up in CI)."""

    def __del__(self) -> None:
        time.sleep(0)


@pytest.fixture
def switchy() -> Iterator[None]:
    """Frequent thread switches and collections while a thread makes garbage (a bounded
    amount: finalizers on every collection make the interpreter slow)."""
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(5)

    def churn() -> None:
        for _ in range(50_000):
            a, b = _Garbage(), _Garbage()
            a.other, b.other = b, a  # type: ignore[attr-defined]

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)


def test_parses_from_many_threads_agree_with_ast_parse(switchy: None) -> None:
    want = ast.dump(ast.parse(SOURCE))
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: ast.dump(python_ast.parse(SOURCE)), range(1000)))
    assert set(got) == {want}  # without the lock, ~1 in 2,000 raised SystemError here


def test_a_syntax_error_is_raised_as_ast_parse_raises_it() -> None:
    with pytest.raises(SyntaxError):
        python_ast.parse("def f(:\n", "<bad>")
