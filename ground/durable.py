"""Durable file writes: what survives a crash (or power loss) at any moment.

A new or renamed file is durable only once its data *and* its directory entry are on disk:
fsync the file, rename it into place, then fsync the directory.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


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
    """Replace ``path`` with ``data`` atomically: readers see the old or the new file, whole.

    Writes a temporary file beside it (``.<name>.<token>.tmp``), fsyncs it, renames it over
    ``path`` and fsyncs the directory. The temporary file is removed if anything fails.
    """
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
