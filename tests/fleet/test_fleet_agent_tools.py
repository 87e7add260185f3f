"""OpenAI function calling end to end: the stock `openai` client against the agent app, the real
engine and a tiny real model whose outputs a test scripts (``agent_tools_fixture``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI
from starlette.testclient import TestClient

from environments.episode_runner import tokenize_segments
from fleet.agent_app import create_agent_app
from fleet.agent_engine import Engine
from fleet.prefix_cache import PrefixCache
from fleet.rollout_worker import AgentPolicy
from policies.agent_chat import render, segments
from schemas.events import AgentCompletion
from tests.fleet.agent_lm_fixture import ids
from tests.fleet.agent_tools_fixture import (
    MODEL,
    TOOLS,
    Replica,
    script,
    tiny_chat_lm,
    unscript,
)

TASK = "Fix the bug in a.py"
READ = '<tool_call>{"name":"read_file","arguments":{"path":"a.py"}}</tool_call>'
SUBMIT = '<tool_call>{"name":"submit","arguments":{}}</tool_call>'


@pytest.fixture(scope="module")
def policy() -> AgentPolicy:
    return tiny_chat_lm()


@pytest.fixture
def served(policy: AgentPolicy) -> Iterator[tuple[OpenAI, TestClient, list[AgentCompletion]]]:
    events: list[AgentCompletion] = []
    engine = Engine(prefix_cache=PrefixCache(min_tokens=16))
    engine.start()
    app = create_agent_app(Replica(policy), engine, events.append, keys=None, producer="serve/t")
    with TestClient(app) as http:
        yield OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http), http, events
    engine.close()
    unscript(policy)


def wait_for(events: list[AgentCompletion], n: int) -> None:
    deadline = time.monotonic() + 10
    while len(events) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(events) == n


def ask(client: OpenAI, messages: list[dict[str, Any]], **extra: Any) -> Any:
    body: dict[str, Any] = {"tools": TOOLS, "temperature": 0, "max_tokens": 120, **extra}
    return client.chat.completions.create(model=MODEL, messages=messages, **body)  # type: ignore[arg-type]


def streamed(client: OpenAI, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The choice a stream carries, put together as a client library does."""
    content, calls, reason, roles = "", [], None, []
    for chunk in ask(client, messages, stream=True, **extra):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        roles += [delta.role] if delta.role else []
        content += delta.content or ""
        for call in delta.tool_calls or []:
            if call.id:
                calls.append({"id": call.id, "name": call.function.name, "arguments": ""})
            calls[call.index]["arguments"] += call.function.arguments or ""
        reason = chunk.choices[0].finish_reason or reason
        assert "<tool_call>" not in (delta.content or "") or not calls
    assert roles == ["assistant"]
    return {"content": content or None, "calls": calls, "finish_reason": reason}


def plain(response: Any) -> dict[str, Any]:
    choice = response.choices[0]
    calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in choice.message.tool_calls or []
    ]
    return {
        "content": choice.message.content,
        "calls": calls,
        "finish_reason": choice.finish_reason,
    }


