"""The context vector a policy sees: ``SuggestionOffered.context`` under ``sim-context@1``.

Every feature is something a real IDE client can compute before it decides; the hidden model
(``simulator.hidden_model``) computes acceptance from the same float32 values, so a learned
policy over ``context`` can recover who accepts. Positions never change within a spec version.

===  ==========================  ===================================================================
pos  feature                     meaning (distribution)
===  ==========================  ===================================================================
0    prefix_log_chars            code before the cursor, standardised ln(chars) (N(0, 1))
1    suggestion_log_chars        (ln(suggestion_chars) - mean_log_chars) / sigma_log_chars
2    model_confidence            the serving model's mean token log-prob, standardised (N(0, 1))
3    at_line_end                 1 if the cursor is at the end of its line
4    typing_speed                recent chars/s, standardised (user mean + N(0, 1) per request)
5    log_seconds_since_accept    time since the user's last acceptance, standardised (N(0, 1))
6    in_comment                  1 if the cursor is inside a comment or string
7    invoked                     1 if the user explicitly asked (trigger INVOKED)
8    user_accept_prior           the client's estimate of the user's acceptance logit offset
9    language_accept_prior       the fleet's historical acceptance logit offset of the language
===  ==========================  ===================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.code_text import SECRET_MIN_CHARS
from simulator.config import SuggestionsConfig
from simulator.draws import BlockDraws

CONTEXT_SPEC = "sim-context@1"
FEATURES: tuple[str, ...] = (
    "prefix_log_chars",
    "suggestion_log_chars",
    "model_confidence",
    "at_line_end",
    "typing_speed",
    "log_seconds_since_accept",
    "in_comment",
    "invoked",
    "user_accept_prior",
    "language_accept_prior",
)
CONTEXT_DIM = len(FEATURES)
INDEX = {name: i for i, name in enumerate(FEATURES)}


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
