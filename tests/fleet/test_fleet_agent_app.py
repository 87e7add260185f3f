"""The agent's OpenAI API against a stand-in replica (the real-stack test is
test_fleet_agent_serving_integration.py): responses, streams, events, errors, back-pressure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from fleet.agent_app import create_agent_app
from fleet.agent_engine import Engine, Job
from fleet.prefix_cache import PrefixCache
from fleet.rollout_worker import AgentPolicy
from fleet.subscriber import Routed, ServedModel, ServingSnapshot
from policies.agent_sampling import SamplingParams, sample
from schemas.enums import Channel
from schemas.events import AgentCompletion
from streams.gateway.keys import ApiKeyStore
from tests.fleet.agent_lm_fixture import LONG_PREFIX, tiny_lm

MODEL = "agent-lm"


class Replica:
    """What the app reads from a ModelSubscriber: v2 in production, v3 canary for users 'c*'."""

    model_name = MODEL
    replica_id = "replica-a"
    rejected = 0

    def __init__(self, policy: AgentPolicy | None) -> None:
        self.policy = policy
        self.snapshot: ServingSnapshot[Any] = ServingSnapshot(
            ServedModel(Channel.PRODUCTION, 2, policy, "a" * 64, 1.0) if policy else None,
            ServedModel(Channel.CANARY, 3, policy, "b" * 64, 0.1) if policy else None,
        )

    @property
    def serving_version(self) -> int:
        return 2 if self.policy else 0

    def route(self, user_id: str) -> Routed[Any]:
        if self.policy is None:
            return Routed(Channel.PRODUCTION, 0, None)
        if user_id.startswith("c"):
            return Routed(Channel.CANARY, 3, self.policy)
        return Routed(Channel.PRODUCTION, 2, self.policy)


@pytest.fixture(scope="module")
def policy() -> AgentPolicy:
    model, tokenizer = tiny_lm()
    return AgentPolicy(model, tokenizer)


@pytest.fixture
def served(
    policy: AgentPolicy, tmp_path: Path
) -> Iterator[tuple[TestClient, list[AgentCompletion], str, ApiKeyStore]]:
    keys = ApiKeyStore(tmp_path / "keys.json")
    secret = keys.add("ide")
    events: list[AgentCompletion] = []
    engine = Engine(prefix_cache=PrefixCache(min_tokens=16))
    engine.start()
    app = create_agent_app(Replica(policy), engine, events.append, keys=keys, producer="serve/t")
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {secret}"
        yield client, events, secret, keys
    engine.close()


def greedy(policy: AgentPolicy, prompt: str, max_tokens: int) -> Any:
    params = SamplingParams(temperature=0.0, max_new_tokens=max_tokens)
    return sample(policy.model, policy.tokenizer, [prompt], 1, params)[0][0]


def wait_for(events: list[AgentCompletion], n: int) -> None:
    import time

    deadline = time.monotonic() + 10
    while len(events) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(events) == n


def test_a_completion_is_greedy_decoding_with_usage_ids_and_one_event(served, policy) -> None:  # type: ignore[no-untyped-def]
    client, events, _, _ = served
    body = {"model": MODEL, "prompt": "def f3(x):\n", "max_tokens": 10, "temperature": 0,
            "user": "u1", "session_id": "s-1"}  # fmt: skip
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    data = response.json()
    want = greedy(policy, "def f3(x):\n", 10)
    assert data["object"] == "text_completion"
    assert data["choices"][0]["text"] == want.text
    assert data["usage"]["completion_tokens"] == len(want.token_ids)
    assert data["flywheel"] == {"version": 2, "channel": "production",
                                "completion_ids": [f"{data['id']}:0"]}  # fmt: skip
    wait_for(events, 1)
    event = events[0]
    assert (event.completion_id, event.session_id, event.user_id) == (
        f"{data['id']}:0",
        "s-1",
        "u1",
    )
    assert event.completion_token_ids == want.token_ids
    assert event.behaviour_logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert (event.model_version, event.channel, event.api_key) == (2, "production", "ide")
    assert event.prompt_tokens == len(want.prompt_ids)


def test_chat_n_choices_and_the_canary_by_user(served) -> None:  # type: ignore[no-untyped-def]
    client, events, _, _ = served
    body = {"model": MODEL, "messages": [{"role": "user", "content": "def f3(x):"}],
            "max_tokens": 6, "n": 3, "user": "carol"}  # fmt: skip
    data = client.post("/v1/chat/completions", json=body).json()
    assert data["object"] == "chat.completion"
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    assert all(c["message"]["role"] == "assistant" for c in data["choices"])
    assert data["flywheel"]["channel"] == "canary"
    wait_for(events, 3)
    assert {e.choice_index for e in events} == {0, 1, 2}
    assert {e.model_version for e in events} == {3}


def test_a_stream_carries_the_same_text_then_usage_and_done(served, policy) -> None:  # type: ignore[no-untyped-def]
    client, events, _, _ = served
    body = {"model": MODEL, "prompt": "def f12(x):\n", "max_tokens": 12, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    with client.stream("POST", "/v1/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == greedy(policy, "def f12(x):\n", 12).text
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    wait_for(events, 1)


def test_a_chat_stream_starts_with_the_role(served) -> None:  # type: ignore[no-untyped-def]
    client, _, _, _ = served
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "stream": True}  # fmt: skip
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = [line for line in response.iter_lines() if line]
    first = json.loads(lines[0].removeprefix("data: "))
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"]["role"] == "assistant"


def test_prefix_cache_and_prediction_keep_the_tokens_and_report_cached_tokens(
    served, policy
) -> None:  # type: ignore[no-untyped-def]
    client, events, _, _ = served
    base = {"model": MODEL, "max_tokens": 8, "temperature": 0}
    client.post("/v1/completions", json={**base, "prompt": LONG_PREFIX + "def f1(x):\n"})
    second = client.post("/v1/completions", json={**base, "prompt": LONG_PREFIX + "def f2(x):\n"})
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 300
    assert (
        second.json()["choices"][0]["text"] == greedy(policy, LONG_PREFIX + "def f2(x):\n", 8).text
    )
    original = "def f5(x):\n    return x + 5\n"
    edit = {**base, "prompt": original + "# again:\n",
            "prediction": {"type": "content", "content": original}}  # fmt: skip
    got = client.post("/v1/completions", json=edit).json()["choices"][0]["text"]
    assert got == greedy(policy, original + "# again:\n", 8).text
    wait_for(events, 3)
    assert [e.speculative for e in events] == [False, False, True]


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"prompt": "x"}, 400, "model", "missing_required_parameter"),
        ({"model": "gpt-9", "prompt": "x"}, 404, "model", "model_not_found"),
        ({"model": MODEL, "prompt": "x", "temperature": "hot"}, 400, "temperature", None),
        ({"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens", None),
        ({"model": MODEL, "prompt": "x", "n": 99}, 400, "n", None),
        ({"model": MODEL, "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop", None),
        ({"model": MODEL, "prompt": 5}, 400, "prompt", None),
        ({"model": MODEL, "prompt": [99999]}, 400, "prompt", None),
        ({"model": MODEL, "prompt": "x", "stream": "yes"}, 400, "stream", None),
        ({"model": MODEL, "prompt": "x " * 2000}, 400, "prompt", "context_length_exceeded"),
        ([1, 2], 400, None, None),
    ],
)
def test_bad_requests_get_openai_errors_naming_the_parameter(
    served, body, status, param, code
) -> None:  # type: ignore[no-untyped-def]
    client, events, _, _ = served
    response = client.post("/v1/completions", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert error["message"]
    assert events == []


def test_malformed_json_keys_and_unknown_routes(served) -> None:  # type: ignore[no-untyped-def]
    client, _, _, keys = served
    bad = client.post(
        "/v1/completions", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400
    assert "JSON" in bad.json()["error"]["message"]
    anonymous = client.post("/v1/completions", json={"model": MODEL, "prompt": "x"},
                            headers={"Authorization": ""})  # fmt: skip
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "invalid_api_key"
    keys.revoke("ide")
    revoked = client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
    assert revoked.status_code == 403
    assert client.get("/v1/models/other").status_code == 404


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "agent-lm", "prompt": "\xff"}',  # not UTF-8
        b'{"model": "agent-lm", "prompt": "\xed\xa0\x80"}',  # a surrogate, UTF-8-encoded
        b'{"model": "agent-lm", "prompt": "\\ud800"}',  # valid JSON, a lone surrogate
        b'{"model": "agent-lm", "messages": [{"role": "user", "content": "\\udc00"}]}',
        b'{"model": "agent-lm", "prompt": "x", "user": "\\ud800"}',
        "{}".encode("utf-16"),  # JSON, but not in UTF-8
        b"[" * 100_000 + b"]" * 100_000,  # nests past the parser's depth
        b'"a string"',
        b"null",
        b'{"model": "agent-lm", "prompt": "x", "max_tokens": "8"}',
        b'{"model": "agent-lm", "prompt": "x", "n": 1.5}',
        b'{"model": "agent-lm", "prompt": "x", "stop": [1]}',
        b'{"model": "agent-lm", "prompt": "x", "messages": 5, "prediction": 5}',
        b'{"model": "agent-lm", "messages": [{"role": "user", "content": [{"text": 5}]}]}',
        b'{"model": 5, "prompt": "x", "messages": [{"role": "user", "content": "x"}]}',
    ],
)
def test_malformed_bodies_are_400s_in_openai_shape(served, path: str, raw: bytes) -> None:  # type: ignore[no-untyped-def]
    client, events, _, _ = served
    response = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    assert events == []


def test_models_health_and_metrics(served) -> None:  # type: ignore[no-untyped-def]
    client, _, _, _ = served
    models = client.get("/v1/models").json()
    assert models["data"][0]["id"] == MODEL
    assert models["data"][0]["flywheel"]["canary"]["version"] == 3
    assert client.get(f"/v1/models/{MODEL}").json()["object"] == "model"
    assert client.get("/healthz").status_code == 200
    client.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
    text = client.get("/metrics").text
    assert 'flywheel_serving_requests_total{route="/v1/completions",status="200"}' in text


def test_no_version_yet_and_a_full_queue_answer_with_retry_after(policy, tmp_path) -> None:  # type: ignore[no-untyped-def]
    idle = create_agent_app(Replica(None), Engine(), [].append, keys=None, producer="serve/t")
    with TestClient(idle) as client:
        response = client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    engine = Engine(max_queue=1)  # never started: the queue stays full
    engine.submit(Job(policy.model, policy.tokenizer, [1], SamplingParams(max_new_tokens=16)))
    busy = create_agent_app(Replica(policy), engine, [].append, keys=None, producer="serve/t")
    with TestClient(busy) as client:
        response = client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "1"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    engine.close()
