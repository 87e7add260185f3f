"""Reward rows in memory, and how they are packed into MDS samples and collated back into rows.

StreamingDataset yields only ~15k samples/s per process while the gate's MLP trains at ~200k
rows/s (DESIGN §2), so one MDS sample packs ``rows_per_sample`` (default 256) reward rows. Every
column has a static shape, so a window's last, partial pack is padded and ``n_rows`` says how many
of its rows are real; :func:`collate_rows` drops the padding, so a training batch is always a
flat set of real rows.

MDS columns of a packed sample (R = rows_per_sample, D = context_dim, E = len(extra_columns)):

==============  ======================  ======================================================
column          encoding                meaning
==============  ======================  ======================================================
context         ndarray:float32:R,D     the context vector the behaviour policy saw
extra           ndarray:float32:R,E     point-in-time feature columns (only when E > 0)
shown           ndarray:uint8:R         1 when the logged decision was SHOWN
propensity      ndarray:float32:R       behaviour probability of the logged decision
reward          ndarray:float32:R       the reward of the logged decision
model_version   ndarray:int32:R         version of the behaviour policy
n_rows          int32                   real rows in this sample (the rest is zero padding)
==============  ======================  ======================================================
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from learner.errors import LearnerError
from policies.context import CONTEXT_DIM

ROWS_PER_SAMPLE = 256


@dataclass(frozen=True)
class RewardRows:
    """Suggestion reward rows as arrays of equal length n (one entry per logged decision)."""

    source_id: np.ndarray  # (n,) object (str): the suggestion ids
    context: np.ndarray  # (n, D) float32
    shown: np.ndarray  # (n,) bool: logged decision SHOWN
    propensity: np.ndarray  # (n,) float64: P_behaviour(logged decision) in (0, 1]
    reward: np.ndarray  # (n,) float64
    model_version: np.ndarray  # (n,) int64
    event_time_ms: np.ndarray  # (n,) int64, epoch milliseconds
    extra: np.ndarray | None = None  # (n, E) float32 extra feature columns, or None
    extra_columns: tuple[str, ...] = ()
    # (n,) object (str or None): the users' pseudonyms, the gate's bootstrap clusters; None
    # when the rows were read without them.
    user_id: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.shown)

    def behaviour_show_probability(self) -> np.ndarray:
        """(n,) P_behaviour(SHOWN | x): the propensity where shown, 1 - it where suppressed."""
        return np.where(self.shown, self.propensity, 1.0 - self.propensity)

    def features(self) -> np.ndarray:
        """(n, D + E) float32: the context followed by the extra columns (the policy's input)."""
        if self.extra is None:
            return self.context
        return np.concatenate([self.context, self.extra], axis=1)

    def take(self, index: np.ndarray) -> RewardRows:
        """The rows at ``index`` (a bool mask or integer positions), in that order."""
        return RewardRows(
            source_id=self.source_id[index],
            context=self.context[index],
            shown=self.shown[index],
            propensity=self.propensity[index],
            reward=self.reward[index],
            model_version=self.model_version[index],
            event_time_ms=self.event_time_ms[index],
            extra=None if self.extra is None else self.extra[index],
            extra_columns=self.extra_columns,
            user_id=None if self.user_id is None else self.user_id[index],
        )

    @staticmethod
    def concat(parts: Sequence[RewardRows]) -> RewardRows:
        """All rows of ``parts`` in order; LearnerError if their extra columns differ."""
        if not parts:
            raise LearnerError("concat needs at least one RewardRows; check the row source.")
        columns = {p.extra_columns for p in parts}
        if len(columns) != 1:
            raise LearnerError(f"cannot concatenate rows with different extra columns {columns}.")
        extras = [p.extra for p in parts]
        return RewardRows(
            source_id=np.concatenate([p.source_id for p in parts]),
            context=np.concatenate([p.context for p in parts]),
            shown=np.concatenate([p.shown for p in parts]),
            propensity=np.concatenate([p.propensity for p in parts]),
            reward=np.concatenate([p.reward for p in parts]),
            model_version=np.concatenate([p.model_version for p in parts]),
            event_time_ms=np.concatenate([p.event_time_ms for p in parts]),
            extra=None
            if extras[0] is None
            else np.concatenate([e for e in extras if e is not None]),
            extra_columns=parts[0].extra_columns,
            user_id=None
            if any(p.user_id is None for p in parts)
            else np.concatenate([p.user_id for p in parts if p.user_id is not None]),
        )


@dataclass(frozen=True)
class SampleSpec:
    """The MDS layout of a window: rows per sample and the width of each per-row column."""

    rows_per_sample: int = ROWS_PER_SAMPLE
    context_dim: int = CONTEXT_DIM
    extra_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.rows_per_sample < 1 or self.context_dim < 1:
            raise LearnerError(
                f"rows_per_sample={self.rows_per_sample} and context_dim={self.context_dim} "
                "must be >= 1; fix the window configuration."
            )

    def columns(self) -> dict[str, str]:
        """MDSWriter ``columns``: name → encoding (static shapes, see the module docstring)."""
        r, d = self.rows_per_sample, self.context_dim
        columns = {
            "context": f"ndarray:float32:{r},{d}",
            "shown": f"ndarray:uint8:{r}",
            "propensity": f"ndarray:float32:{r}",
            "reward": f"ndarray:float32:{r}",
            "model_version": f"ndarray:int32:{r}",
            "n_rows": "int32",
        }
        if self.extra_columns:
            columns["extra"] = f"ndarray:float32:{r},{len(self.extra_columns)}"
        return columns

    def pack(self, rows: RewardRows) -> Iterator[dict[str, Any]]:
        """MDS samples of ``rows`` in order, ``rows_per_sample`` each; the last one padded.

        Full samples are views of ``rows``' columns (or of one converted copy of a column whose
        dtype differs from the MDS encoding): write them out before changing ``rows``.

        Raises LearnerError when the rows' context width or extra columns do not match the spec.
        """
        if rows.context.ndim != 2 or rows.context.shape[1] != self.context_dim:
            raise LearnerError(
                f"context has shape {rows.context.shape}, the window expects (n, "
                f"{self.context_dim}); rows of another context spec need their own dataset."
            )
        if rows.extra_columns != self.extra_columns:
            raise LearnerError(
                f"rows carry extra columns {rows.extra_columns}, the spec {self.extra_columns}."
            )
        r = self.rows_per_sample
        n = len(rows)
        arrays: dict[str, np.ndarray] = {
            "context": rows.context.astype(np.float32, copy=False),
            "shown": rows.shown.astype(np.uint8, copy=False),
            "propensity": rows.propensity.astype(np.float32, copy=False),
            "reward": rows.reward.astype(np.float32, copy=False),
            "model_version": rows.model_version.astype(np.int32, copy=False),
        }
        if rows.extra is not None:
            arrays["extra"] = rows.extra.astype(np.float32, copy=False)
        for start in range(0, n, r):
            # Full samples are views of the converted columns; only the last one is copied,
            # to pad it with zeros to the static shape.
            count = min(r, n - start)
            sample: dict[str, Any] = {
                k: v[start : start + r] if count == r else _pad(v[start:], r)
                for k, v in arrays.items()
            }
            sample["n_rows"] = count
            yield sample


def _pad(array: np.ndarray, length: int) -> np.ndarray:
    """``array`` followed by zero rows up to ``length`` rows."""
    out = np.zeros((length, *array.shape[1:]), dtype=array.dtype)
    out[: len(array)] = array
    return out


def collate_rows(samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """DataLoader ``collate_fn``: packed samples → one flat batch of their real rows.

    Returns ``features`` (rows, D + E) float32 (context, then extra columns), ``shown`` (rows,)
    bool, ``propensity`` and ``reward`` (rows,) float32 and ``model_version`` (rows,) int64; the
    padding of partial samples is dropped, so ``rows`` = Σ n_rows.
    """
    if not samples:
        raise LearnerError("collate_rows got an empty batch; use a batch_size >= 1.")
    keep = np.concatenate(
        [np.arange(len(s["shown"])) < int(s["n_rows"]) for s in samples]
    )  # (B * R,) True for real rows

    def flat(name: str) -> np.ndarray:
        return np.asarray(np.concatenate([np.asarray(s[name]) for s in samples])[keep])

    features = flat("context")
    if "extra" in samples[0]:
        features = np.concatenate([features, flat("extra")], axis=1)
    return {
        "features": torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)),
        "shown": torch.from_numpy(flat("shown").astype(bool)),
        "propensity": torch.from_numpy(flat("propensity").astype(np.float32)),
        "reward": torch.from_numpy(flat("reward").astype(np.float32)),
        "model_version": torch.from_numpy(flat("model_version").astype(np.int64)),
    }


def rows_to_batch(rows: RewardRows) -> dict[str, torch.Tensor]:
    """The batch :func:`collate_rows` would make of ``rows`` (no MDS round trip)."""
    return {
        "features": torch.from_numpy(np.ascontiguousarray(rows.features(), dtype=np.float32)),
        "shown": torch.from_numpy(rows.shown.astype(bool)),
        "propensity": torch.from_numpy(rows.propensity.astype(np.float32)),
        "reward": torch.from_numpy(rows.reward.astype(np.float32)),
        "model_version": torch.from_numpy(rows.model_version.astype(np.int64)),
    }
