"""Erasure in the MDS windows: drop every window built from a lake file that held a user's rows.

A window's rows keep no user, session or completion id (token ids, context vectors, rewards),
so one user's rows cannot be cut out of it: the whole window goes. Its lake files are then in no
window, so the next build converts them again, after the erasure has rewritten them without the
user's rows (the dropped window's other rows come back in the new one, under a new name).

The caller holds :func:`windows_locked` from before it drops the windows until it has rewritten
the lake files, so that no learner builds a window from a file in between. Dropping is crash
safe: the directory is first renamed to ``.tmp-erased-<name>`` (what :func:`recover` deletes and
never adopts), then the manifest is rewritten without it, then the directory is deleted; an
erasure run again finds the same lake files (not rewritten yet) and finishes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Set
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path

from learner.data.window_manifest import MANIFEST_NAME, TEMP_PREFIX, read_manifest, write_manifest
from learner.data.windows import dataset_lock
from learner.errors import LearnerError

FileKey = tuple[str, int, int, int]  # a lake file: (topic, partition, first, last)


def datasets(mds_root: Path) -> list[Path]:
    """The dataset directories under ``mds_root`` (those with a manifest)."""
    return sorted(p.parent for p in mds_root.glob(f"*/{MANIFEST_NAME}"))


@contextmanager
def windows_locked(mds_root: Path, wait_s: float = 120.0) -> Iterator[None]:
    """Hold every dataset's lock (waiting up to ``wait_s`` each for a build to finish)."""
    with ExitStack() as stack:
        for root in datasets(mds_root):
            stack.enter_context(dataset_lock(root, wait_s))
        yield


def drop_windows(mds_root: Path, files: Set[FileKey]) -> list[str]:
    """Drop every window (of any dataset under ``mds_root``) holding one of ``files``; returns
    ``<dataset>/<window>`` of each. Call it inside :func:`windows_locked`. LearnerError for an
    unreadable manifest."""
    dropped: list[str] = []
    for root in datasets(mds_root):
        try:
            head = json.loads((root / MANIFEST_NAME).read_text())
            manifest = read_manifest(root, head["dataset"], head["reward_fn"])
        except (ValueError, KeyError, TypeError) as error:
            raise LearnerError(
                f"{root / MANIFEST_NAME} is not a readable manifest ({error}); restore it"
            ) from error
        gone = [w.name for w in manifest.windows if any(f.key in files for f in w.files)]
        for name in gone:
            if (root / name).exists():
                (root / name).rename(root / f"{TEMP_PREFIX}erased-{name}")
        if not gone:
            continue
        kept = tuple(w for w in manifest.windows if w.name not in gone)
        write_manifest(root, replace(manifest, windows=kept))
        for name in gone:
            shutil.rmtree(root / f"{TEMP_PREFIX}erased-{name}", ignore_errors=True)
            dropped.append(f"{root.name}/{name}")
    return dropped
