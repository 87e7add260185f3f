"""Simulated users of the agent model's OpenAI-compatible API (DESIGN §12, real-time RL).

In a multi-turn environment (``repository``, the default) a user runs a **tool session** on
their own copy of a training task (``simulator.agent_sessions``): the served model calls the
tools through ``/v1/chat/completions``, the user executes them locally and sends the results
back, until the model submits. In a single-turn one (``program-synthesis``) a user asks the
served model to write the function of a training task (``POST /v1/completions``). Either way the
requests are sampled at the rollout workers' temperature (the served tokens are on-policy), and
the user reacts as the **hidden quality model** says: the sandbox result of hidden tests neither
the user nor the model sees. The reactions go out as ``AgentFeedback`` events through the SDK,
naming the completion (a session's last one); the joiner turns the completion and its reactions
into an ``agent_use@1`` Reward. Reactions (:func:`react`):

    ignored (p_ignore)     none: the completion carries no signal
    every test passes      ACCEPTED, TESTS_PASSED, and EDIT_PERSISTED with p_persist
    some tests pass        with p = the share passed: ACCEPTED, TESTS_FAILED (kept, not right)
    otherwise              REVERTED, and DISSATISFIED_FOLLOWUP with p_followup

The API's answers are handled as any client should: 429 and 503 wait (Retry-After) and retry;
any other error is counted and the user moves on.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from environments import ENVIRONMENTS, REPOSITORY
from environments.base import Score, Task, training_tasks
from environments.episodes import EpisodeLimits, MultiTurnEnvironment
from schemas.enums import AgentReaction
from schemas.events import AgentFeedback
from simulator.agent_sessions import CONTEXT_FULL, run_session
from simulator.errors import SimulatorError

_RETRY_STATUSES = (429, 503)  # back-pressure and "no version yet": wait, then try again
COMPLETIONS_PATH, CHAT_PATH = "/v1/completions", "/v1/chat/completions"


@dataclass(frozen=True)
class AgentUsersConfig:
    """How the simulated agent users behave."""

    model: str = "agent-lm"
    environment: str = REPOSITORY
    users: int = 16
    rate_per_s: float = 2.0  # requests (multi-turn: sessions) per second, all users together
    concurrency: int = 4  # requests (sessions) in flight (the server batches them)
    requests_per_session: int = 5  # single-turn: one session holds this many requests
    temperature: float = 1.0
    max_tokens: int = 24  # per completion (per turn)
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)  # multi-turn episodes
    p_ignore: float = 0.1
    p_persist: float = 0.8
    p_followup: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        probabilities = (self.p_ignore, self.p_persist, self.p_followup)
        if not all(0 <= p <= 1 for p in probabilities):
            raise SimulatorError(f"agent users' probabilities must be in [0, 1]: {self}")
        if min(self.users, self.concurrency, self.requests_per_session, self.max_tokens) < 1:
            raise SimulatorError(f"agent users need counts >= 1: {self}")
        if self.rate_per_s <= 0 or self.temperature < 0:
            raise SimulatorError(f"agent users need rate_per_s > 0, temperature >= 0: {self}")


def react(score: Score, rng: random.Random, config: AgentUsersConfig) -> tuple[AgentReaction, ...]:
    """A user's reactions to a completion whose hidden tests scored ``score``."""
    if rng.random() < config.p_ignore:
        return ()
    if score.passed:
        persisted = (AgentReaction.EDIT_PERSISTED,) if rng.random() < config.p_persist else ()
        return (AgentReaction.ACCEPTED, AgentReaction.TESTS_PASSED, *persisted)
    share = score.tests_passed / score.tests_total if score.tests_total else 0.0
    if rng.random() < share:
        return (AgentReaction.ACCEPTED, AgentReaction.TESTS_FAILED)
    followup = (AgentReaction.DISSATISFIED_FOLLOWUP,) if rng.random() < config.p_followup else ()
    return (AgentReaction.REVERTED, *followup)


@dataclass
class AgentUserStats:
    """What the users saw: requests answered, errors by status, completions by version."""

    requests: int = 0
    sessions: int = 0  # multi-turn sessions finished
    turns: int = 0  # their completions (also in requests)
    retried: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    feedback: int = 0
    by_version: dict[int, list[int]] = field(default_factory=dict)  # version → [served, passed]

    def line(self) -> str:
        versions = ", ".join(
            f"v{v} {p / n:.0%} of {n}" for v, (n, p) in sorted(self.by_version.items()) if n
        )
        # Errors by kind, so that a line says why (e.g. ConnectError while the server starts).
        errors = ", ".join(f"{kind} {n}" for kind, n in self.errors.most_common()) or "none"
        sessions = (
            f"{self.sessions:,} sessions ({self.turns / self.sessions:.1f} turns each), "
            if self.sessions
            else ""
        )
        return (
            f"{sessions}{self.requests:,} completions, {self.feedback:,} reactions, "
            f"{self.retried} retried, errors: {errors}; tests passed by version: "
            f"{versions or 'none yet'}"
        )


