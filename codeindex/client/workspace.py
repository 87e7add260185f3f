"""The workspace walk: which files the index sees (docs/index.md, "Chunks").

A stat walk only: it never opens a file other than a .gitignore, so an unchanged re-sync costs
one stat per file. Binary files (a NUL in the first 8 KiB) are found when a file is read for
chunking (`read_text`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from codeindex.client.gitignore import Ignores

DEFAULT_MAX_FILE_SIZE = 1 << 20  # 1 MiB: bigger files are data or generated, not code to search
BINARY_PROBE = 8192  # git's heuristic: a NUL byte in the first 8 KiB means binary


@dataclass(frozen=True)
class WorkspaceFile:
    """A file to index: its workspace-relative POSIX path and the stat that keys its cache
    (no absolute Path kept: making 10,000 of them costs a third of an unchanged re-sync)."""

    rel: str
    size: int
    mtime_ns: int


@dataclass
class Walk:
    """The files to index, in a deterministic order (a folder's files by name, then its
    subfolders by name), and how many entries were skipped, by reason."""

    files: list[WorkspaceFile] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


def walk_workspace(
    root: Path, max_file_size: int = DEFAULT_MAX_FILE_SIZE, skip: Iterable[Path] = ()
) -> Walk:
    """Every regular file under `root` that no .gitignore (at any depth) ignores, outside
    `.git/` and the folders `skip` (the client's own state, should it lie inside), at most
    `max_file_size` bytes.

    A symlink to a file inside the workspace is indexed at the link's path; symlinks leading
    outside the workspace and symlinked folders are not followed (the folder's own files are
    walked where they are, and a link cannot make the walk loop). Unreadable folders are
    skipped and counted.
    """
    root = root.resolve()
    skipped = {str(p.resolve()) for p in skip}
    walk = Walk()
    stack: list[tuple[str, Ignores]] = [("", Ignores())]
    while stack:
        rel_dir, ignores = stack.pop()
        folder = root / rel_dir if rel_dir else root
        if str(folder) in skipped:
            walk.skipped["the index's own state"] += 1
            continue
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            walk.skipped["unreadable folder"] += 1
            continue
        ignores = _with_gitignore(ignores, folder, rel_dir, entries)
        subfolders: list[str] = []
        for entry in entries:
            if entry.name == ".git":
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            reason = _visit(root, entry, rel, ignores, max_file_size, walk, subfolders)
            if reason:
                walk.skipped[reason] += 1
        stack.extend((sub, ignores) for sub in reversed(subfolders))
    return walk


def _with_gitignore(
    ignores: Ignores, folder: Path, rel_dir: str, entries: list[os.DirEntry[str]]
) -> Ignores:
    for entry in entries:
        if entry.name == ".gitignore" and entry.is_file(follow_symlinks=False):
            try:
                text = (folder / ".gitignore").read_text("utf-8", errors="replace")
            except OSError:
                return ignores
            return ignores.with_file(rel_dir, text)
    return ignores


def _visit(
    root: Path,
    entry: os.DirEntry[str],
    rel: str,
    ignores: Ignores,
    max_file_size: int,
    walk: Walk,
    subfolders: list[str],
) -> str | None:
    """Files `entry` into `walk` or `subfolders`; the reason it is skipped, if it is."""
    try:
        if entry.is_symlink():
            target = Path(entry.path).resolve()
            if not target.is_relative_to(root):
                return "symlink outside the workspace"
            if target.is_dir():
                return "symlinked folder"
        is_dir = entry.is_dir()
        if ignores.ignored(rel, is_dir):
            return "ignored"
        if is_dir:
            subfolders.append(rel)
            return None
        if not entry.is_file():
            return "not a regular file"
        stat = entry.stat()
    except OSError:
        return "unreadable"
    if stat.st_size > max_file_size:
        return "over the size limit"
    walk.files.append(WorkspaceFile(rel, stat.st_size, stat.st_mtime_ns))
    return None


def read_text(path: Path) -> str | None:
    """The file's text, or None if it is binary (a NUL in the first 8 KiB) or not UTF-8."""
    data = path.read_bytes()
    if b"\0" in data[:BINARY_PROBE]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
