"""The hidden acceptance model: who accepts which suggestion. Policies never see it directly.

    logit = base_logit + w · x + preference(user) + language_bias(language)
            + skill_weight · (skill - 0.5)
            + skill_length_weight · (skill - 0.5) · x[suggestion_log_chars]
    P(accept | x, user) = sigmoid(logit)

``x`` is the float32 context of ``simulator.context``; ``w`` weighs its eight causal features
and is 0 on the two prior features (8, 9), which are observable *estimates* of the user and
language terms, not causes. A user's preference is normal with sd ``preference_spread``, shifted
by ``skeptic_offset`` for the ``skeptic_fraction`` of users who mostly dislike suggestions; skill
is Beta(skill_alpha, skill_beta). The defaults are calibrated
(``tests/simulator/test_sim_hidden_model.py``, ``python -m simulator.calibration``) so that
about a quarter of all requests would be accepted if shown, roughly half have P(accept) < 0.25
(where showing loses under ``tab@1``), and the rest are well above.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from policies.context import CONTEXT_DIM, INDEX
from simulator.config import HiddenModelConfig

_LENGTH = INDEX["suggestion_log_chars"]


@dataclass(frozen=True)
class UserTraits:
    """Hidden per-user quantities, one entry per user."""

    preference: np.ndarray  # (n_users,) float64 logit offset
    skill: np.ndarray  # (n_users,) float64 in [0, 1]
    prior_error: np.ndarray  # (n_users,) float64 error of the client's user_accept_prior


class HiddenModel:
    """P(accept | context, user) for one :class:`HiddenModelConfig`."""

    def __init__(self, config: HiddenModelConfig) -> None:
        self.config = config
        weights = config.weights
        w = np.zeros(CONTEXT_DIM, dtype=np.float64)
        # Every weight is named after the context feature it multiplies.
        for weight in fields(weights):
            w[INDEX[weight.name]] = getattr(weights, weight.name)
        self.weights = w  # (CONTEXT_DIM,): zero on the prior features

    def draw_users(self, rng: np.random.Generator, n_users: int) -> UserTraits:
        """Hidden preferences, skills and prior-estimate errors of ``n_users`` users."""
        c = self.config
        skeptic = rng.random(n_users) < c.skeptic_fraction
        preference = c.preference_spread * rng.standard_normal(n_users)
        preference += np.where(skeptic, c.skeptic_offset, 0.0)
        skill = rng.beta(c.skill_alpha, c.skill_beta, n_users)
        prior_error = c.user_signal_noise * rng.standard_normal(n_users)
        return UserTraits(preference=preference, skill=skill, prior_error=prior_error)

    def user_offset(self, preference: float, skill: float) -> float:
        """The user's own logit offset: what ``user_accept_prior`` estimates."""
        return preference + self.config.skill_weight * (skill - 0.5)

    def language_bias(self, language: str) -> float:
        """The language's logit offset (also the ``language_accept_prior`` feature)."""
        return float(self.config.language_bias[language])

    def accept_probability(
        self, contexts: np.ndarray, *, preference: float, skill: float, language: str
    ) -> np.ndarray:
        """P(accept) of each row of ``contexts`` ((n, CONTEXT_DIM) float32) → (n,) float64."""
        c = self.config
        centred_skill = skill - 0.5
        x = contexts.astype(np.float64)  # float32 products would round (NumPy 2 keeps float32)
        logit = x @ self.weights
        logit += c.skill_length_weight * centred_skill * x[:, _LENGTH]
        logit += c.base_logit + self.user_offset(preference, skill) + self.language_bias(language)
        result: np.ndarray = 1.0 / (1.0 + np.exp(-logit))
        return result
