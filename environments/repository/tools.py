"""The repository episode's tools: their OpenAI definitions, the arguments' check, and the three
that are file operations of the platform on the episode's private copy (DESIGN §12).

``read_file``, ``search`` and ``edit`` never run the repository's code: they read and write the
copy's files here, confined to it — a path must be relative, without ``..``, with no symbolic
link anywhere along it, and name a regular file, or the call is an error observation. Only the
platform writes the copy (the model's code runs on throwaway copies of it,
environments/repository/test_runner.py), so a path checked here stays what it was checked as.
``run_tests`` and ``submit`` run code: they are the episode's, in the sandbox.

What each returns is the whole observation; the episode cuts it at the limit with the marker
(``environments.episodes.truncate``). A failure the model should read raises
:class:`ToolFailure`, whose message is the observation.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from codeindex.client.chunking import Chunk, chunk_file, split_lines
from codeindex.client.lexical import LexicalIndex, TermCounts, term_counts
from environments.sandbox import syntax_error


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> Any:
    parameters = {"type": "object", "properties": properties, "required": required}
    function = {"name": name, "description": description, "parameters": parameters}
    return {"type": "function", "function": function}


_STRING, _INTEGER = {"type": "string"}, {"type": "integer"}
# OpenAI function definitions, in the order the system prompt lists them.
TOOLS: tuple[dict[str, Any], ...] = (
    _tool("read_file", "Show a file of the repository, or its lines start..end (1-based, "
          "inclusive).", {"path": _STRING, "start": _INTEGER, "end": _INTEGER}, ["path"]),
    _tool("search", "The 3 places of the repository that best match the query (BM25): "
          "path:start-end: first line.", {"query": _STRING}, ["query"]),
    _tool("edit", "Replace the text old, which must occur exactly once in the file, by new.",
          {"path": _STRING, "old": _STRING, "new": _STRING}, ["path", "old", "new"]),
    _tool("run_tests", "Run the tests: '' (the task's test file), a test file, or "
          "file::test_name.", {"selector": _STRING}, []),
    _tool("submit", "End the episode: the repository as it is now is scored.", {}, []),
)  # fmt: skip
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOLS)
MAX_FILE_CHARS = 65_536  # the largest file edit writes (files here are a few hundred characters)
MAX_READ_BYTES = 1 << 20  # what read_file and search read of one file at most
SEARCH_HITS = 3


class ToolFailure(Exception):
    """A tool call that failed in a way the model should read: the message is the observation."""


def check_arguments(name: str, arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` do not fit tool ``name``'s definition (unknown or missing names, wrong
    JSON types; null counts as absent for an optional one), or None when they do."""
    parameters = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)
    properties: dict[str, dict[str, str]] = parameters["properties"]
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        takes = ", ".join(properties) or "no arguments"
        return f"{name} takes {takes}, not {', '.join(unknown)}"
    for key, schema in properties.items():
        value = arguments.get(key)
        if value is None:
            if key in parameters["required"]:
                return f"{name} needs '{key}'"
            continue
        wanted = schema["type"]
        fits = isinstance(value, str) if wanted == "string" else (
            isinstance(value, int) and not isinstance(value, bool))  # fmt: skip
        if not fits:
            return f"'{key}' must be {'a string' if wanted == 'string' else 'an integer'}"
    return None


def resolve(root: Path, path: str) -> Path:
    """``path`` inside the copy at ``root``, checked: relative, no ``..``, no symbolic link on
    the way, an existing regular file. ToolFailure saying which rule it broke otherwise."""
    if not path or "\0" in path:
        raise ToolFailure("error: path is empty")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise ToolFailure(f"error: {path} is absolute; paths are relative to the repository")
    if ".." in pure.parts:
        raise ToolFailure(f"error: {path} leaves the repository ('..' is refused)")
    current, info = root, None
    for part in pure.parts:
        current = current / part
        try:
            info = os.lstat(current)
        except OSError:
            raise ToolFailure(f"error: no such file: {path}") from None
        if stat.S_ISLNK(info.st_mode):
            raise ToolFailure(f"error: {path} is a symbolic link; links are refused")
    if info is None or not stat.S_ISREG(info.st_mode):
        raise ToolFailure(f"error: {path} is not a file")
    return current