class AgentUsers:
    """Runs the users against ``base_url`` until stopped; ``send`` emits each reaction."""

    def __init__(
        self,
        config: AgentUsersConfig,
        base_url: str,
        send: Callable[[AgentFeedback], None],
        *,
        api_key: str | None = None,
        name: str = "agent-users",
        client: httpx.Client | None = None,
    ) -> None:
        self.config, self.send, self.name = config, send, name
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = client or httpx.Client(base_url=base_url, headers=headers, timeout=120.0)
        self._environment = ENVIRONMENTS.get_any(config.environment)
        self._tasks: Iterator[Task] = training_tasks(ENVIRONMENTS, config.environment, config.seed)
        self._rng = random.Random(config.seed)
        self._lock = threading.Lock()
        self._next_at = time.monotonic()
        self._asked = 0
        self.stats = AgentUserStats()

    def run(self, stop: threading.Event, max_requests: int | None = None) -> AgentUserStats:
        """Send requests at ``rate_per_s`` from ``concurrency`` threads until ``stop`` is set
        (or ``max_requests`` were answered); returns the stats."""
        threads = [
            threading.Thread(target=self._user_loop, args=(stop, max_requests),
                             name=f"{self.name}-{i}", daemon=True)
            for i in range(self.config.concurrency)
        ]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.stats

    def close(self) -> None:
        self._http.close()

    def _user_loop(self, stop: threading.Event, max_requests: int | None) -> None:
        while not stop.is_set():
            turn = self._next_turn(stop, max_requests)
            if turn is None:
                return
            user, session, task, rng = turn
            self._one(user, session, task, rng, stop)

    def _next_turn(
        self, stop: threading.Event, max_requests: int | None
    ) -> tuple[str, str, Task, random.Random] | None:
        """Wait for the next request slot; the user, session, task and a seeded rng for it."""
        with self._lock:
            if max_requests is not None and self._asked >= max_requests:
                return None
            n = self._asked
            self._asked += 1
            wait = self._next_at - time.monotonic()
            self._next_at = max(self._next_at, time.monotonic()) + 1.0 / self.config.rate_per_s
            user = self._rng.randrange(self.config.users)
            task = next(self._tasks)
            rng = random.Random(self._rng.getrandbits(64))
        if wait > 0 and stop.wait(wait):
            return None
        if isinstance(self._environment, MultiTurnEnvironment):
            session = f"{self.name}-u{user}-s{n}"  # a tool session per slot
        else:
            per_session = self.config.users * self.config.requests_per_session
            session = f"{self.name}-u{user}-s{n // per_session}"
        return f"{self.name}-u{user}", session, task, rng

    def _one(
        self, user: str, session: str, task: Task, rng: random.Random, stop: threading.Event
    ) -> None:
        c = self.config
        request = {"model": c.model, "max_tokens": c.max_tokens, "temperature": c.temperature,
                   "user": user, "session_id": session}  # fmt: skip
        environment = self._environment
        if isinstance(environment, MultiTurnEnvironment):
            result = run_session(lambda body: self._post(CHAT_PATH, body, stop), environment,
                                 task, request, c.limits)  # fmt: skip
            if result.last_completion_id is None:
                return  # nothing was served: no completion to react to
            score, completion_id, version = result.score, result.last_completion_id, result.version
            served_turns = result.turns
        else:
            body = {**request, "prompt": environment.reset(task)}
            answer = self._post(COMPLETIONS_PATH, body, stop)
            if answer is None or answer is CONTEXT_FULL:
                return
            served = answer.get("flywheel", {})
            score = environment.score(task, answer["choices"][0]["text"])
            completion_id = served.get("completion_ids", [f"{answer['id']}:0"])[0]
            version, served_turns = int(served.get("version", 0)), 0
        reactions = react(score, rng, c)
        share = score.tests_passed / score.tests_total if score.tests_total else 0.0
        for reaction in reactions:
            tests = reaction in (AgentReaction.TESTS_PASSED, AgentReaction.TESTS_FAILED)
            self.send(
                AgentFeedback(
                    producer=f"sim/{self.name}", event_time=datetime.now(UTC),
                    completion_id=completion_id, session_id=session, user_id=user,
                    reaction=reaction, value=share if tests else None,
                )
            )  # fmt: skip
        with self._lock:
            self.stats.requests += max(served_turns, 1)
            self.stats.sessions += int(served_turns > 0)
            self.stats.turns += served_turns
            self.stats.feedback += len(reactions)
            tally = self.stats.by_version.setdefault(version, [0, 0])
            tally[0] += 1
            tally[1] += int(score.passed)

    def _post(
        self, path: str, body: dict[str, Any], stop: threading.Event
    ) -> Mapping[str, Any] | None:
        """The answer's JSON; CONTEXT_FULL when the conversation no longer fits the model;
        None after another error (counted) or when stopped while waiting."""
        while not stop.is_set():
            try:
                response = self._http.post(path, json=body)
            except httpx.HTTPError as exc:
                self._error(type(exc).__name__)
                stop.wait(1.0)
                return None
            if response.status_code in _RETRY_STATUSES:
                with self._lock:
                    self.stats.retried += 1
                stop.wait(float(response.headers.get("Retry-After", "1")))
                continue
            if response.status_code == 400 and _code(response) == "context_length_exceeded":
                return CONTEXT_FULL
            if response.status_code != 200:
                self._error(str(response.status_code))
                return None
            answer: dict[str, Any] = response.json()
            return answer
        return None

    def _error(self, kind: str) -> None:
        with self._lock:
            self.stats.errors[kind] += 1


def _code(response: httpx.Response) -> str | None:
    """The OpenAI error code of an error response, if it has one."""
    try:
        error = response.json().get("error") or {}
    except ValueError:
        return None
    return error.get("code") if isinstance(error, dict) else None
