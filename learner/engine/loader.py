"""Training data: MDS windows mixed by `streaming.Stream` weights, read by a resumable loader.

The loader yields *columnar* batches (``{column: [value per sample]}``) of one rank's share of a
global batch; the trainer splits those into microbatches and `concat_rows` turns a microbatch
into tensors. A sample may pack many rows: array columns are concatenated along their first axis
(rows), scalar columns become one value per sample.

Resumption: the position is ``(epoch, global samples consumed in it)`` plus the shuffle seed and
canonical node count (streaming's ``StreamingDataset.state_dict`` format). Sample order depends
only on those, not on the number of ranks, so a position saved at one world size resumes at
another. Notes on streaming 0.13 that shape this module:

* a stream is a local MDS directory, or a remote one (``s3://…``) that streaming downloads into
  its local directory on demand, the cache bounded by ``cache_limit``
  (`learner.data.window_store`); ``batch_size`` (per rank) must be given to the dataset because
  it shapes the partition;
* streaming keeps run state in shared memory under a numeric prefix; a new dataset takes the first
  free prefix, so stale segments of a SIGKILLed run are skipped, not reused. We do *not* call
  ``clean_stale_shared_memory()`` by default: it unlinks every prefix, including those of live
  datasets in other processes on this machine (parallel tests, a second trainer);
* ``num_workers=0`` is the default: on small CPU boxes worker processes cost more than they save,
  and each worker re-imports streaming (several seconds).

Windows that fit in memory skip all of that: ``loader="auto"`` (the default) reads them once
into a `learner.engine.memory_loader.MemoryLoader` with the same mixing, order-independence of the
world size and resume position; ``"streaming"`` forces the StreamingDataLoader.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import streaming
import torch

from learner.engine.durations import Progress
from learner.engine.memory_loader import MemoryLoader, require_mds
from learner.errors import TrainingDataError

LoaderKind = Literal["auto", "memory", "streaming"]
MEMORY_LOADER_MAX_BYTES = 1 << 30  # "auto" holds windows of up to 1 GiB of shards in memory


@dataclass(frozen=True)
class WindowStream:
    """One MDS window (a directory holding ``index.json``) and its weight in the mix.

    Give ``proportion`` (relative share of each epoch) on every window, or ``repeat`` (how many
    times each of its samples is seen per epoch, e.g. 0.25 for replay), or neither (each once).
    With ``remote`` (an object-store URI) ``local`` is the cache directory streaming downloads
    the window into.
    """

    local: Path
    proportion: float | None = None
    repeat: float | None = None
    remote: str | None = None

    def to_stream(self) -> Any:
        """The `streaming.Stream` reading this window (from local disk, or downloading it)."""
        if self.remote is None:
            require_mds(self.local)
        return streaming.Stream(
            remote=self.remote, local=str(self.local), proportion=self.proportion,
            repeat=self.repeat,
        )  # fmt: skip


def collate_columns(samples: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The DataLoader's collate: samples → ``{column: [value per sample]}``.

    Columnar lists keep packed samples of different row counts intact, and let
    `streaming.StreamingDataLoader` count samples (the length of the first column).
    """
    if not samples:
        raise TrainingDataError("empty batch: the loader yielded no samples")
    return {key: [sample[key] for sample in samples] for key in samples[0]}


