"""The held-out split: a stable hash of ``source_id`` decides which rewards the release check keeps.

A row is held out when ``mix64(fnv64(salt + ":" + source_id))`` falls below ``fraction * 2**64``:
an FNV-1a-style hash over the UTF-8 bytes taken as little-endian 64-bit words (zero-padded, the
byte length mixed into the start value), then the splitmix64 finaliser for uniform high bits.
Word-wise hashing keeps the vectorised form to one numpy pass per 8 bytes. The
split is a pure function of the id, fixed here rather than borrowed from a library whose hash may
change between versions, so every process, rerun and window agrees on it and a suggestion is
never in training data and in the release check's held-out data. :meth:`HoldoutSplit.mask`
computes it vectorised with numpy over an Arrow string column (a few million ids/s),
:meth:`is_held_out` per id.
Change ``salt`` (never ``fraction`` of a running deployment) to draw a new split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from learner.errors import LearnerError

DEFAULT_FRACTION = 0.2  # 1 in 5 suggestions is held out for the off-policy check
DEFAULT_SALT = "flywheel-holdout@1"
_SPAN = 2**64
_MASK = _SPAN - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


@dataclass(frozen=True)
class HoldoutSplit:
    """Which share of source ids is held out, and the salt that fixes the split."""

    fraction: float = DEFAULT_FRACTION
    salt: str = DEFAULT_SALT

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction < 1.0:
            raise LearnerError(
                f"holdout fraction {self.fraction} must be in [0, 1); set holdout.fraction."
            )

    @property
    def threshold(self) -> int:
        """Hash values below this are held out (an unsigned 64-bit integer)."""
        return min(_SPAN - 1, int(self.fraction * _SPAN))

    def is_held_out(self, source_id: str) -> bool:
        """True when the row of ``source_id`` belongs to the held-out split."""
        return _mix_scalar(_hash_scalar(f"{self.salt}:{source_id}".encode())) < self.threshold

    def mask(self, source_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """(n,) bool: :meth:`is_held_out` of each id (null ids are never held out).

        Bit-identical to :meth:`is_held_out`; ids are hashed in groups of equal byte length,
        each group one (m, width) byte matrix gathered without a per-byte index.
        """
        ids = source_ids.combine_chunks() if isinstance(source_ids, pa.ChunkedArray) else source_ids
        ids = pc.cast(ids, pa.large_binary())
        n = len(ids)
        held = np.zeros(n, dtype=bool)
        if n == 0:
            return held
        offsets = np.frombuffer(ids.buffers()[1], dtype=np.int64)[ids.offset : ids.offset + n + 1]
        data = np.frombuffer(ids.buffers()[2] or b"", dtype=np.uint8)
        lengths = np.diff(offsets)
        valid = (
            np.ones(n, dtype=bool)
            if ids.null_count == 0
            else np.asarray(ids.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        )
        prefix = f"{self.salt}:".encode()
        # The prefix's whole words hash to the same state for every id of one length: hash
        # them once per length and only the rest per id.
        cut = len(prefix) // 8 * 8
        tail = np.frombuffer(prefix[cut:], dtype=np.uint8)
        threshold = np.uint64(self.threshold)
        for length in _distinct(lengths[valid]):
            same = valid & (lengths == length)
            rows = None if same.all() else np.flatnonzero(same)
            starts = offsets[:-1] if rows is None else offsets[rows]
            state = _fnv_words(_start(len(prefix) + length), prefix[:cut])
            h = _hash_words(_padded(tail, _gather(data, starts, length)), state)
            held[slice(None) if rows is None else rows] = _mix_vector(h) < threshold
        return held


def _gather(data: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """(m, length) uint8: the ``length`` bytes of ``data`` from each of ``starts``."""
    if length == 0:
        return np.zeros((len(starts), 0), dtype=np.uint8)
    # A (len(data) - length + 1, length) view with byte strides: row s is data[s : s + length],
    # so one index per id gathers its bytes (no (m, length) index array).
    windows = np.lib.stride_tricks.sliding_window_view(data, length)
    return np.asarray(windows[starts])


def _padded(prefix: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(m, width) uint8: ``prefix``, each id's bytes, zeros up to a multiple of 8 bytes."""
    total = len(prefix) + ids.shape[1]
    chars = np.zeros((len(ids), -(-total // 8) * 8), dtype=np.uint8)
    chars[:, : len(prefix)] = prefix
    chars[:, len(prefix) : total] = ids
    return chars


def _hash_words(chars: np.ndarray, state: int) -> np.ndarray:
    """(m,) uint64: the word-wise FNV hash, from ``state``, of each row of ``chars``."""
    words = np.ascontiguousarray(chars.view("<u8").T)  # (width / 8, m) little-endian words
    h = np.full(chars.shape[0], state, dtype=np.uint64)
    for word in words:
        h ^= word
        h *= np.uint64(_FNV_PRIME)  # wraps modulo 2**64
    return h


def _distinct(lengths: np.ndarray) -> list[int]:
    """The distinct values of ``lengths`` (one min/max pass when all ids are equally long)."""
    if len(lengths) == 0:
        return []
    low, high = int(lengths.min()), int(lengths.max())
    return [low] if low == high else [int(v) for v in np.unique(lengths)]


def _start(length: int) -> int:
    return (_FNV_OFFSET ^ length) & _MASK


def _fnv_words(h: int, data: bytes) -> int:
    """FNV state ``h`` after the little-endian words of ``data`` (zero-padded to 8 bytes)."""
    padded = data + b"\0" * (-len(data) % 8)
    for i in range(0, len(padded), 8):
        h = ((h ^ int.from_bytes(padded[i : i + 8], "little")) * _FNV_PRIME) & _MASK
    return h


def _hash_scalar(data: bytes) -> int:
    """The word-wise FNV hash of ``data`` (see the module docstring)."""
    return _fnv_words(_start(len(data)), data)


def _mix_scalar(h: int) -> int:
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
    return h ^ (h >> 31)


def _mix_vector(h: np.ndarray) -> np.ndarray:
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.asarray(h ^ (h >> np.uint64(31)))