def test_a_tool_session_runs_to_submit_and_its_prompt_marks_the_models_turns(
    served, policy
) -> None:  # type: ignore[no-untyped-def]
    client, _, events = served
    written = script(policy, TASK + "\n<|assistant|>", "Let me look." + READ)
    script(policy, "x = 1\n<|assistant|>", SUBMIT)
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    first = ask(client, messages, extra_body={"session_id": "s-1"})
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "read_file",
        {"path": "a.py"},
    )
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "x = 1"})
    second = ask(client, messages, extra_body={"session_id": "s-1"})
    (done,) = second.choices[0].message.tool_calls
    assert (done.function.name, json.loads(done.function.arguments)) == ("submit", {})
    assert second.choices[0].message.content is None
    wait_for(events, 2)
    one, two = events
    assert (one.turn, two.turn) == (0, 1)
    assert (one.tool_call_ids, one.tool_call_names) == ((call.id,), ("read_file",))
    assert two.tool_call_names == ("submit",)
    assert one.completion_token_ids == tuple(written)
    assert one.completion_text == "Let me look." + READ
    assert (one.prompt_mask, one.prompt_logprobs) == ((), ())
    # The second prompt is the first prompt, the first turn as the model wrote it, the tool's
    # output: an episode's ids, token for token; exactly the model's tokens are marked.
    tokenizer = policy.tokenizer
    pieces = segments(messages, tokenizer.eos_token, TOOLS, add_generation_prompt=True)
    assert list(two.prompt_token_ids) == tokenize_segments(tokenizer, pieces)[0]
    assert tokenizer.decode(two.prompt_token_ids) == render(messages, "<|eos|>", TOOLS, True)
    start = len(one.prompt_token_ids)
    assert two.prompt_token_ids[:start] == one.prompt_token_ids
    marked = [i for i, m in enumerate(two.prompt_mask) if m]
    assert marked == list(range(start, start + len(written)))
    assert [two.prompt_token_ids[i] for i in marked] == list(one.completion_token_ids)
    assert [two.prompt_logprobs[i] for i in marked] == pytest.approx(one.behaviour_logprobs)
    assert any(lp < 0 for lp in one.behaviour_logprobs)
    assert sum(two.prompt_logprobs) == pytest.approx(sum(one.behaviour_logprobs))
    assert len(two.prompt_mask) == len(two.prompt_logprobs) == two.prompt_tokens


def test_a_stream_with_tools_equals_the_plain_response(served, policy) -> None:  # type: ignore[no-untyped-def]
    client, _, events = served
    script(policy, TASK + "\n<|assistant|>", "Let me look." + READ)
    messages = [{"role": "user", "content": TASK}]
    want, got = plain(ask(client, messages)), streamed(client, messages)
    assert want["calls"] and got["calls"]
    for a, b in zip(want["calls"], got["calls"], strict=True):
        assert a["id"] != b["id"] and b["id"].startswith("call_")
        a["id"] = b["id"] = None
    assert got == want
    assert want["content"] == "Let me look." and want["finish_reason"] == "tool_calls"
    # The same for a malformed call and for a reply without one.
    script(policy, "Break it\n<|assistant|>", '<tool_call>{"name":"read_file","arguments":{"path":')
    script(policy, "Say hi\n<|assistant|>", "hi <tool x")
    for task in ("Break it", "Say hi"):
        messages = [{"role": "user", "content": task}]
        assert streamed(client, messages) == plain(ask(client, messages))
    wait_for(events, 6)


def test_tool_choice_required_named_and_none(served, policy) -> None:  # type: ignore[no-untyped-def]
    client, _, events = served
    go = ids(policy.tokenizer, "Go\n<|assistant|>")  # then the prefill, tokenized alone
    script(policy, go + ids(policy.tokenizer, "<tool_call>"), SUBMIT[len("<tool_call>") :])
    named = '<tool_call>{"name":"read_file","arguments":'
    script(policy, go + ids(policy.tokenizer, named), '{"path":"b.py"}}</tool_call>')
    script(policy, "Look\n<|assistant|>", READ)  # for auto and none (a prefill would follow it)
    messages = [{"role": "user", "content": "Go"}]
    required = plain(ask(client, messages, tool_choice="required"))
    assert [(c["name"], c["arguments"]) for c in required["calls"]] == [("submit", "{}")]
    choice = {"type": "function", "function": {"name": "read_file"}}
    chosen = plain(ask(client, messages, tool_choice=choice))
    assert [json.loads(c["arguments"]) for c in chosen["calls"]] == [{"path": "b.py"}]
    assert chosen["finish_reason"] == "tool_calls"
    assert streamed(client, messages, tool_choice=choice)["calls"][0]["name"] == "read_file"
    messages = [{"role": "user", "content": "Look"}]
    auto = plain(ask(client, messages))
    assert auto["calls"][0]["name"] == "read_file"
    none = plain(ask(client, messages, tool_choice="none"))  # the call is text; no tools shown
    assert (none["content"], none["calls"], none["finish_reason"]) == (READ, [], "stop")
    wait_for(events, 5)
    assert events[1].completion_text == named + '{"path":"b.py"}}</tool_call>'
    assert events[1].prompt_token_ids[-len(ids(policy.tokenizer, named)) :] == tuple(
        ids(policy.tokenizer, named)
    )
    assert "Tools:" in policy.tokenizer.decode(events[3].prompt_token_ids)
    assert "Tools:" not in policy.tokenizer.decode(events[4].prompt_token_ids)
    assert events[4].tool_call_error is None and events[4].tool_call_ids == ()


