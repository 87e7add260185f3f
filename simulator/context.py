"""Drawing the context vector of simulated requests, in the layout ``policies.context`` fixes
(``sim-context@1``): the hidden model computes acceptance from the same float32 values."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.context import CONTEXT_DIM
from simulator.code_text import SECRET_MIN_CHARS
from simulator.config import SuggestionsConfig
from simulator.draws import BlockDraws


@dataclass(frozen=True)
class RequestFeatures:
    """The observable features of a session's ``n`` requests."""

    contexts: np.ndarray  # (n, CONTEXT_DIM) float32, columns as in FEATURES
    chars: np.ndarray  # (n,) int64 suggestion length in characters, matching column 1
    invoked: np.ndarray  # (n,) bool, matching column 7


def draw_features(
    d: BlockDraws,
    config: SuggestionsConfig,
    *,
    typing_mean: float,
    user_prior: float,
    language_prior: float,
    has_secret: np.ndarray,
) -> RequestFeatures:
    """Features of ``d.n`` requests by one user in one language (``has_secret``: (n,) bool).

    A request with a planted secret is made at least ``SECRET_MIN_CHARS`` long before its length
    feature is computed, so the context always describes the text actually produced.
    """
    log_chars = config.mean_log_chars + config.sigma_log_chars * d.normal()
    chars = np.clip(np.rint(np.exp(log_chars)), 1, config.max_chars).astype(np.int64)
    chars = np.where(has_secret, np.maximum(chars, SECRET_MIN_CHARS), chars)
    invoked = d.uniform() < config.invoked_probability
    x = np.empty((d.n, CONTEXT_DIM), dtype=np.float32)
    x[:, 0] = d.normal()
    x[:, 1] = (np.log(chars) - config.mean_log_chars) / config.sigma_log_chars
    x[:, 2] = d.normal()
    x[:, 3] = d.uniform() < config.at_line_end_probability
    x[:, 4] = typing_mean + d.normal()
    x[:, 5] = d.normal()
    x[:, 6] = d.uniform() < config.in_comment_probability
    x[:, 7] = invoked
    x[:, 8] = user_prior
    x[:, 9] = language_prior
    return RequestFeatures(contexts=x, chars=chars, invoked=invoked)
