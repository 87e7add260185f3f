"""One editor session drawn up front: every random quantity that does not depend on the policy.

A session's draws come from its own generator, seeded by ``(seed, session index)``, and include
what *would* happen if each suggestion were shown (would the user accept, how fast, which edits
follow, which tests break). The policy only gates them. So two policies run on the same seed see
the same requests and the same users' reactions (common random numbers): their differences in
the data are due to the policy alone, which keeps comparisons between model versions paired.
Per-request values are Python lists because the event builder reads them one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.code_text import fake_secret
from simulator.config import SimulatorConfig
from simulator.context import RequestFeatures, draw_features
from simulator.draws import BlockDraws
from simulator.hidden_model import HiddenModel
from simulator.ids import namespace_of, uuid_strings
from simulator.population import Population

_SESSION_STREAM = 1  # generator stream id of sessions: default_rng([seed, 1, index])


@dataclass(frozen=True)
class OutcomeDraws:
    """What each request's user would do if the suggestion were shown."""

    accepts: list[bool]  # accepted (fully or partly)
    partial: list[bool]  # accepted only a prefix (implies accepts)
    accepted_chars: list[int]
    ignored: list[bool]  # rejected without an outcome event
    decision_ms: list[int]  # time from showing to the user's decision
    defect: list[bool]  # the accepted code breaks a test


@dataclass(frozen=True)
class EditDraws:
    """Edits after each request's would-be acceptance; only the first ``count[i]`` are real."""

    count: list[int]
    offset_ms: list[list[int]]  # since acceptance, increasing
    inserted: list[list[int]]
    retained: list[list[int]]  # accepted chars still present after each edit, non-increasing


@dataclass(frozen=True)
class TestRunDraws:
    """A test run that starts at each request where ``runs[i]``."""

    __test__ = False  # not a pytest class

    runs: list[bool]
    baseline_failed: list[int]  # failures not caused by suggestions
    errored: list[int]
    duration_ms: list[int]


@dataclass(frozen=True)
class SessionPlan:
    """One session of one user in one repository, with all policy-independent draws."""

    index: int
    session_id: str
    user: int
    repo: int
    language: str
    times_ms: list[int]  # request times, simulated epoch ms, strictly increasing
    contexts: np.ndarray  # (n, CONTEXT_DIM) float32
    context_rows: list[tuple[float, ...]]  # the same values as Python floats, for events
    p_accept: np.ndarray  # (n,) float64 hidden P(accept)
    decision_u: np.ndarray  # (n,) uniforms for the show/suppress draw
    invoked: list[bool]
    chars: list[int]
    text_u: list[float]  # where in the corpus the suggestion text starts
    secrets: list[str | None]  # planted credential line, or None
    latency_ms: list[int]
    rollout_trigger: list[bool]  # an agent task group starts at this request
    idle_after_ms: int  # simulated idle time after the last request, before the next session
    outcomes: OutcomeDraws
    edits: EditDraws
    tests: TestRunDraws

    def __len__(self) -> int:
        return len(self.times_ms)


def _draw_outcomes(
    d: BlockDraws, config: SimulatorConfig, p: np.ndarray, chars: np.ndarray
) -> OutcomeDraws:
    c = config.outcomes
    accepts = d.uniform() < p
    partial = accepts & (d.uniform() < c.partial_fraction)
    kept = c.partial_min_fraction + (1.0 - c.partial_min_fraction) * d.uniform()
    accepted = np.where(partial, np.maximum(1, np.floor(chars * kept)), chars)
    accept_ms = d.lognormal_ms(c.accept_median_ms, c.decision_sigma)
    reject_ms = d.lognormal_ms(c.reject_median_ms, c.decision_sigma)
    return OutcomeDraws(
        accepts=accepts.tolist(),
        partial=partial.tolist(),
        accepted_chars=np.where(accepts, accepted, 0).astype(np.int64).tolist(),
        ignored=(~accepts & (d.uniform() < c.ignored_fraction)).tolist(),
        decision_ms=np.where(accepts, accept_ms, reject_ms).tolist(),
        defect=(d.uniform() < config.tests.defect_probability * (1.0 - p)).tolist(),
    )


