"""Lake Reward files → immutable MDS windows, each lake file converted exactly once (DESIGN §8).

    mds/<dataset>/manifest.json          which lake files are in which window
    mds/<dataset>/w000003-1a2b3c4d5e6f/  one window: MDS shards + index.json + window.json

:func:`build_window` turns every reward lake file not yet in the manifest into ONE window, named
``w<seq>-<12 hex of sha256 over the sorted file names>``. Crash safety: the window is written
into ``.tmp-<name>-<token>/`` (fsynced), renamed into place, and only then recorded in the
manifest. On the next start, temp directories are deleted and a renamed window missing from the
manifest is adopted from its ``window.json``, so no lake file is converted twice or skipped.
One writer per dataset at a time (an flock on ``mds/<dataset>/.lock`` enforces it).

Held-out rows (:class:`~learner.holdout.HoldoutSplit` of ``source_id``) never reach MDS: they are
the gate's data, read back from the lake with :func:`learner.lake_rows.load_rows`. Which windows
a training run mixes is :mod:`learner.replay`'s.
"""

from __future__ import annotations

import fcntl
import json
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from hashlib import sha256
from pathlib import Path

from contracts.lake_layout import LakeFile, scan_topic
from learner.errors import LearnerError
from learner.holdout import HoldoutSplit
from learner.lake_rows import Enrich, held_out_mask, max_ms, min_ms, read_table, to_rows
from learner.samples import RewardRows, SampleSpec
from learner.window_manifest import (
    TEMP_PREFIX,
    WINDOW_RECORD_NAME,
    LakeFileRef,
    Manifest,
    WindowRecord,
    read_manifest,
    record_json,
    write_manifest,
    write_window_atomically,
)
from policies.context import CONTEXT_DIM, CONTEXT_SPEC
from streams.topics import REWARDS_TOPIC


def build_window(
    lake: Path,
    mds_root: Path,
    dataset: str,
    reward_fn: str,
    *,
    topic: str = REWARDS_TOPIC,
    split: HoldoutSplit | None = None,
    rows_per_sample: int = 256,
    compression: str | None = None,
    enrich: Enrich | None = None,
    max_files: int | None = None,
    context_spec: str = CONTEXT_SPEC,
    context_dim: int = CONTEXT_DIM,
    model_name: str | None = None,
) -> WindowRecord | None:
    """Convert the lake files of ``topic`` not yet in the manifest into one new MDS window.

    Only SUGGESTION rows of ``reward_fn`` whose ``source_id`` is not held out go into MDS; every
    scanned file is recorded, whatever it held. ``compression``: None or an MDS codec such as
    "zstd". ``enrich`` may add numeric columns (recorded as the window's ``extra_columns``).
    ``max_files`` caps the files per window (oldest offsets first). ``model_name`` keeps only
    rows a version of that model served (the lake holds every model's). Returns the new window's
    record, or None when there is nothing new. Raises LearnerError for a manifest of another
    dataset or reward function, rows with a bad context, or a non-numeric enriched column.
    """
    split = split or HoldoutSplit()
    root = mds_root / dataset
    root.mkdir(parents=True, exist_ok=True)
    with dataset_lock(root):
        manifest = recover(root, dataset, reward_fn)
        new = pending_files(lake, manifest, topic)[:max_files]
        if not new:
            return None
        seq = manifest.next_seq()
        name = window_name(seq, new)
        table, skipped = read_table(new, reward_fn, split, enrich, model_name)
        held = held_out_mask(table)
        # Only the training rows are converted, and without their ids (MDS does not hold them).
        train = to_rows(table, context_dim, keep=~held, ids=False)
        spec = SampleSpec(rows_per_sample, context_dim, train.extra_columns)
        record = WindowRecord(
            name=name,
            seq=seq,
            reward_fn=reward_fn,
            context_spec=context_spec,
            files=tuple(lake_ref(lake, f) for f in new),
            rows=len(train),
            heldout_rows=int(held.sum()),
            skipped_rows=skipped,
            samples=-(-len(train) // rows_per_sample),
            rows_per_sample=rows_per_sample,
            context_dim=context_dim,
            extra_columns=train.extra_columns,
            compression=compression,
            min_event_time_ms=min_ms(table, "event_time"),
            max_event_time_ms=max_ms(table, "event_time"),
            max_attributed_ms=max_ms(table, "attributed_at"),
            created_at=datetime.now(UTC).isoformat(),
        )
        _write_window(root, record, spec, train)
        write_manifest(root, manifest.with_window(record))
        return record


def window_name(seq: int, files: Sequence[LakeFile]) -> str:
    """``w<seq, 6 digits>-<12 hex>``: the hash covers the sorted names of the window's files."""
    digest = sha256("\n".join(sorted(f.path.name for f in files)).encode()).hexdigest()
    return f"w{seq:06d}-{digest[:12]}"


def pending_files(lake: Path, manifest: Manifest, topic: str = REWARDS_TOPIC) -> list[LakeFile]:
    """Visible lake files of ``topic`` not in any window, ordered by (partition, first)."""
    done = manifest.converted()
    scan = scan_topic(lake, topic)
    files = [f for part in scan.files.values() for f in part]
    return sorted(f for f in files if (f.topic, f.partition, f.first, f.last) not in done)


def recover(root: Path, dataset: str, reward_fn: str) -> Manifest:
    """Finish what a crashed :func:`build_window` left: delete temp directories, adopt complete
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
def dataset_lock(root: Path) -> Iterator[None]:
    with open(root / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise LearnerError(
                f"another process is building a window of {root}; run one learner per dataset."
            ) from error
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lake_ref(lake: Path, f: LakeFile) -> LakeFileRef:
    path = f.path.relative_to(lake) if f.path.is_relative_to(lake) else f.path
    return LakeFileRef(f.topic, f.partition, f.first, f.last, str(path))


def _write_window(root: Path, record: WindowRecord, spec: SampleSpec, rows: RewardRows) -> None:
    write_window_atomically(
        root / record.name, spec.columns(), spec.pack(rows), compression=record.compression,
        files={WINDOW_RECORD_NAME: record_json(record)},
    )  # fmt: skip
