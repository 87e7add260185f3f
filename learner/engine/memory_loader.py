"""Windows that fit in memory, read once and served as columnar batches without a data pipeline.

`streaming.StreamingDataset` decodes every sample from its shard file on each visit and keeps
background threads polling; on a 2-core box that costs the gate's small model more than its own
forward and backward pass (``bench/learner_train.py``). A learner's windows are usually a few
MB, so :class:`MemoryLoader` reads each window's MDS shards once with streaming's reader
(`streaming.LocalDataset`), stacks every column that has one shape, and yields batches by
fancy indexing.

It keeps the streaming loader's contract, so the trainer does not tell them apart:

* **mixing**: per epoch a window contributes its samples once (no weight), ``repeat`` times its
  samples, or ``proportion`` / Σ proportions of all windows' samples; a share larger than the
  window takes whole copies plus a seeded draw of the rest, a smaller one a seeded subset;
* **order**: one shuffle of the epoch's samples from (seed, epoch) alone; global batch b is
  positions [b·B, (b+1)·B) and rank r takes its consecutive share, so the samples of a global
  batch do not depend on the world size, and a position saved at one world size resumes at
  another; the last partial global batch is dropped;
* **position**: ``state_dict`` / ``load_state_dict`` hold (epoch, global samples consumed in
  it, seed); the trainer overwrites epoch and offset with its own progress (`loader_position`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learner.errors import TrainingDataError

KIND = "memory"


@dataclass(frozen=True)
class _Window:
    """One window's samples in memory: a stacked array per column where every sample has the
    same shape, else a list of per-sample values."""

    columns: Mapping[str, np.ndarray | list[Any]]
    size: int


def require_mds(local: Path) -> None:
    """TrainingDataError naming the fix unless ``local`` is an MDS directory (either loader)."""
    if not (local / "index.json").is_file():
        raise TrainingDataError(
            f"{local} has no index.json: point WindowStream.local at an MDS directory "
            "(written by streaming.MDSWriter)"
        )


def read_window(local: Path) -> _Window:
    """All samples of the MDS window at ``local``, column by column."""
    from streaming import LocalDataset  # imported late: streaming takes seconds to import

    require_mds(local)
    dataset = LocalDataset(str(local))
    samples = [dataset[i] for i in range(len(dataset))]
    columns: dict[str, np.ndarray | list[Any]] = {}
    for key in samples[0] if samples else ():
        values = [sample[key] for sample in samples]
        columns[key] = _stacked(values)
    return _Window(columns, len(samples))


def _stacked(values: list[Any]) -> np.ndarray | list[Any]:
    """(n, ...) array when every value is a number or an array of one shape and dtype."""
    first = values[0]
    if isinstance(first, np.ndarray):
        if all(isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype
               for v in values):  # fmt: skip
            return np.stack(values)
        return values
    if all(isinstance(v, int | float | np.number) and not isinstance(v, bool) for v in values):
        return np.asarray(values)
    return values


def epoch_order(sizes: Sequence[int], weights: Sequence[tuple[float | None, float | None]],
                seed: int, epoch: int) -> np.ndarray:  # fmt: skip
    """(n, 2) int64 of (window, sample) pairs: the epoch's samples in training order.

    ``weights`` are each window's (proportion, repeat). Pure: depends only on its arguments.
    """
    rng = np.random.default_rng([seed, epoch])
    total = sum(sizes)
    proportions = sum(p for p, _ in weights if p is not None)
    picks = []
    for w, (size, (proportion, repeat)) in enumerate(zip(sizes, weights, strict=True)):
        if size == 0:
            continue
        if proportion is not None:
            count = round(total * proportion / proportions)
        elif repeat is not None:
            count = round(size * repeat)
        else:
            count = size
        whole, rest = divmod(count, size)
        chosen = np.concatenate([np.tile(np.arange(size), whole),
                                 rng.permutation(size)[:rest]])  # fmt: skip
        picks.append(np.stack([np.full(len(chosen), w), chosen], axis=1))
    if not picks:
        return np.zeros((0, 2), dtype=np.int64)
    order = np.concatenate(picks).astype(np.int64)
    return order[rng.permutation(len(order))]


class MemoryLoader:
    """An iterable of this rank's columnar batches (``{column: values of rank_batch samples}``)
    over ``windows`` held in memory; one ``iter`` is the rest of the current epoch."""

    def __init__(
        self,
        windows: Sequence[Any],  # learner.engine.loader.WindowStream
        rank_batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not windows:
            raise TrainingDataError("no windows to train on: pass at least one WindowStream")
        if any(w.proportion is not None for w in windows) and not all(
            w.proportion is not None for w in windows
        ):
            raise TrainingDataError("give proportion on every window or on none")
        self._windows = [read_window(Path(w.local)) for w in windows]
        keys = {tuple(w.columns) for w in self._windows if w.size}
        if len(keys) > 1:
            raise TrainingDataError(f"the windows have different columns: {sorted(keys)}")
        self._weights = [(w.proportion, w.repeat) for w in windows]
        self.rank_batch, self.rank, self.world_size = rank_batch_size, rank, world_size
        self.seed = seed
        self.epoch, self.sample_in_epoch = 0, 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        order = epoch_order([w.size for w in self._windows], self._weights, self.seed, self.epoch)
        global_batch = self.rank_batch * self.world_size
        while self.sample_in_epoch + global_batch <= len(order):
            start = self.sample_in_epoch + self.rank * self.rank_batch
            self.sample_in_epoch += global_batch
            yield self._batch(order[start : start + self.rank_batch])
        # Epoch done (its partial tail dropped): the next iter is the next epoch.
        self.epoch, self.sample_in_epoch = self.epoch + 1, 0

    def _batch(self, picks: np.ndarray) -> dict[str, Any]:
        first = self._windows[int(picks[0, 0])]
        if bool(np.all(picks[:, 0] == picks[0, 0])):
            return {k: _take(v, picks[:, 1]) for k, v in first.columns.items()}
        out: dict[str, Any] = {}
        for key in first.columns:
            parts = [self._windows[int(w)].columns[key] for w in picks[:, 0]]
            values = [part[int(i)] for part, i in zip(parts, picks[:, 1], strict=True)]
            out[key] = _stacked(values)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"loader": KIND, "epoch": self.epoch, "sample_in_epoch": self.sample_in_epoch,
                "shuffle_seed": self.seed}  # fmt: skip

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.sample_in_epoch = int(state["sample_in_epoch"])


def _take(column: np.ndarray | list[Any], index: np.ndarray) -> np.ndarray | list[Any]:
    if isinstance(column, np.ndarray):
        return np.asarray(column[index])
    return [column[int(i)] for i in index]