def _draw_edits(
    d: BlockDraws, config: SimulatorConfig, p: np.ndarray, accepted: list[int]
) -> EditDraws:
    c = config.edits
    n, k = d.n, c.max_edits
    edits = 1 + np.floor(k * d.uniform())  # uniform on 1..k
    count = np.where(d.uniform() < c.edit_probability, edits, 0).astype(np.int64)
    gaps = -c.mean_seconds_between_edits * 1e3 * np.log1p(-d.uniform_matrix(k))
    # Better suggestions (higher P(accept)) lose a smaller share of their chars to each edit.
    mean = np.clip(c.mean_delete_fraction * (1.0 - c.quality_weight * p), 1e-3, 1 - 1e-3)
    a = mean * c.delete_concentration
    fraction = d.rng.beta(a[:, None], (c.delete_concentration - a)[:, None], size=(n, k))
    retained = np.rint(np.asarray(accepted)[:, None] * np.cumprod(1.0 - fraction, axis=1))
    # At least one char typed, so every edit changes something even when it deletes nothing.
    inserted = np.rint(1.0 - c.mean_chars_inserted * np.log1p(-d.uniform_matrix(k)))
    return EditDraws(
        count=count.tolist(),
        offset_ms=np.cumsum(np.maximum(1, np.rint(gaps)), axis=1).astype(np.int64).tolist(),
        inserted=inserted.astype(np.int64).tolist(),
        retained=retained.astype(np.int64).tolist(),
    )


def _draw_tests(d: BlockDraws, config: SimulatorConfig, total: int) -> TestRunDraws:
    c = config.tests
    extra_failures = d.rng.poisson(1.0, d.n)
    failed = np.where(d.uniform() < c.baseline_failure_probability, 1 + extra_failures, 0)
    errored = np.where(d.uniform() < c.error_probability, 1 + np.floor(3 * d.uniform()), 0)
    duration = total * c.ms_per_test * np.exp(0.3 * d.normal())
    return TestRunDraws(
        runs=(d.uniform() < c.run_probability).tolist(),
        baseline_failed=np.minimum(failed, total).tolist(),
        errored=errored.astype(np.int64).tolist(),
        duration_ms=np.maximum(1, np.rint(duration)).astype(np.int64).tolist(),
    )


def _draw_requests(
    d: BlockDraws,
    config: SimulatorConfig,
    population: Population,
    model: HiddenModel,
    user: int,
    language: str,
    has_secret: np.ndarray,
) -> tuple[RequestFeatures, np.ndarray]:
    """The requests' observable features and their hidden P(accept)."""
    features = draw_features(
        d,
        config.suggestions,
        typing_mean=float(population.typing_mean[user]),
        user_prior=float(population.user_prior[user]),
        language_prior=model.language_bias(language),
        has_secret=has_secret,
    )
    p = model.accept_probability(
        features.contexts,
        preference=float(population.traits.preference[user]),
        skill=float(population.traits.skill[user]),
        language=language,
    )
    return features, p


def draw_session(
    index: int,
    start_ms: int,
    config: SimulatorConfig,
    population: Population,
    model: HiddenModel,
) -> SessionPlan:
    """Session number ``index`` of the fleet, its first request at ``start_ms``.

    Deterministic in ``(config.seed, index, start_ms)``; independent of every policy.
    """
    rng = np.random.default_rng([config.seed, _SESSION_STREAM, index])
    user = population.pick_user(float(rng.random()))
    repos = population.user_repos[user]
    repo = repos[int(rng.integers(len(repos)))]
    language = population.repo_language[repo]
    n = int(rng.geometric(1.0 / config.sessions.mean_requests_per_session))
    d = BlockDraws(rng, n)
    think_ms = d.exponential(config.sessions.mean_seconds_between_requests * 1e3)
    gaps_ms = np.maximum(1, np.rint(think_ms))
    gaps_ms[0] = 0  # the first request opens the session
    has_secret = d.uniform() < config.suggestions.secret_fraction
    features, p = _draw_requests(d, config, population, model, user, language, has_secret)
    outcomes = _draw_outcomes(d, config, p, features.chars)
    s = config.suggestions
    return SessionPlan(
        index=index,
        # Namespaced by the fleet id like every other id (see ids.namespace_of).
        session_id=uuid_strings(
            np.random.default_rng(
                [config.seed, _SESSION_STREAM, index, namespace_of(config.fleet_id)]
            ),
            1,
        )[0],
        user=user,
        repo=repo,
        language=language,
        times_ms=(start_ms + np.cumsum(gaps_ms).astype(np.int64)).tolist(),
        contexts=features.contexts,
        context_rows=[tuple(row) for row in features.contexts.tolist()],
        p_accept=p,
        decision_u=d.uniform(),
        invoked=features.invoked.tolist(),
        chars=features.chars.tolist(),
        text_u=d.uniform().tolist(),
        secrets=[fake_secret(rng) if planted else None for planted in has_secret],
        latency_ms=d.lognormal_ms(s.latency_median_ms, s.latency_sigma).tolist(),
        rollout_trigger=(d.uniform() < config.rollouts.groups_per_1000_requests / 1e3).tolist(),
        idle_after_ms=int(rng.exponential(config.sessions.mean_seconds_between_sessions * 1e3)),
        outcomes=outcomes,
        edits=_draw_edits(d, config, p, outcomes.accepted_chars),
        tests=_draw_tests(d, config, int(population.repo_tests[repo])),
    )
