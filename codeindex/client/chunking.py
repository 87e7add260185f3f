"""Cutting a file into the chunks the index embeds (docs/index.md, "Chunks").

Python (`.py`, `.pyi`) is cut along its syntax with `ast`: each top-level function and class
(with its decorators, its docstring and the comment lines right above it) is a chunk; a class
longer than `max_lines` is cut into its methods (and nested classes) plus the rest of its
lines (the header: signature, docstring, attributes) in runs; the module's remaining lines
form runs of at most `max_lines`. A file that does not parse, and any other text, is cut into
windows of `max_lines` lines. Chunks never share a line; blank lines at a chunk's edges are
left out and blank chunks dropped, so line ranges point at code.

Lines end at `\\n`, `\\r\\n` or `\\r` (as Python's parser counts them) and keep their endings,
so a chunk's text is exactly the file's bytes between its first and last line.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from codeindex.protocol import ChunkRef, chunk_hash
from ground import python_ast

DEFAULT_MAX_LINES = 60
PYTHON_SUFFIXES = (".py", ".pyi")
CHUNKER_VERSION = "1"  # bump when the cuts change: the client's chunk cache is keyed by it

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
Span = tuple[int, int]  # 1-based inclusive line range


@dataclass(frozen=True)
class Chunk:
    """A piece of a file: its text and its 1-based inclusive line range."""

    text: str
    start: int
    end: int

    @property
    def hash(self) -> str:
        return chunk_hash(self.text)

    def ref(self) -> ChunkRef:
        return ChunkRef(self.hash, self.start, self.end)


def split_lines(text: str) -> list[str]:
    """The file's lines with their endings (`"".join` gives `text` back)."""
    return _LINE.findall(text)


def lines_text(lines: Sequence[str], start: int, end: int) -> str:
    """The text of lines `start`..`end` (1-based, inclusive)."""
    return "".join(lines[start - 1 : end])


def chunk_file(rel: str, text: str, max_lines: int = DEFAULT_MAX_LINES) -> list[Chunk]:
    """The chunks of the file at workspace-relative path `rel` whose content is `text`, in file
    order. Python by syntax, anything else (or Python that does not parse) by line windows."""
    if max_lines < 1:
        raise ValueError(f"max_lines must be at least 1, not {max_lines}")
    lines = split_lines(text)
    spans = python_spans(text, lines, max_lines) if rel.endswith(PYTHON_SUFFIXES) else None
    if spans is None:
        spans = _windows(1, len(lines), max_lines)
    chunks = (_chunk(lines, start, end) for start, end in sorted(spans))
    return [c for c in chunks if c is not None]


def python_spans(text: str, lines: Sequence[str], max_lines: int) -> list[Span] | None:
    """The chunk spans of Python source `text`, or None if it does not parse."""
    try:
        with warnings.catch_warnings():  # invalid escapes and the like: not ours to report
            warnings.simplefilter("ignore")
            module = python_ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _spans(module.body, 1, len(lines), lines, max_lines, split_classes=True)


def _spans(
    body: Sequence[ast.stmt],
    lo: int,
    hi: int,
    lines: Sequence[str],
    max_lines: int,
    *,
    split_classes: bool,
) -> list[Span]:
    """Spans covering every line of `lo`..`hi`: one per definition in `body` (a long class cut
    further when `split_classes`), the other lines in runs of at most `max_lines`."""
    spans: list[Span] = []
    floor = lo
    for node in body:
        if not isinstance(node, _DEFS):
            continue
        start, end = _definition(node, lines, floor)
        if split_classes and isinstance(node, ast.ClassDef) and end - start + 1 > max_lines:
            spans.extend(_spans(node.body, start, end, lines, max_lines, split_classes=False))
        else:
            spans.append((start, end))
        floor = end + 1
    return spans + _runs(lo, hi, spans, max_lines)


def _definition(node: ast.stmt, lines: Sequence[str], floor: int) -> Span:
    """A definition's lines: its decorators, itself, and the comment lines right above it
    (none above `floor`)."""
    decorators = getattr(node, "decorator_list", [])
    start = min([node.lineno, *(d.lineno for d in decorators)])
    while start - 1 >= floor and lines[start - 2].lstrip().startswith("#"):
        start -= 1
    end = node.end_lineno if node.end_lineno is not None else node.lineno
    return start, end


def _runs(lo: int, hi: int, covered: Sequence[Span], max_lines: int) -> list[Span]:
    """The lines of `lo`..`hi` outside `covered`, as maximal runs cut into windows."""
    taken = [False] * (hi - lo + 1)
    for start, end in covered:
        for line in range(max(start, lo), min(end, hi) + 1):
            taken[line - lo] = True
    spans: list[Span] = []
    run_start: int | None = None
    for offset, is_taken in enumerate([*taken, True]):  # a sentinel closes the last run
        if not is_taken and run_start is None:
            run_start = lo + offset
        elif is_taken and run_start is not None:
            spans.extend(_windows(run_start, lo + offset - 1, max_lines))
            run_start = None
    return spans


def _windows(lo: int, hi: int, max_lines: int) -> list[Span]:
    return [(s, min(s + max_lines - 1, hi)) for s in range(lo, hi + 1, max_lines)]


def _chunk(lines: Sequence[str], start: int, end: int) -> Chunk | None:
    """The chunk of `start`..`end` without blank lines at its edges; None if all blank."""
    while start <= end and not lines[start - 1].strip():
        start += 1
    while end >= start and not lines[end - 1].strip():
        end -= 1
    if start > end:
        return None
    return Chunk(lines_text(lines, start, end), start, end)
