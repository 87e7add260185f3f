"""Token windows: packed token sequences of the agent LM as immutable MDS windows.

A row is one sequence, prompt then completion, right-padded to ``seq_len``; ``target`` marks the
tokens the loss trains (the completion's, end-of-sequence included; in a multi-turn episode only the
tokens the policy generated, never the tool observations between its turns). ``rows_per_sample``
rows pack into one MDS sample (StreamingDataset yields ~15k samples/s per process, DESIGN §2), so a
sample is ``(rows_per_sample, seq_len)`` arrays and the trainer's ``concat_rows`` turns a microbatch
into ``(rows, seq_len)`` tensors. A sequence longer than ``seq_len`` keeps its end
(the completion) and loses the start of its prompt.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learner.data.window_manifest import write_window_atomically
from learner.errors import LearnerError


@dataclass(frozen=True)
class TokenRows:
    """``n`` sequences: ``input_ids`` (n, L) int32, ``target`` (n, L) uint8, ``lengths`` (n,)
    int32 (tokens before the padding)."""

    input_ids: np.ndarray
    target: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def trained_tokens(self) -> int:
        return int(self.target.sum())


def pack_sequences(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    seq_len: int,
    pad_id: int,
    masks: Sequence[Sequence[int] | None] | None = None,
) -> TokenRows:
    """One row per (prompt, completion) pair; ``target`` is 1 on the completion's tokens, or,
    where ``masks`` gives a row a non-empty mask (one 0/1 per completion token: an episode's
    generated tokens 1, its tool observations 0), only on those whose mask is 1. A row with no
    mask (``masks`` None, or its entry None or empty) trains every completion token.
    LearnerError when a completion alone exceeds ``seq_len`` (raise it, or shorten
    ``max_new_tokens``) or a mask's length differs from its completion's."""
    if len(prompts) != len(completions) or (masks is not None and len(masks) != len(prompts)):
        sizes = f"{len(prompts)} prompts, {len(completions)} completions"
        raise LearnerError(sizes + ("" if masks is None else f", {len(masks)} masks"))
    n = len(prompts)
    ids = np.full((n, seq_len), pad_id, dtype=np.int32)
    target = np.zeros((n, seq_len), dtype=np.uint8)
    lengths = np.zeros(n, dtype=np.int32)
    for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        if len(completion) >= seq_len:
            raise LearnerError(
                f"a completion of {len(completion)} tokens does not fit seq_len {seq_len}"
            )
        sequence = [*prompt, *completion][-seq_len:]
        ids[i, : len(sequence)] = sequence
        # The completion is never cut, so it ends the row: its positions are fixed.
        start = len(sequence) - len(completion)
        mask = masks[i] if masks is not None else None
        if mask:
            if len(mask) != len(completion):
                raise LearnerError(
                    f"row {i}: a mask of {len(mask)} for a completion of {len(completion)} tokens"
                )
            target[i, start : len(sequence)] = np.asarray(mask, dtype=np.uint8) == 1
        else:
            target[i, start : len(sequence)] = 1
        lengths[i] = len(sequence)
    return TokenRows(ids, target, lengths)


@dataclass(frozen=True)
class TokenSampleSpec:
    """The MDS layout of a token window: per-row arrays (``input_ids``, ``target``, ``lengths``
    and any others a recipe adds, e.g. the agent's behaviour log-probs and advantages) packed
    ``rows_per_sample`` rows to a sample, plus ``n_rows``."""

    seq_len: int
    rows_per_sample: int = 16

    def columns(self, arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
        """MDS column types of the per-row ``arrays``, plus ``n_rows``."""
        r = self.rows_per_sample
        columns = {
            name: f"ndarray:{a.dtype.name}:{','.join(str(d) for d in (r, *a.shape[1:]))}"
            for name, a in arrays.items()
        }
        return {**columns, "n_rows": "int32"}

    def pack(self, arrays: Mapping[str, np.ndarray]) -> Iterator[dict[str, Any]]:
        """Samples of ``rows_per_sample`` rows; the last padded with zero rows (no target)."""
        if arrays["input_ids"].shape[1] != self.seq_len:
            raise LearnerError(
                f"rows have seq_len {arrays['input_ids'].shape[1]}, the window {self.seq_len}"
            )
        r, total = self.rows_per_sample, len(arrays["input_ids"])
        for start in range(0, total, r):
            count = min(r, total - start)
            sample: dict[str, Any] = {}
            for name, array in arrays.items():
                part = array[start : start + r]
                if count < r:
                    padding = np.zeros((r - count, *array.shape[1:]), dtype=array.dtype)
                    part = np.concatenate([part, padding])
                sample[name] = part
            sample["n_rows"] = count
            yield sample


def token_arrays(rows: TokenRows) -> dict[str, np.ndarray]:
    return {"input_ids": rows.input_ids, "target": rows.target, "lengths": rows.lengths}


def write_token_window(
    directory: Path,
    rows: TokenRows | Mapping[str, np.ndarray],
    spec: TokenSampleSpec,
    files: Mapping[str, str] | None = None,
) -> Path:
    """Write ``rows`` (and ``files``, name → text) as one MDS window at ``directory`` (written
    beside it, fsynced, renamed into place: the window appears whole or not at all).
    LearnerError if it already exists."""
    if directory.exists():
        raise LearnerError(f"token window {directory} already exists; windows are immutable")
    directory.parent.mkdir(parents=True, exist_ok=True)
    arrays = token_arrays(rows) if isinstance(rows, TokenRows) else rows
    write_window_atomically(directory, spec.columns(arrays), spec.pack(arrays), files=files)
    return directory