def test_a_malformed_call_comes_back_as_text_and_is_counted(served, policy) -> None:  # type: ignore[no-untyped-def]
    client, http, events = served
    broken = '<tool_call>{"name":"read_file","arguments":{"path":'
    script(policy, "Break it\n<|assistant|>", broken)
    script(
        policy, "Call x\n<|assistant|>", '<tool_call>{"name":"rm_rf","arguments":{}}</tool_call>'
    )
    got = plain(ask(client, [{"role": "user", "content": "Break it"}]))
    assert (got["content"], got["calls"], got["finish_reason"]) == (broken, [], "stop")
    unknown = plain(ask(client, [{"role": "user", "content": "Call x"}]))
    assert unknown["calls"] == [] and unknown["finish_reason"] == "stop"
    wait_for(events, 2)
    assert events[0].tool_call_error and "unclosed" in events[0].tool_call_error
    assert events[1].tool_call_error and "rm_rf" in events[1].tool_call_error
    assert events[0].finish_reason == "stop" and events[0].tool_call_ids == ()
    metrics = http.get("/metrics").text
    assert 'flywheel_agent_malformed_tool_calls_total{model="agent-lm",version="2"} 2.0' in metrics


def test_bad_tool_requests_are_400s_naming_the_parameter(served) -> None:  # type: ignore[no-untyped-def]
    client, _, events = served
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
    }
    turn = {"role": "assistant", "content": None, "tool_calls": [call]}
    cases: list[tuple[dict[str, Any], str, str | None]] = [
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "tool", "tool_call_id": "call_9", "content": "out"},
                ]
            },
            "messages[1].tool_call_id",
            "invalid_tool_call_id",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    turn,
                    {"role": "tool", "tool_call_id": "call_2", "content": "out"},
                ]
            },
            "messages[2].tool_call_id",
            "invalid_tool_call_id",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {
                        **turn,
                        "tool_calls": [
                            {**call, "function": {"name": "read_file", "arguments": "{not json"}}
                        ],
                    },
                ]
            },
            "messages[1].tool_calls[0]",
            None,
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {
                        **turn,
                        "tool_calls": [
                            {**call, "function": {"name": "read_file", "arguments": "[1]"}}
                        ],
                    },
                ]
            },
            "messages[1].tool_calls[0]",
            None,
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {**turn, "tool_calls": [{"type": "function"}]},
                ]
            },
            "messages[1].tool_calls[0]",
            None,
        ),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", None),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function", None),
        ({"tools": [{"type": "retrieval"}]}, "tools[0]", None),
        ({"tools": "read_file"}, "tools", None),
    ]
    for extra, param, code in cases:
        body = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS, **extra}
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=MODEL, **body)
        error = caught.value.body
        assert isinstance(error, dict)
        assert (error["param"], error["code"]) == (param, code), error
        assert caught.value.status_code == 400
    assert events == []


def test_a_hundred_turns_over_the_context_are_a_400_and_the_store_stays_bounded(policy) -> None:  # type: ignore[no-untyped-def]
    events: list[AgentCompletion] = []
    engine = Engine()
    engine.start()
    app = create_agent_app(
        Replica(policy),
        engine,
        events.append,
        keys=None,
        producer="serve/t",
        served_turn_tokens=100,
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for turn in range(100):
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "x = 1"},
        ]
    try:
        with TestClient(app) as http:
            client = OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http)
            with pytest.raises(openai.BadRequestError) as caught:
                ask(client, messages)
            assert caught.value.code == "context_length_exceeded"
            for i in range(6):  # each returns a 26-token call: the store keeps at most 100
                task = f"Task {i}"
                script(policy, task + "\n<|assistant|>", READ)
                assert plain(ask(client, [{"role": "user", "content": task}]))["calls"]
                turns = app.state.api.served_turns
                assert turns.held_tokens <= 100
            wait_for(events, 6)
            assert len(turns) == 100 // len(events[0].completion_token_ids)
            assert turns.evictions == 6 - len(turns)
    finally:
        engine.close()
        unscript(policy)
