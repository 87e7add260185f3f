"""Lake Reward files → one immutable MDS window of the gate's training rows (DESIGN §8).

:func:`build_window` turns every reward lake file not yet in the manifest into ONE window, with
the crash safety and the one-writer lock of :mod:`learner.data.windows` (temp directory, rename,
then the manifest; adoption of a renamed window on the next start).

Held-out rows (:class:`~learner.recipes.gate.holdout.HoldoutSplit` of ``source_id``) never reach
MDS: they are the gate's data, read back from the lake with
:func:`learner.recipes.gate.reward_rows.load_rows`. Which windows a training run mixes is
:mod:`learner.data.replay`'s.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from learner.data.lake_rows import max_ms, min_ms
from learner.data.window_manifest import (
    WINDOW_RECORD_NAME,
    WindowRecord,
    record_json,
    write_manifest,
    write_window_atomically,
)
from learner.data.windows import dataset_lock, lake_ref, pending_files, recover, window_name
from learner.recipes.gate.holdout import HoldoutSplit
from learner.recipes.gate.reward_rows import Enrich, held_out_mask, read_table, to_rows
from learner.recipes.gate.samples import RewardRows, SampleSpec
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


def _write_window(root: Path, record: WindowRecord, spec: SampleSpec, rows: RewardRows) -> None:
    write_window_atomically(
        root / record.name, spec.columns(), spec.pack(rows), compression=record.compression,
        files={WINDOW_RECORD_NAME: record_json(record)},
    )  # fmt: skip
