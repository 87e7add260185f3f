"""The simulator's configuration: one frozen dataclass tree holding every parameter, with defaults.

Each field's comment is its documentation (``docs/simulator.md`` explains the model behind them,
``simulator/configs/default.yaml`` lists them all with their defaults). Bounds are declared on
the field (``param(default, ge=…, le=…)``, see ``config_fields``) and checked on construction,
so an invalid config cannot exist. Files are read by
:func:`simulator.config_loading.load_config` and CLI flags applied by
:func:`simulator.config_loading.config_with_overrides` (both exported by ``simulator``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import ClassVar

from simulator.config_fields import check_bounds, config_error
from simulator.config_fields import param as _param


def _check_weights(
    key: str, names: tuple[str, ...], weights_key: str, weights: tuple[float, ...]
) -> None:
    if len(names) == 0 or len(set(names)) != len(names):
        raise config_error(key, f"{names!r} must be a non-empty list of distinct names")
    if len(weights) != len(names) or sum(weights) <= 0:
        raise config_error(
            weights_key, f"needs one weight ≥ 0 per entry of {key} ({len(names)}), not all zero"
        )


@dataclass(frozen=True)
class UsersConfig:
    """The simulated population: people, their repositories, editors and privacy settings."""

    PATH: ClassVar[str] = "users"

    n_users: int = _param(1000, ge=1)  # distinct users, ids user-0 … user-{n-1}
    languages: tuple[str, ...] = ("python", "typescript", "javascript", "java", "go", "rust", "cpp")
    language_weights: tuple[float, ...] = _param((0.3, 0.2, 0.14, 0.12, 0.1, 0.08, 0.06), ge=0)
    ides: tuple[str, ...] = ("vscode", "jetbrains", "neovim")  # editor families
    ide_weights: tuple[float, ...] = _param((0.6, 0.3, 0.1), ge=0)  # share of users per editor
    max_repos_per_user: int = _param(3, ge=1)  # each user owns 1..max repos (uniform)
    # Lognormal sigma of a user's activity weight; sessions pick users in proportion to it, so
    # sessions per user are heavy-tailed (0 = every user equally active).
    activity_sigma: float = _param(1.0, ge=0)
    privacy_mode_fraction: float = _param(0.1, ge=0, le=1)  # users whose code text never leaves
    typing_speed_spread: float = _param(0.7, ge=0)  # sd of a user's mean typing_speed feature

    def __post_init__(self) -> None:
        check_bounds(self)
        languages, weights = self.languages, self.language_weights
        _check_weights("users.languages", languages, "users.language_weights", weights)
        _check_weights("users.ides", self.ides, "users.ide_weights", self.ide_weights)


@dataclass(frozen=True)
class SessionsConfig:
    """Editor sessions and the simulated event-time clock that timestamps every event."""

    PATH: ClassVar[str] = "sessions"

    # Simulated time of the first request: ISO 8601 with a UTC offset, or "now" (wall clock at
    # fleet construction; runs are then no longer identical across invocations).
    start_time: str = "2025-01-06T09:00:00+00:00"
    # Sessions open at once, interleaved in event time (the simulated concurrent clients).
    concurrent_sessions: int = _param(64, ge=1)
    mean_requests_per_session: float = _param(40.0, ge=1)  # geometric, at least 1
    mean_seconds_between_requests: float = _param(20.0, gt=0)  # exponential think time
    mean_seconds_between_sessions: float = _param(300.0, ge=0)  # idle gap before a new session

    def __post_init__(self) -> None:
        check_bounds(self)
        parse_start_time(self.start_time)


def parse_start_time(text: str) -> datetime | None:
    """``sessions.start_time`` as an aware datetime; None for "now". Raises SimulatorError."""
    if text == "now":
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.utcoffset() is None:
        raise config_error(
            "sessions.start_time",
            f"{text!r} is not an ISO 8601 time with a UTC offset (2025-01-06T09:00:00+00:00) "
            "or 'now'",
        )
    return parsed


@dataclass(frozen=True)
class SuggestionsConfig:
    """Observable request features: sizes, cursor position, trigger, latency, planted secrets."""

    PATH: ClassVar[str] = "suggestions"

    mean_log_chars: float = _param(3.6, ge=0)  # mean of ln(suggestion chars): e^3.6 ≈ 37
    sigma_log_chars: float = _param(0.8, gt=0)  # sd of ln(suggestion chars)
    max_chars: int = _param(1500, ge=64)  # suggestion length cap in characters
    at_line_end_probability: float = _param(0.6, ge=0, le=1)  # cursor at the end of its line
    in_comment_probability: float = _param(0.15, ge=0, le=1)  # cursor inside a comment/string
    invoked_probability: float = _param(0.08, ge=0, le=1)  # trigger INVOKED instead of AUTOMATIC
    latency_median_ms: float = _param(120.0, gt=0)  # lognormal request → decision latency
    latency_sigma: float = _param(0.5, ge=0)
    # Share of suggestion texts carrying a planted fake AWS key id (AKIA…) or GitHub token
    # (ghp_…), so the SDK's redaction is exercised.
    secret_fraction: float = _param(0.01, ge=0, le=1)

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class HiddenWeights:
    """Weights of the observable context features in the hidden acceptance logit."""

    PATH: ClassVar[str] = "hidden_model.weights"

    prefix_log_chars: float = 0.15  # more code before the cursor → better suggestions
    suggestion_log_chars: float = -0.3  # long suggestions are accepted less
    model_confidence: float = 0.6  # the serving model's own confidence
    at_line_end: float = 0.25  # completing at line end is natural
    typing_speed: float = -0.2  # fast typers type through suggestions
    log_seconds_since_accept: float = -0.15  # a recent acceptance predicts another
    in_comment: float = -1.5  # suggestions inside comments are rarely wanted
    invoked: float = 1.0  # an explicit request is usually wanted


def _default_language_bias() -> Mapping[str, float]:
    biases = {"python": 0.15, "typescript": 0.1, "javascript": 0.0, "java": -0.1, "go": 0.05}
    return MappingProxyType({**biases, "rust": -0.2, "cpp": -0.25})


@dataclass(frozen=True)
class HiddenModelConfig:
    """The hidden acceptance model P(accept | context, user) (docs/simulator.md)."""

    PATH: ClassVar[str] = "hidden_model"

    base_logit: float = -0.65  # intercept of the acceptance logit
    weights: HiddenWeights = HiddenWeights()
    # Logit offset per language (every entry of users.languages needs one).
    language_bias: Mapping[str, float] = field(default_factory=_default_language_bias)
    preference_spread: float = _param(0.45, ge=0)  # sd of a user's hidden preference (logit)
    skeptic_fraction: float = _param(0.28, ge=0, le=1)  # users who mostly dislike suggestions
    skeptic_offset: float = -3.0  # logit added to a skeptic's preference
    skill_alpha: float = _param(2.0, gt=0)  # skill ~ Beta(alpha, beta) in [0, 1]
    skill_beta: float = _param(2.0, gt=0)
    skill_weight: float = 0.6  # logit per unit of (skill - 0.5)
    skill_length_weight: float = -0.4  # (skill - 0.5) * suggestion_log_chars: experts skip long
    # Sd of the per-user error in the user_accept_prior context feature (the client's estimate
    # of the user's preference): 0 makes the preference fully observable to a policy.
    user_signal_noise: float = _param(0.3, ge=0)

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class OutcomesConfig:
    """How a shown suggestion's outcome is reported."""

    PATH: ClassVar[str] = "outcomes"

    partial_fraction: float = _param(0.15, ge=0, le=1)  # acceptances that keep only a prefix
    partial_min_fraction: float = _param(0.2, gt=0, lt=1)  # a PARTIAL keeps U(min, 1) of chars
    # Rejections that send no outcome event (ignored: rewards count them as rejected).
    ignored_fraction: float = _param(0.1, ge=0, le=1)
    accept_median_ms: float = _param(700.0, gt=0)  # lognormal time to an acceptance
    reject_median_ms: float = _param(1800.0, gt=0)  # lognormal time to a rejection
    decision_sigma: float = _param(0.6, ge=0)

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class EditsConfig:
    """Edits to accepted code: how much of it survives."""

    PATH: ClassVar[str] = "edits"

    edit_probability: float = _param(0.6, ge=0, le=1)  # an accepted suggestion is edited later
    max_edits: int = _param(3, ge=1, le=8)  # an edited suggestion gets 1..max edits (uniform)
    mean_seconds_between_edits: float = _param(60.0, gt=0)  # exponential, from the acceptance
    # Each edit deletes a Beta-distributed share of the retained chars with this mean, scaled by
    # (1 - quality_weight * P(accept)): suggestions users like survive longer.
    mean_delete_fraction: float = _param(0.3, gt=0, lt=1)
    delete_concentration: float = _param(4.0, gt=0)  # Beta alpha + beta
    quality_weight: float = _param(0.7, ge=0, le=1)
    mean_chars_inserted: float = _param(20.0, ge=0)  # chars typed per edit: 1 + exponential

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class TestsConfig:
    """Test runs in the editor, attributed to the suggestions accepted before them."""

    PATH: ClassVar[str] = "tests"
    __test__: ClassVar[bool] = False  # not a pytest class

    run_probability: float = _param(0.05, ge=0, le=1)  # a test run starts at a request
    median_tests: float = _param(120.0, ge=1)  # lognormal test-suite size per repository
    tests_sigma: float = _param(0.8, ge=0)
    # A run fails 1 + Poisson(1) tests with this probability, whatever the suggestions did.
    baseline_failure_probability: float = _param(0.08, ge=0, le=1)
    # An accepted suggestion breaks a test with probability defect_probability * (1 - P(accept)).
    defect_probability: float = _param(0.3, ge=0, le=1)
    error_probability: float = _param(0.02, ge=0, le=1)  # the run errors on 1..3 tests
    ms_per_test: float = _param(40.0, gt=0)  # run duration per test (x lognormal, log-sd 0.3)

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class RolloutsConfig:
    """Agent tasks, each run as a group of parallel trials (GRPO-style groups)."""

    PATH: ClassVar[str] = "rollouts"

    groups_per_1000_requests: float = _param(2.0, ge=0)  # agent task groups per 1,000 requests
    group_size: int = _param(8, ge=1)  # parallel trials per group (N)
    n_tasks: int = _param(500, ge=1)  # task pool, ids task-0 … task-{n-1}
    difficulty_spread: float = _param(1.5, ge=0)  # sd of a task's difficulty (logit)
    agent_skill_logit: float = 0.0  # agent skill: trial quality = sigmoid(skill - difficulty + ε)
    trial_noise: float = _param(1.0, ge=0)  # sd of ε, the trial-to-trial variation in a group
    format_ok_probability: float = _param(0.95, ge=0, le=1)  # trial output well-formed
    model_name: str = "agent-lm"  # model_name of the RolloutResults
    model_version: int = _param(0, ge=0)
    median_tests: float = _param(12.0, ge=1)  # tests per task, lognormal with log-sd 0.5
    median_prompt_tokens: float = _param(4000.0, ge=1)  # lognormal over a trial
    median_completion_tokens: float = _param(300.0, ge=1)  # lognormal; one logprob per token
    tokens_sigma: float = _param(0.6, ge=0)
    max_completion_tokens: int = _param(2048, ge=1)
    mean_tool_calls: float = _param(6.0, ge=0)  # Poisson
    median_trial_seconds: float = _param(90.0, gt=0)  # lognormal, sigma = tokens_sigma

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class PolicyConfig:
    """The behaviour policy that decides SHOWN / SUPPRESSED, and its exploration floor.

    The floor applies to whatever policy the fleet serves, including one swapped in later.
    """

    PATH: ClassVar[str] = "policy"

    name: str = "heuristic"  # key in simulator.policy.POLICIES
    model_name: str = "suggestion-gate"  # model_name logged on SuggestionOffered
    show_probability: float = _param(0.95, ge=0, le=1)  # the heuristic's flat P(show)
    # Every decision keeps probability in [floor, 1 - floor], so logged propensities never reach
    # 0 or 1 and importance weights stay ≤ 1/floor.
    exploration_floor: float = _param(0.05, gt=0, lt=0.5)

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class SimulatorConfig:
    """Every parameter of the simulated IDE fleet and its hidden model (DESIGN §10)."""

    PATH: ClassVar[str] = ""

    seed: int = 7  # one seed decides every random draw of a run
    fleet_id: str = "fleet-0"  # events carry producer "simulator/<fleet_id>"
    users: UsersConfig = UsersConfig()
    sessions: SessionsConfig = SessionsConfig()
    suggestions: SuggestionsConfig = SuggestionsConfig()
    hidden_model: HiddenModelConfig = HiddenModelConfig()
    outcomes: OutcomesConfig = OutcomesConfig()
    edits: EditsConfig = EditsConfig()
    tests: TestsConfig = TestsConfig()
    rollouts: RolloutsConfig = RolloutsConfig()
    policy: PolicyConfig = PolicyConfig()

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise config_error("seed", f"{self.seed} must be ≥ 0")
        if not self.fleet_id or "/" in self.fleet_id:
            raise config_error("fleet_id", f"{self.fleet_id!r} must be non-empty without '/'")
        missing = set(self.users.languages) - set(self.hidden_model.language_bias)
        if missing:
            raise config_error(
                "hidden_model.language_bias", f"has no bias for {sorted(missing)}; add them"
            )
