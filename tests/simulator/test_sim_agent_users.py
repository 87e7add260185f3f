"""Simulated agent users: the reaction model, and a run against the real API app (in process,
a tiny LM; the real-stack loop is the demo's end-to-end test)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from environments import PROGRAM_SYNTHESIS
from environments.base import Score
from fleet.agent_app import create_agent_app
from fleet.agent_engine import Engine
from fleet.rollout_worker import AgentPolicy
from schemas.enums import AgentReaction
from schemas.events import AgentCompletion, AgentFeedback
from simulator.agent_users import AgentUsers, AgentUsersConfig, react
from simulator.errors import SimulatorError
from streams.gateway.keys import ApiKeyStore
from tests.fleet.agent_lm_fixture import tiny_lm
from tests.fleet.test_fleet_agent_app import Replica

A = AgentReaction


class Draws(random.Random):
    """``random()`` returns the given draws in order."""

    def __init__(self, *draws: float) -> None:
        super().__init__(0)
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


def score(passed: int, total: int = 4) -> Score:
    return Score({"tests": passed / total}, passed, total, "ok")


def test_reactions_follow_the_hidden_tests() -> None:
    c = AgentUsersConfig(p_ignore=0.1, p_persist=0.8, p_followup=0.5)
    assert react(score(4), Draws(0.5, 0.1), c) == (A.ACCEPTED, A.TESTS_PASSED, A.EDIT_PERSISTED)
    assert react(score(4), Draws(0.5, 0.9), c) == (A.ACCEPTED, A.TESTS_PASSED)
    assert react(score(3), Draws(0.5, 0.7), c) == (A.ACCEPTED, A.TESTS_FAILED)  # 0.7 < 3/4
    assert react(score(3), Draws(0.5, 0.8, 0.4), c) == (A.REVERTED, A.DISSATISFIED_FOLLOWUP)
    assert react(score(0), Draws(0.5, 0.0, 0.6), c) == (A.REVERTED,)
    assert react(score(4), Draws(0.05), c) == ()  # ignored


def test_config_names_what_is_wrong() -> None:
    with pytest.raises(SimulatorError, match="probabilities"):
        AgentUsersConfig(p_ignore=1.5)
    with pytest.raises(SimulatorError, match="rate_per_s"):
        AgentUsersConfig(rate_per_s=0)


@pytest.fixture(scope="module")
def policy() -> AgentPolicy:
    model, tokenizer = tiny_lm()
    return AgentPolicy(model, tokenizer)


@pytest.fixture
def api(
    policy: AgentPolicy, tmp_path: Path
) -> Iterator[tuple[TestClient, list[AgentCompletion], str]]:
    keys = ApiKeyStore(tmp_path / "keys.json")
    secret = keys.add("ide")
    events: list[AgentCompletion] = []
    engine = Engine()
    engine.start()
    app = create_agent_app(Replica(policy), engine, events.append, keys=keys, producer="serve/t")
    with TestClient(app) as client:
        yield client, events, secret
    engine.close()


def test_users_call_the_api_and_react_to_each_completion(
    api: tuple[TestClient, list[AgentCompletion], str],
) -> None:
    client, events, secret = api
    client.headers["Authorization"] = f"Bearer {secret}"
    sent: list[AgentFeedback] = []
    config = AgentUsersConfig(environment=PROGRAM_SYNTHESIS, users=3, rate_per_s=100,
                              concurrency=2, max_tokens=6, p_ignore=0)  # fmt: skip
    users = AgentUsers(config, "unused", sent.append, client=client)
    stats = users.run(threading.Event(), max_requests=6)
    assert (stats.requests, sum(stats.errors.values())) == (6, 0)
    assert len(events) == 6 and stats.by_version[2][0] == 6  # users 'agent-users-u*': production
    served = {e.completion_id for e in events}
    assert {f.completion_id for f in sent} == served  # every completion got a reaction
    assert stats.feedback == len(sent) >= 6
    sessions = {e.completion_id: e.session_id for e in events}
    assert all(f.session_id == sessions[f.completion_id] for f in sent)
    assert all(e.temperature == 1.0 and e.completion_token_ids for e in events)  # on-policy


def test_a_rejected_request_is_counted_and_the_users_go_on(
    api: tuple[TestClient, list[AgentCompletion], str],
) -> None:
    client, _, _ = api
    client.headers["Authorization"] = "Bearer wrong"
    config = AgentUsersConfig(environment=PROGRAM_SYNTHESIS, rate_per_s=100)
    users = AgentUsers(config, "unused", lambda _: None, client=client)
    stats = users.run(threading.Event(), max_requests=2)
    assert stats.requests == 0 and stats.errors == {"401": 2}


def test_a_server_without_a_model_yet_is_waited_for(tmp_path: Path) -> None:
    engine = Engine()
    app = create_agent_app(Replica(None), engine, lambda _: None, keys=None, producer="serve/t")
    stop = threading.Event()
    with TestClient(app) as client:
        config = AgentUsersConfig(environment=PROGRAM_SYNTHESIS, rate_per_s=100)
        users = AgentUsers(config, "unused", lambda _: None, client=client)
        threading.Timer(1.5, stop.set).start()
        stats = users.run(stop, max_requests=1)
    assert stats.requests == 0 and stats.retried >= 1 and not stats.errors  # 503: waits
