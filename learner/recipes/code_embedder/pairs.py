"""(query, code) pairs mined from Python sources: each function with a docstring gives the
docstring's first sentence (and its name in words) as the query and its source **without the
docstring** as the code, so the task is not string matching.

The benchmark's held-out packages are excluded by construction: a file under a folder (or a
module) named like one of them at any depth is never a training file (that catches vendored
copies such as ``pip/_vendor/rich``), and a training function whose code equals a held-out
function's is dropped (copies under other names).
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import sysconfig
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from codeindex.terms import code_terms
from ground import python_ast
from learner.errors import TrainingDataError

# Mid-size pure-Python packages in the platform's environment, used only by bench/index_quality.py.
HELD_OUT = ("rich", "click", "httpx", "starlette", "yaml", "jinja2")
# Folder and module names of them and their copies: httpx2 is a fork of httpx, _yaml pyyaml's
# C-binding shim; vendored copies keep their names.
HELD_OUT_NAMES = frozenset({*HELD_OUT, "httpx2", "_yaml"})
# Never sources: tests (fixtures, not documented functions) and build leftovers.
SKIPPED_DIRS = frozenset({"__pycache__", "test", "tests", "testing", "site-packages", "idlelib"})
MAX_FILE_BYTES = 1 << 20

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True)
class Function:
    """A function (or method) of a source file, docstring removed from ``code``."""

    name: str
    code: str
    docstring: str | None
    package: str  # the top folder or module under its root ("asyncio", "rich")
    location: str  # file:line, for reports

    @property
    def code_hash(self) -> str:
        """SHA-256 of the code with whitespace collapsed (reformatting is still a copy)."""
        return hashlib.sha256(" ".join(self.code.split()).encode()).hexdigest()


@dataclass(frozen=True)
class CodePair:
    query: str  # the docstring's first sentence
    name_query: str  # the function's name in words: "get_user_name" → "get user name"
    code: str
    package: str


def source_roots() -> list[Path]:
    """The standard library and this environment's site-packages (sysconfig)."""
    paths = sysconfig.get_paths()
    return sorted({Path(paths["stdlib"]), Path(paths["purelib"]), Path(paths["platlib"])})


def is_held_out(path: Path, root: Path) -> bool:
    """Whether ``path`` (a file under ``root``) belongs to a held-out package or a copy of one."""
    parts = path.relative_to(root).parts
    names = (*parts[:-1], Path(parts[-1]).stem)
    return any(name in HELD_OUT_NAMES for name in names)


def python_files(root: Path) -> Iterator[Path]:
    """``.py`` files under ``root`` in sorted order, test folders and oversized files skipped."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".dist-info"))
        for file in sorted(files):
            path = Path(folder) / file
            if file.endswith(".py") and path.stat().st_size <= MAX_FILE_BYTES:
                yield path


def functions_of(source: str, package: str, where: str) -> Iterator[Function]:
    """Every function and method in ``source`` (nothing when it does not parse), its
    docstring's lines removed from its code and the code dedented. Functions whose whole
    body is the docstring (stubs) and one-line ``def f(): "doc"`` forms are skipped."""
    try:
        tree = python_ast.parse(source)
    except (SyntaxError, ValueError):
        return
    lines = source.splitlines()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.end_lineno is None:
            continue
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        body = node.body
        docstring = ast.get_docstring(node)
        skip: range = range(0)
        if docstring is not None:
            first = body[0]
            if first.lineno == node.lineno or first.end_lineno is None or len(body) == 1:
                continue
            skip = range(first.lineno, first.end_lineno + 1)
        kept = [lines[n - 1] for n in range(start, node.end_lineno + 1) if n not in skip]
        yield Function(
            node.name, textwrap.dedent("\n".join(kept)), docstring, package, f"{where}:{start}"
        )


def first_sentence(docstring: str) -> str | None:
    """The first sentence of a docstring's first paragraph, or None when it is not a sentence
    of 3 to 40 words (a signature line, a directive, a one-word summary)."""
    paragraph = " ".join(docstring.strip().split("\n\n")[0].split())
    sentence = _SENTENCE_END.split(paragraph, maxsplit=1)[0].strip()
    words = sentence.split()
    if not 3 <= len(words) <= 40 or sentence[0] in ":.>@" or "(" in words[0]:
        return None
    return sentence


def name_words(name: str) -> str:
    return " ".join(code_terms(name)) or name


def mine_functions(
    roots: Iterable[Path], packages: Iterable[str] = ()
) -> tuple[list[Function], list[Function]]:
    """(training functions, held-out functions) of every Python file under ``roots``, or with
    ``packages`` only of those top-level packages or modules under them (``json``,
    ``email``...), the held-out packages always mined too so that copies of their code stay
    out of the training set. TrainingDataError for a package found under none of the roots."""
    roots = list(roots)
    training: list[Function] = []
    held_out: list[Function] = []
    wanted = set(packages)
    found: set[str] = set()
    for root in roots:
        for path in _source_files(root, wanted | HELD_OUT_NAMES if wanted else set()):
            relative = path.relative_to(root)
            package = relative.parts[0].removesuffix(".py")
            found.add(package)
            try:
                source = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            functions = functions_of(source, package, str(relative))
            (held_out if is_held_out(path, root) else training).extend(functions)
    if missing := sorted(wanted - found):
        raise TrainingDataError(
            f"pairs.packages names {missing}, with no Python file under any of "
            f"{[str(r) for r in roots]}; name top-level packages or modules of those folders"
        )
    return training, held_out


def _source_files(root: Path, packages: set[str]) -> Iterator[Path]:
    """``python_files(root)``, or with ``packages`` those of its folders and modules by name."""
    if not packages:
        yield from python_files(root)
        return
    for name in sorted(packages):
        module = root / f"{name}.py"
        if module.is_file() and module.stat().st_size <= MAX_FILE_BYTES:
            yield module
        if (root / name).is_dir() and name not in SKIPPED_DIRS:
            yield from python_files(root / name)


def training_pairs(
    training: Iterable[Function], held_out: Iterable[Function], *, max_per_package: int
) -> list[CodePair]:
    """Pairs of the documented training functions: deduplicated by code (whitespace-collapsed
    hash) and by query, every code that equals a held-out function's dropped, at most
    ``max_per_package`` per package (the biggest packages would crowd out the rest)."""
    seen = {f.code_hash for f in held_out}
    queries: set[str] = set()
    per_package: dict[str, int] = {}
    pairs: list[CodePair] = []
    for function in training:
        if function.docstring is None or function.code_hash in seen:
            continue
        query = first_sentence(function.docstring)
        if query is None or query in queries:
            continue
        if per_package.get(function.package, 0) >= max_per_package:
            continue
        seen.add(function.code_hash)
        queries.add(query)
        per_package[function.package] = per_package.get(function.package, 0) + 1
        pairs.append(CodePair(query, name_words(function.name), function.code, function.package))
    return pairs