def samples_of(columns: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Inverse of `collate_columns`: the batch as one dict per sample."""
    keys = list(columns)
    count = len(columns[keys[0]]) if keys else 0
    return [{key: columns[key][i] for key in keys} for i in range(count)]


def concat_rows(samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """Default microbatch collate: numeric columns → tensors; other columns are dropped.

    Array columns (ndim >= 1) are concatenated along axis 0: ``x`` of shapes (r_i, d) becomes
    (sum r_i, d). Scalar columns become shape (n_samples,).
    """
    out: dict[str, torch.Tensor] = {}
    for key in samples[0]:
        values = [sample[key] for sample in samples]
        if all(isinstance(v, np.ndarray) and v.ndim >= 1 for v in values):
            out[key] = torch.from_numpy(np.concatenate(values, axis=0))
        elif all(isinstance(v, int | float | np.number | np.ndarray) for v in values):
            out[key] = torch.from_numpy(np.asarray(values))
    return out


def window_bytes(windows: Sequence[WindowStream]) -> int:
    """Bytes of the windows' shard files on disk."""
    return sum(f.stat().st_size for w in windows for f in Path(w.local).glob("shard.*"))


def fits_in_memory(windows: Sequence[WindowStream]) -> bool:
    """Whether ``kind="auto"`` reads ``windows`` into memory: local windows of at most
    `MEMORY_LOADER_MAX_BYTES` (remote ones always stream, through the bounded cache)."""
    if any(w.remote is not None for w in windows):
        return False
    return window_bytes(windows) <= MEMORY_LOADER_MAX_BYTES


def build_loader(
    windows: Sequence[WindowStream],
    rank_batch_size: int,
    seed: int,
    num_workers: int = 0,
    *,
    kind: LoaderKind = "streaming",
    rank: int = 0,
    world_size: int = 1,
    cache_limit: int | None = None,
) -> Any:
    """A shuffled loader over ``windows`` yielding columnar batches of ``rank_batch_size``
    samples (this rank's share of the global batch; partial batches dropped): a
    `MemoryLoader` for ``kind="memory"``, or ``"auto"`` with windows of at most
    `MEMORY_LOADER_MAX_BYTES`, else a `streaming.StreamingDataLoader`. ``cache_limit`` bounds
    the bytes of remote windows' shards kept in their local directories (streaming evicts the
    least recently used shards past it).

    Call after the process group is initialised: streaming reads the world from it.
    """
    if not windows:
        raise TrainingDataError("no windows to train on: pass at least one WindowStream")
    if kind == "memory" or (kind == "auto" and fits_in_memory(windows)):
        return MemoryLoader(windows, rank_batch_size, seed, rank=rank, world_size=world_size)
    try:
        dataset = streaming.StreamingDataset(
            streams=[window.to_stream() for window in windows],
            batch_size=rank_batch_size,
            shuffle=True,
            shuffle_seed=seed,
            cache_limit=cache_limit,
        )
    except (ValueError, RuntimeError) as exc:
        raise TrainingDataError(f"cannot read the windows as one dataset: {exc}") from exc
    return streaming.StreamingDataLoader(
        dataset,
        batch_size=rank_batch_size,
        collate_fn=collate_columns,
        num_workers=num_workers,
        drop_last=True,  # every optimizer step sees a full global batch
    )


def loader_position(loader: Any, progress: Progress) -> dict[str, Any]:
    """The loader's resume state at ``progress``.

    Starts from streaming's own state (seed, canonical nodes) but takes the epoch and in-epoch
    offset from the trainer's progress: right after an epoch ends the loader still reports the
    finished epoch, which would replay its dropped tail and count the epoch twice.
    """
    state = dict(loader.state_dict())
    state["epoch"] = progress.epochs
    state["sample_in_epoch"] = progress.samples_in_epoch
    return state


def release_loader(loader: Any, is_local_leader: bool) -> None:
    """Removes the lock files streaming leaves in the temp dir for this loader's prefix.

    streaming 0.13 never deletes ``<prefix>_barrier_filelock``/``_cache_filelock``; each one
    retires its prefix for every later dataset on the machine. Call once no rank uses the loader.
    Its shared memory stays registered until this process exits, so the prefix cannot be
    taken by another dataset before then.
    """
    prefix = getattr(getattr(loader, "dataset", None), "_shm_prefix_int", None)
    if not is_local_leader or prefix is None:
        return
    for name in ("barrier_filelock", "cache_filelock"):
        path = os.path.join(tempfile.gettempdir(), f"{prefix:06}_{name}")
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
