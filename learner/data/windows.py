"""MDS windows on disk, whatever their rows: names, pending lake files, crash recovery, the lock.

    mds/<dataset>/manifest.json          which lake files are in which window
    mds/<dataset>/w000003-1a2b3c4d5e6f/  one window: MDS shards + index.json + window.json

A window builder turns every lake file not yet in the manifest into ONE window, named
``w<seq>-<12 hex of sha256 over the sorted file names>`` (:func:`window_name`). Crash safety: the
window is written into ``.tmp-<name>-<token>/`` (fsynced), renamed into place, and only then
recorded in the manifest. On the next start (:func:`recover`), temp directories are deleted and a
renamed window missing from the manifest is adopted from its ``window.json``, so no lake file is
converted twice or skipped. One writer per dataset at a time (:func:`dataset_lock`: an flock on
``mds/<dataset>/.lock``). Which windows a training run mixes is :mod:`learner.data.replay`'s.
"""

from __future__ import annotations

import fcntl
import json
import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from hashlib import sha256
from pathlib import Path

from contracts.lake_layout import LakeFile, scan_topic
from learner.data.window_manifest import (
    TEMP_PREFIX,
    WINDOW_RECORD_NAME,
    LakeFileRef,
    Manifest,
    WindowRecord,
    read_manifest,
    write_manifest,
)
from learner.errors import LearnerError
from streams.topics import REWARDS_TOPIC

log = logging.getLogger(__name__)


def window_name(seq: int, files: Sequence[LakeFile]) -> str:
    """``w<seq, 6 digits>-<12 hex>``: the hash covers the sorted names of the window's files."""
    digest = sha256("\n".join(sorted(f.name for f in files)).encode()).hexdigest()
    return f"w{seq:06d}-{digest[:12]}"


def pending_files(lake: Path, manifest: Manifest, topic: str = REWARDS_TOPIC) -> list[LakeFile]:
    """Visible lake files of ``topic`` not in any window, ordered by (partition, first).

    A file that lake compaction merged from converted files is converted too: one whose offsets
    are all in converted files is skipped. One merged from converted and new files is skipped
    with a warning (its new rows are lost to training; converting it would train the others
    twice): compaction only merges hours closed for an hour, which a running learner has read.
    """
    done = manifest.converted()
    ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for t, partition, first, last in done:
        ranges.setdefault((t, partition), []).append((first, last))
    scan = scan_topic(lake, topic)
    pending = []
    for f in sorted(f for part in scan.files.values() for f in part):
        if (f.topic, f.partition, f.first, f.last) in done:
            continue
        converted = _converted_offsets(ranges.get((f.topic, f.partition), []), f.first, f.last)
        if converted == 0:
            pending.append(f)
        elif converted < f.last - f.first + 1:
            log.warning("%s holds converted and new offsets (a compaction merged them); "
                        "skipped so that no row is trained on twice", f.path)  # fmt: skip
    return pending


def _converted_offsets(ranges: Sequence[tuple[int, int]], first: int, last: int) -> int:
    """How many offsets of [first, last] the converted (disjoint) ``ranges`` cover."""
    return sum(max(0, min(last, b) - max(first, a) + 1) for a, b in ranges)


def recover(root: Path, dataset: str, reward_fn: str) -> Manifest:
    """Finish what a crashed window build left: delete temp directories, adopt complete
    windows that were renamed into place but are missing from the manifest. Returns the
    (possibly updated) manifest."""
    for temp in root.glob(f"{TEMP_PREFIX}*"):
        shutil.rmtree(temp, ignore_errors=True)
    manifest = read_manifest(root, dataset, reward_fn)
    known = {w.name for w in manifest.windows}
    adopted = manifest
    for directory in sorted(root.glob("w*")):
        record_path = directory / WINDOW_RECORD_NAME
        if directory.name in known or not record_path.exists():
            continue
        record = WindowRecord.from_json(json.loads(record_path.read_text()))
        adopted = adopted.with_window(record)
    if adopted is not manifest:
        write_manifest(root, adopted)
    return adopted


@contextmanager
def dataset_lock(root: Path, wait_s: float = 60.0) -> Iterator[None]:
    """Hold ``root/.lock`` (an exclusive flock), waiting up to ``wait_s`` for another holder: a
    learner building a window, or an erasure dropping windows (`learner.data.window_erasure`).
    LearnerError when it is still held after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    with open(root / ".lock", "w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as error:
                if time.monotonic() >= deadline:
                    raise LearnerError(
                        f"another process has held {root}/.lock for {wait_s:.0f}s (a learner "
                        "building a window, or `flywheel privacy erase`); run one learner per "
                        "dataset, or retry"
                    ) from error
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lake_ref(lake: Path, f: LakeFile) -> LakeFileRef:
    path = Path(f.path)
    relative = path.relative_to(lake) if path.is_relative_to(lake) else path
    return LakeFileRef(f.topic, f.partition, f.first, f.last, str(relative))
