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
the gate's data, read back from the lake with :func:`load_rows`.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import sha256
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flywheel.durable import fsync_dir
from learner.errors import LearnerError
from learner.holdout import HoldoutSplit
from learner.samples import RewardRows, SampleSpec
from learner.window_manifest import (
    WINDOW_RECORD_NAME,
    LakeFileRef,
    Manifest,
    WindowRecord,
    fsync_tree,
    read_manifest,
    record_json,
    write_manifest,
)
from processors.lake.layout import LakeFile, scan_topic
from simulator.context import CONTEXT_DIM, CONTEXT_SPEC

REWARDS_TOPIC = "rewards"
TEMP_PREFIX = ".tmp-"
Enrich = Callable[[pa.Table], pa.Table]  # adds point-in-time feature columns to reward rows
_BASE_COLUMNS = (
    "source_id", "context", "decision", "propensity", "reward", "model_version", "event_time",
    "attributed_at",
)  # fmt: skip


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
    with _dataset_lock(root):
        manifest = recover(root, dataset, reward_fn)
        new = pending_files(lake, manifest, topic)[:max_files]
        if not new:
            return None
        seq = manifest.next_seq()
        name = window_name(seq, new)
        table, skipped = _read_table(new, reward_fn, split, enrich, model_name)
        held = _held_out(table)
        # Only the training rows are converted, and without their ids (MDS does not hold them).
        train = _to_rows(table, context_dim, keep=~held, ids=False)
        spec = SampleSpec(rows_per_sample, context_dim, train.extra_columns)
        record = WindowRecord(
            name=name,
            seq=seq,
            reward_fn=reward_fn,
            context_spec=context_spec,
            files=tuple(_ref(lake, f) for f in new),
            rows=len(train),
            heldout_rows=int(held.sum()),
            skipped_rows=skipped,
            samples=-(-len(train) // rows_per_sample),
            rows_per_sample=rows_per_sample,
            context_dim=context_dim,
            extra_columns=train.extra_columns,
            compression=compression,
            min_event_time_ms=_min_ms(table, "event_time"),
            max_event_time_ms=_max_ms(table, "event_time"),
            max_attributed_ms=_max_ms(table, "attributed_at"),
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
def _dataset_lock(root: Path) -> Iterator[None]:
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


def _ref(lake: Path, f: LakeFile) -> LakeFileRef:
    path = f.path.relative_to(lake) if f.path.is_relative_to(lake) else f.path
    return LakeFileRef(f.topic, f.partition, f.first, f.last, str(path))


def _write_window(root: Path, record: WindowRecord, spec: SampleSpec, rows: RewardRows) -> None:
    from streaming import MDSWriter  # imported late: importing streaming pulls in torchvision

    temp = root / f"{TEMP_PREFIX}{record.name}-{uuid.uuid4().hex[:8]}"
    try:
        with MDSWriter(out=str(temp), columns=spec.columns(), compression=record.compression) as w:
            for sample in spec.pack(rows):
                w.write(sample)
        # A plain write: fsync_tree makes every file of the window durable, once, before the
        # rename that makes the window visible.
        (temp / WINDOW_RECORD_NAME).write_text(record_json(record))
        fsync_tree(temp)
        temp.rename(root / record.name)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    fsync_dir(root)


def _read_file(
    path: Path, columns: list[str] | None, reward_fn: str, model: str | None
) -> tuple[pa.Table, int]:
    """One lake file's suggestion rows of ``reward_fn`` (and ``model``), ``columns`` only, and
    the number of rows the file holds."""
    wanted = {"source": "SUGGESTION", "reward_fn": reward_fn}
    if model is not None:
        wanted["model_name"] = model
    # Low-cardinality strings as dictionaries: filtering compares a few codes, not every string.
    codes = None if columns is None else [*wanted, "decision"]
    with pq.ParquetFile(path, read_dictionary=codes) as parquet:
        # A filter column whose statistics prove that every row matches is neither read nor
        # compared (the usual case: a lake file holds one source, reward function and model).
        checks = {c: v for c, v in wanted.items() if not _all_rows_equal(parquet.metadata, c, v)}
        table = parquet.read(columns=None if columns is None else [*columns, *checks])
    total = table.num_rows
    keep = None
    for name, value in checks.items():
        equal = pc.equal(table.column(name), value)
        keep = equal if keep is None else pc.and_(keep, equal)
    # Filtering copies every column: skip it when all rows are kept.
    if keep is not None and pc.all(keep, skip_nulls=False).as_py() is not True:
        table = table.filter(keep)
    return (table if columns is None else table.select(columns)), total


def _all_rows_equal(metadata: pq.FileMetaData, column: str, value: str) -> bool:
    """True when the statistics of every row group prove that ``column`` is ``value`` in every
    row (min == max == value, no nulls); False when they do not, or are missing."""
    paths = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if column not in paths:
        return False
    index = paths.index(column)
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max or not stats.has_null_count:
            return False
        # min and max bound the values even where a writer truncated them.
        if stats.null_count != 0 or stats.min != value or stats.max != value:
            return False
    return True


def _read_table(
    files: Sequence[LakeFile] | Sequence[Path],
    reward_fn: str,
    split: HoldoutSplit,
    enrich: Enrich | None,
    model_name: str | None = None,
) -> tuple[pa.Table, int]:
    """Suggestion rows of ``reward_fn`` (and ``model_name``, if given) in (partition, offset)
    order with a ``_held_out`` column (and ``enrich``'s columns), and the number of other rows
    skipped.

    Read with pyarrow file by file (files come sorted by partition and first offset, so rows stay
    in offset order); list columns like ``context`` are read zero-copy, several times faster
    than through DuckDB. Files of older schema versions are unified by column name.
    """
    paths = [f.path if isinstance(f, LakeFile) else f for f in files]
    columns = None if enrich is not None else list(_BASE_COLUMNS)
    total = 0
    parts = []
    for path in paths:
        part, rows = _read_file(path, columns, reward_fn, model_name)
        parts.append(part)
        total += rows
    if not parts:
        raise LearnerError("no lake files to read; pass a window or at least one file.")
    table = pa.concat_tables(parts, promote_options="default")
    skipped = total - table.num_rows
    table = table.append_column("_held_out", pa.array(split.mask(table.column("source_id"))))
    if enrich is not None:
        before = set(table.column_names)
        table = enrich(table)
        extra = [c for c in table.column_names if c not in before]
        table = table.replace_schema_metadata({b"extra_columns": ",".join(extra).encode()})
    return table, skipped


def _epoch_ms(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Epoch milliseconds of a timestamp column of any unit (DuckDB returns microseconds)."""
    return pc.cast(pc.cast(column, pa.timestamp("ms", tz="UTC")), pa.int64())


def _max_ms(table: pa.Table, column: str) -> int | None:
    """Largest timestamp of ``column`` in epoch ms (None for an empty table)."""
    return _bound_ms(table, column, pc.max)


def _min_ms(table: pa.Table, column: str) -> int | None:
    """Smallest timestamp of ``column`` in epoch ms (None for an empty table)."""
    return _bound_ms(table, column, pc.min)


def _bound_ms(table: pa.Table, column: str, bound: Callable[..., pa.Scalar]) -> int | None:
    if table.num_rows == 0:
        return None
    value = bound(_epoch_ms(table.column(column))).as_py()
    return None if value is None else int(value)


def _held_out(table: pa.Table) -> np.ndarray:
    """(n,) bool: the ``_held_out`` column of a table read by :func:`_read_table`."""
    return np.asarray(table.column("_held_out").to_numpy(zero_copy_only=False), dtype=bool)


def _to_rows(
    table: pa.Table, context_dim: int, *, keep: np.ndarray | None = None, ids: bool = True
) -> RewardRows:
    """RewardRows of a table read by :func:`_read_table`: all rows, or those where ``keep``
    (n,) bool is True, in table order. With ``ids=False`` source ids are not converted to
    Python strings (``source_id`` holds None). LearnerError for bad contexts or extra columns.
    """
    n = table.num_rows
    contexts = table.column("context")
    lengths = pc.list_value_length(contexts)
    if n and (pc.min(lengths).as_py() != context_dim or pc.max(lengths).as_py() != context_dim):
        raise LearnerError(
            f"reward rows have contexts of {pc.min(lengths).as_py()}..{pc.max(lengths).as_py()} "
            f"values (or none), expected {context_dim}; rows of another context spec need "
            "their own dataset."
        )
    metadata = table.schema.metadata or {}
    extra_names = tuple(c for c in metadata.get(b"extra_columns", b"").decode().split(",") if c)

    def rows_of(values: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
        # Selecting copies, so the cast can reuse it; all rows are copied too (writable arrays).
        if keep is None:
            return values.astype(dtype)
        return np.asarray(values[keep]).astype(dtype, copy=False)

    def column(name: str, dtype: type[np.generic]) -> np.ndarray:
        return rows_of(np.asarray(table.column(name).to_numpy(zero_copy_only=False)), dtype)

    extra = None
    if extra_names:
        try:
            extra = np.stack([column(c, np.float32) for c in extra_names], axis=1)
        except (ValueError, TypeError, pa.ArrowException) as error:
            raise LearnerError(
                f"enriched columns {extra_names} must be numeric without nulls ({error}); "
                "fill or drop them in the enrich hook."
            ) from error
    flat = pc.list_flatten(contexts).to_numpy(zero_copy_only=False)
    shown = pc.equal(table.column("decision"), "SHOWN").to_numpy(zero_copy_only=False)
    event_time = _epoch_ms(table.column("event_time")).to_numpy(zero_copy_only=False)
    m = n if keep is None else int(np.count_nonzero(keep))
    return RewardRows(
        source_id=column("source_id", np.object_) if ids else np.empty(m, dtype=object),
        context=rows_of(flat.reshape(n, context_dim), np.float32),
        shown=rows_of(shown, np.bool_),
        propensity=column("propensity", np.float64),
        reward=column("reward", np.float64),
        model_version=column("model_version", np.int64),
        event_time_ms=rows_of(event_time, np.int64),
        extra=extra,
        extra_columns=extra_names,
    )


def load_rows(
    lake: Path,
    source: WindowRecord | Sequence[LakeFile] | Sequence[Path],
    *,
    reward_fn: str,
    holdout: bool | None,
    split: HoldoutSplit | None = None,
    enrich: Enrich | None = None,
    context_dim: int = CONTEXT_DIM,
) -> RewardRows:
    """Suggestion reward rows of ``reward_fn`` read from lake files (a window's, or given).

    ``holdout``: True → only held-out rows (the gate's data), False → only training rows (what
    the window's MDS holds), None → all. Rows come in file order, each file in offset order. Raises
    LearnerError for missing files or bad contexts.
    """
    if isinstance(source, WindowRecord):
        paths = [lake / f.path for f in source.files]
    else:
        paths = [f.path if isinstance(f, LakeFile) else Path(f) for f in source]
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise LearnerError(f"lake files {missing[:3]} are missing; was the lake moved or pruned?")
    if not paths:
        raise LearnerError("load_rows got no lake files; pass a window or at least one file.")
    table, _ = _read_table(paths, reward_fn, split or HoldoutSplit(), enrich)
    if holdout is None:
        return _to_rows(table, context_dim)
    held = _held_out(table)
    return _to_rows(table, context_dim, keep=held if holdout else ~held)


@dataclass(frozen=True)
class StreamChoice:
    """One window in a training run's mix: its MDS directory and its sampling proportion."""

    window: str
    local: Path
    proportion: float
    samples: int


def plan_streams(
    mds_root: Path,
    dataset: str,
    reward_fn: str,
    *,
    new_windows: int = 1,
    replay_fraction: float = 0.3,
    max_replay_windows: int = 8,
) -> list[StreamChoice]:
    """The mix of a training run: the newest ``new_windows`` windows share
    ``1 - replay_fraction`` and up to ``max_replay_windows`` older ones share ``replay_fraction``,
    each group split in proportion to its windows' rows. Windows without samples are left out;
    with no older windows the new ones get everything. LearnerError when there is no data.
    """
    if not 0.0 <= replay_fraction < 1.0:
        raise LearnerError(f"replay_fraction={replay_fraction} must be in [0, 1).")
    manifest = read_manifest(mds_root / dataset, dataset, reward_fn)
    usable = [w for w in manifest.windows if w.samples > 0]
    if not usable:
        raise LearnerError(
            f"dataset {dataset!r} has no window with training rows; run build_window first."
        )
    new = usable[-new_windows:]
    old = usable[:-new_windows][-max_replay_windows:] if max_replay_windows > 0 else []
    share_new = 1.0 if not old else 1.0 - replay_fraction
    plan = _shares(mds_root / dataset, new, share_new)
    return plan + _shares(mds_root / dataset, old, 1.0 - share_new)


def _shares(root: Path, windows: Sequence[WindowRecord], total: float) -> list[StreamChoice]:
    rows = sum(w.rows for w in windows)
    return [StreamChoice(w.name, root / w.name, total * w.rows / rows, w.samples) for w in windows]
