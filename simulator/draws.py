"""Per-request random draws handed out a row at a time from blocks drawn in one call each.

A session needs about thirty arrays of uniforms and normals, one entry per request. Drawing them
as a few (rows, n) blocks instead of one generator call per array halves the cost of starting a
session (generator call overhead dominates for sessions of tens of requests). The sequence of
rows depends only on the generator's state and the order rows are asked for.
"""

from __future__ import annotations

import numpy as np

_ROWS = 16  # rows per block: a session asks for ~30, so two or three blocks of each kind


class BlockDraws:
    """Uniform [0, 1) and standard-normal arrays of length ``n`` from ``rng``."""

    def __init__(self, rng: np.random.Generator, n: int) -> None:
        self.rng = rng  # for the few draws that need their own distribution (beta, poisson)
        self.n = n
        self._uniforms: list[np.ndarray] = []
        self._normals: list[np.ndarray] = []

    def uniform(self) -> np.ndarray:
        """The next (n,) array of uniforms in [0, 1)."""
        if not self._uniforms:
            self._uniforms = list(self.rng.random((_ROWS, self.n)))
            self._uniforms.reverse()
        return self._uniforms.pop()

    def normal(self) -> np.ndarray:
        """The next (n,) array of standard normals."""
        if not self._normals:
            self._normals = list(self.rng.standard_normal((_ROWS, self.n)))
            self._normals.reverse()
        return self._normals.pop()

    def uniform_matrix(self, k: int) -> np.ndarray:
        """(n, k) uniforms in [0, 1): ``k`` rows, transposed."""
        return np.stack([self.uniform() for _ in range(k)], axis=1)

    def exponential(self, mean: float) -> np.ndarray:
        """(n,) exponential draws with ``mean``, by inverse transform of a uniform row."""
        draws: np.ndarray = -mean * np.log1p(-self.uniform())
        return draws

    def lognormal_ms(self, median: float, sigma: float) -> np.ndarray:
        """(n,) int64 durations in ms ≥ 1, lognormal with ``median`` and log-sd ``sigma``."""
        values = np.rint(median * np.exp(sigma * self.normal()))
        return np.maximum(1, values).astype(np.int64)
