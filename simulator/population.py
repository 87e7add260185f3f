"""The simulated population: users (with hidden traits), their repositories and editors.

Drawn once per fleet from the seed. Ids are raw (``user-17``, ``repo-3``): pseudonymising them
is the SDK's job (DESIGN §4), so the simulator exercises it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.config import TestsConfig, UsersConfig
from simulator.hidden_model import HiddenModel, UserTraits


@dataclass(frozen=True)
class Population:
    """Users and repositories; arrays are indexed by user or repository number."""

    user_ids: tuple[str, ...]
    traits: UserTraits
    user_offset: np.ndarray  # (n_users,) float64, the hidden user term of the logit
    user_prior: np.ndarray  # (n_users,) float32, the observable estimate of user_offset
    typing_mean: np.ndarray  # (n_users,) float64, the user's mean typing_speed feature
    privacy_mode: np.ndarray  # (n_users,) bool
    ide: tuple[str, ...]  # per user
    activity_cdf: np.ndarray  # (n_users,) cumulative share of sessions, last entry 1.0
    user_repos: tuple[tuple[int, ...], ...]  # repository numbers per user
    repo_ids: tuple[str, ...]
    repo_language: tuple[str, ...]
    repo_tests: np.ndarray  # (n_repos,) int64 test-suite size

    def pick_user(self, u: float) -> int:
        """The user whose activity interval holds ``u`` ∈ [0, 1): busier users come up more."""
        index = int(np.searchsorted(self.activity_cdf, u, side="right"))
        return min(index, len(self.user_ids) - 1)


def _choice(
    rng: np.random.Generator, names: tuple[str, ...], weights: tuple[float, ...], n: int
) -> list[str]:
    p = np.asarray(weights, dtype=np.float64)
    return [names[i] for i in rng.choice(len(names), size=n, p=p / p.sum())]


def draw_population(
    rng: np.random.Generator, users: UsersConfig, tests: TestsConfig, model: HiddenModel
) -> Population:
    """A population of ``users.n_users`` users drawn from ``rng``."""
    n = users.n_users
    traits = model.draw_users(rng, n)
    offset = np.array(
        [model.user_offset(p, s) for p, s in zip(traits.preference, traits.skill, strict=True)]
    )
    activity = np.exp(users.activity_sigma * rng.standard_normal(n))
    cdf = np.cumsum(activity) / activity.sum()
    repo_counts = rng.integers(1, users.max_repos_per_user + 1, size=n)
    user_repos: list[tuple[int, ...]] = []
    first = 0
    for count in repo_counts:
        user_repos.append(tuple(range(first, first + int(count))))
        first += int(count)
    n_repos = first
    tests_per_repo = tests.median_tests * np.exp(tests.tests_sigma * rng.standard_normal(n_repos))
    return Population(
        user_ids=tuple(f"user-{i}" for i in range(n)),
        traits=traits,
        user_offset=offset,
        user_prior=(offset + traits.prior_error).astype(np.float32),
        typing_mean=users.typing_speed_spread * rng.standard_normal(n),
        privacy_mode=rng.random(n) < users.privacy_mode_fraction,
        ide=tuple(_choice(rng, users.ides, users.ide_weights, n)),
        activity_cdf=cdf,
        user_repos=tuple(user_repos),
        repo_ids=tuple(f"repo-{i}" for i in range(n_repos)),
        repo_language=tuple(_choice(rng, users.languages, users.language_weights, n_repos)),
        repo_tests=np.maximum(1, np.rint(tests_per_repo)).astype(np.int64),
    )