def read_text(file: Path) -> str:
    """A checked file's text (its first :data:`MAX_READ_BYTES`), read without following a link."""
    fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_READ_BYTES).decode("utf-8", errors="replace")


def repo_files(root: Path) -> list[str]:
    """The copy's regular files (relative POSIX paths, sorted); links are neither listed nor
    followed."""
    found = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        dirs[:] = sorted(d for d in dirs if not (base / d).is_symlink())
        for name in files:
            info = os.lstat(base / name)
            if stat.S_ISREG(info.st_mode):
                found.append((base / name).relative_to(root).as_posix())
    return sorted(found)


def read_file(root: Path, path: str, start: int | None = None, end: int | None = None) -> str:
    """The file's text exactly as it is, without line numbers, so the model can copy lines into
    ``edit``'s ``old``. With ``start``/``end`` (1-based, inclusive, either may be left out),
    those lines only, after one header line ``[path lines a-b of n]`` (the header names the
    range; the lines below it are still the file's exact text)."""
    text = read_text(resolve(root, path))
    if start is None and end is None:
        return text if text else f"[{path} is empty]"
    lines = split_lines(text)  # as search counts them
    first, last = start or 1, min(end or len(lines), len(lines))
    if first < 1 or first > len(lines) or last < first:
        raise ToolFailure(f"error: no lines {first}-{end or '…'} in {path} ({len(lines)} lines)")
    return f"[{path} lines {first}-{last} of {len(lines)}]\n" + "".join(lines[first - 1 : last])


def search(root: Path, query: str) -> str:
    """The :data:`SEARCH_HITS` chunks of the copy (``codeindex.client.chunking``: Python cut by
    definitions) that score best for ``query`` under BM25 (``codeindex.client.lexical``), one a
    line: ``path:start-end: first line``. Identical chunks count once (the first place holds)."""
    if not query.strip():
        raise ToolFailure("error: the query is empty")
    counts: dict[str, TermCounts] = {}
    where: dict[str, tuple[str, Chunk]] = {}
    for rel in repo_files(root):
        for chunk in chunk_file(rel, read_text(root / rel)):
            if chunk.hash not in where:
                where[chunk.hash] = (rel, chunk)
                counts[chunk.hash] = term_counts(chunk.text)
    scores = LexicalIndex(counts).scores(query)
    best = sorted(scores, key=lambda h: (-scores[h], where[h][0], where[h][1].start))
    if not best:
        return f"no matches for {query!r}"
    hits = []
    for h in best[:SEARCH_HITS]:
        rel, chunk = where[h]
        first = chunk.text.splitlines()[0].strip()[:100]
        hits.append(f"{rel}:{chunk.start}-{chunk.end}: {first}")
    return "\n".join(hits)


def edit(root: Path, path: str, old: str, new: str) -> str:
    """Replace ``old``, which must occur exactly once in the file, by ``new``. Refused, with the
    file unchanged, when ``old`` is missing or occurs more than once, when the result is over
    :data:`MAX_FILE_CHARS`, or when a ``.py`` file would no longer parse (the parser's line)."""
    file = resolve(root, path)
    text = read_text(file)
    if not old:
        raise ToolFailure("error: old is empty; copy the exact text to replace from read_file")
    at = text.find(old)
    if at < 0:
        raise ToolFailure(f"error: old text not found in {path} (it must match exactly, "
                          "spaces included); nothing changed")  # fmt: skip
    if text.find(old, at + 1) >= 0:
        raise ToolFailure(f"error: old text occurs more than once in {path}; include more of "
                          "its lines so it is unique; nothing changed")  # fmt: skip
    result = text[:at] + new + text[at + len(old) :]
    if len(result) > MAX_FILE_CHARS:
        raise ToolFailure(f"error: {path} would exceed {MAX_FILE_CHARS} characters; nothing "
                          "changed")  # fmt: skip
    if path.endswith(".py"):
        problem = syntax_error(result, path)
        if problem is not None:
            raise ToolFailure(f"error: edit refused, {path} would not parse: {problem}; "
                              "nothing changed")  # fmt: skip
    _replace(file, result)
    return f"edited {path} at line {text.count(chr(10), 0, at) + 1}"


def _replace(file: Path, text: str) -> None:
    """Write ``text`` to a new file beside ``file`` and rename it over (never through a link)."""
    fresh = file.with_name(f".{file.name}.edit")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        os.replace(fresh, file)
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise
