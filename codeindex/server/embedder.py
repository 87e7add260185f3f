"""What the server needs of an embedder, and the float16 wire form of its vectors.

The server takes any object with `name`, `version`, `dim` and `encode` (the code embedder of
`codeindex.embedding`, or a test's): it is injected, never imported here, so the server's
modules load without torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

# Little-endian IEEE half precision: the `vector` bytes of ChunkEmbedded (docs/index.md).
WIRE_DTYPE = np.dtype("<f2")


class ChunkEmbedder(Protocol):
    """Texts -> L2-normalised float32 vectors [len(texts), dim]."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> NDArray[np.float32]: ...


def embedder_id(name: str, version: str) -> str:
    """`<name>:<version>`: the embedder part of an `index.embeddings` key."""
    return f"{name}:{version}"


def to_wire(vector: NDArray[np.floating]) -> bytes:
    """A vector as float16 little-endian bytes (2 * dim)."""
    return np.asarray(vector, dtype=WIRE_DTYPE).tobytes()


def from_wire(data: bytes, dim: int) -> NDArray[np.float16]:
    """The float16 vector in `data`; ValueError when it does not hold `dim` values."""
    if len(data) != 2 * dim:
        raise ValueError(f"{len(data)} bytes is not {dim} float16 values")
    return np.frombuffer(data, dtype=WIRE_DTYPE).astype(np.float16)
