"""Durable file writes: what survives a crash (or power loss) at any moment.

A new or renamed file is durable only once its data *and* its directory entry are on disk:
fsync the file, rename it into place, then fsync the directory.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def fsync_file(path: Path) -> None:
    """Flush ``path``'s data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` (creations, renames, deletions) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new file, whole."""
    write_file_durably(path, lambda out: out.write(data))


def write_file_durably(final: Path, write: Callable[[BinaryIO], object]) -> int:
    """Produce ``final`` with ``write(stream)`` so that it appears complete or not at all.

    Creates missing directories (each made durable in its parent), writes a temporary file
    beside ``final`` (:func:`temp_path`), fsyncs it, renames it over ``final`` and fsyncs the
    directory. A crash at any point leaves no new file (maybe an orphan temporary file) or the
    complete one; on an error the temporary file is removed and the error propagates. Returns
    the file's size in bytes.
    """
    make_dirs_durably(final.parent)
    temp = temp_path(final)
    try:
        with open(temp, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
            size = out.tell()
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)
    return size


def temp_path(final: Path) -> Path:
    """A fresh temporary name beside ``final``, ``.<name>.<token>.tmp``, unique per call (two
    writers never collide; no ``*.<ext>`` glob matches it)."""
    return final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")


def make_dirs_durably(directory: Path) -> None:
    """``mkdir -p`` that also fsyncs the parent of each directory it creates, so a rename into
    it cannot outlive the directory entry after a power loss."""
    missing: list[Path] = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)  # exist_ok: another writer may create it at the same time
        fsync_dir(path.parent)
