"""Function calling's pure parts: validation, reading a choice back, the stream's hold-back and
tool-call chunks, and the served-turn store (the app's tests: test_fleet_agent_tools.py)."""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

import pytest

from environments.episode_runner import tokenize_segments
from fleet import openai_api as api
from fleet import openai_responses as responses
from fleet.openai_tools import (
    CallHoldBack,
    ToolChoice,
    ToolRequestError,
    check_tool_call_ids,
    message_tool_calls,
    parse_tool_choice,
    parse_tools,
    read_reply,
)
from fleet.served_turns import Sampler, ServedTurn, ServedTurns, chat_prompt
from policies.agent_chat import ToolCall, segments
from policies.agent_lm import train_tokenizer
from tests.fleet.agent_lm_fixture import CORPUS, ids
from tests.fleet.agent_tools_fixture import TOOLS

NAMES = frozenset({"read_file", "submit"})
READ = '<tool_call>{"name":"read_file","arguments":{"path":"a.py"}}</tool_call>'


AUTO = ToolChoice("auto")


def reply(text: str, choice: ToolChoice = AUTO, reason: str = "stop") -> Any:
    return read_reply(
        text, reason, prefill=choice.prefill(), choice=choice, names=NAMES, call_id="call_1"
    )


def test_tools_and_tool_choice_are_validated() -> None:
    assert [t["function"]["name"] for t in parse_tools(TOOLS)] == ["read_file", "submit"]
    assert parse_tools(None) == ()
    for bad, param in [
        ({"tools": 1}, "tools"),
        ([{"type": "function"}], "tools[0]"),
        ([{"type": "function", "function": {"name": ""}}], "tools[0].function"),
        ([TOOLS[0], TOOLS[0]], "tools[1]"),
        (
            [{"type": "function", "function": {"name": "f", "parameters": {"properties": []}}}],
            "tools[0].function.parameters",
        ),
    ]:
        with pytest.raises(ToolRequestError) as caught:
            parse_tools(bad)
        assert caught.value.param == param
    tools = parse_tools(TOOLS)
    assert parse_tool_choice(None, tools) == ToolChoice("auto")
    assert parse_tool_choice(None, ()) == ToolChoice("none")
    assert parse_tool_choice("required", tools).prefill() == "<tool_call>"
    named = parse_tool_choice({"type": "function", "function": {"name": "submit"}}, tools)
    assert named.prefill() == '<tool_call>{"name":"submit","arguments":'
    for bad in ["always", {"type": "function"}, {"type": "function", "function": {"name": "x"}}]:
        with pytest.raises(ToolRequestError, match="tool_choice"):
            parse_tool_choice(bad, tools)
    with pytest.raises(ToolRequestError, match="needs tools"):
        parse_tool_choice("required", ())


def test_client_tool_calls_and_tool_call_ids_are_checked() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    assert message_tool_calls([call], "messages[1]") == [call]
    for arguments in ["{", "[]", "1", None]:
        bad = {**call, "function": {"name": "f", "arguments": arguments}}
        with pytest.raises(ToolRequestError) as caught:
            message_tool_calls([bad], "messages[1]")
        assert caught.value.param == "messages[1].tool_calls[0]"
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    check_tool_call_ids([turn, {"role": "tool", "tool_call_id": "c1", "content": ""}])
    for messages in (
        [{"role": "tool", "tool_call_id": "c1", "content": ""}, turn],  # answered before asked
        [turn, {"role": "tool", "content": ""}],
    ):
        with pytest.raises(ToolRequestError) as caught:
            check_tool_call_ids(messages)
        assert caught.value.param.endswith(".tool_call_id")


def test_parse_request_keeps_the_calls_and_names_what_is_wrong() -> None:
    body = {
        "model": "m",
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "out"}]},
        ],
    }
    parsed = api.parse_request(body, "chat.completions", max_n=1)
    assert parsed.messages[1]["tool_calls"][0]["id"] == "c1"
    assert parsed.messages[2] == {"role": "tool", "content": "out", "tool_call_id": "c1"}
    assert parsed.tool_choice == ToolChoice("auto")
    body["messages"][2]["tool_call_id"] = "c2"  # type: ignore[index]
    with pytest.raises(api.ApiError) as caught:
        api.parse_request(body, "chat.completions", max_n=1)
    assert (caught.value.param, caught.value.code) == (
        "messages[2].tool_call_id",
        "invalid_tool_call_id",
    )


def test_a_choice_reads_back_as_a_call_text_or_a_malformed_call() -> None:
    call = reply("Looking." + READ + "trailing")
    assert (call.content, call.finish_reason, call.error) == ("Looking.", "tool_calls", None)
    assert call.tool_calls() == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
        }
    ]
    assert reply(READ).content is None
    text = reply("just words")
    assert (text.content, text.call, text.error, text.finish_reason) == (
        "just words",
        None,
        None,
        "stop",
    )
    for broken, why in [
        ('<tool_call>{"name":', "unclosed"),
        ("<tool_call>{x}</tool_call>", "JSON"),
        ('<tool_call>{"name":"rm","arguments":{}}</tool_call>', "'rm'"),
    ]:
        bad = reply(broken)
        assert (bad.content, bad.call, bad.finish_reason) == (broken, None, "stop")
        assert bad.error and why in bad.error
    assert reply('<tool_call>{"name":', reason="length").finish_reason == "length"
    assert reply(READ, ToolChoice("none")).call is None  # none: everything is content
    named = reply('{"path":"b.py"}}</tool_call>', ToolChoice("function", "read_file"))
    assert named.call == ToolCall("read_file", {"path": "b.py"}, "call_1")
    assert named.text == '<tool_call>{"name":"read_file","arguments":{"path":"b.py"}}</tool_call>'


@pytest.mark.parametrize(
    "text",
    [
        "plain text, no call",
        "Looking." + READ,
        "a <tool tag that is not a call",
        "x" + READ[:20],
        "<tool_call" + "x",
        "<<tool_call>>" + READ,
    ],
)
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_the_stream_shows_no_call_as_content_and_ends_as_the_reply(text: str, step: int) -> None:
    gate = CallHoldBack(active=True, prefill="")
    sent = "".join(gate.feed(text[i : i + step]) for i in range(0, len(text), step))
    final = reply(text)
    assert "<tool_call>" not in sent
    assert sent + gate.rest(final) == (final.content or "")


def test_a_prefilled_stream_holds_everything_and_an_inactive_one_nothing() -> None:
    gate = CallHoldBack(active=True, prefill="<tool_call>")
    assert gate.feed("words") == ""
    plain = CallHoldBack(active=False, prefill="")
    assert plain.feed("<tool_call>") == "<tool_call>"


def test_tool_call_chunks_are_shaped_as_openai_streams_them() -> None:
    served = responses.Served("cmpl-1", "m", 2, "production", 0)
    chunks = responses.tool_call_chunks(served, 0, reply(READ), first=True)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": ""},
            }
        ],
    }
    pieces = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:]]
    assert len(pieces) > 1 and "".join(pieces) == '{"path":"a.py"}'
    assert all(set(d["tool_calls"][0]) == {"index", "function"} for d in deltas[1:])


# The served-turn store ---------------------------------------------------------------------


class Model:
    """Something a weak reference can point at (a loaded model, for the store)."""


def turn(model: Any, n: int = 10, version: int = 2, temperature: float = 1.0) -> ServedTurn:
    return ServedTurn(
        (7, 8),
        tuple(range(n)),
        (-0.5,) * n,
        "",
        ToolCall("submit", {}),
        version,
        temperature,
        1.0,
        weakref.ref(model),
    )


def test_the_store_stays_within_its_token_budget_under_threads() -> None:
    model = Model()
    store = ServedTurns(max_tokens=120)
    threads = [
        threading.Thread(
            target=lambda k=k: [store.put(f"c{k}-{i}", turn(model)) for i in range(50)]
        )
        for k in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.held_tokens == 120 and len(store) == 10
    assert store.evictions == 190
    store.put("huge", turn(model, n=500))  # over the whole budget: not kept
    assert store.get("huge") is None and store.held_tokens == 120


def test_a_known_turn_is_its_own_ids_only_for_the_same_model_version_and_sampling() -> None:
    tokenizer = train_tokenizer(CORPUS, 300, chat=True)
    model = Model()
    written = [*ids(tokenizer, READ[len("<tool_call>") :]), tokenizer.eos_token_id]
    prefill = ids(tokenizer, "<tool_call>")
    store = ServedTurns()
    store.put(
        "call_1",
        ServedTurn(
            tuple(prefill),
            tuple(written),
            (-0.25,) * len(written),
            "",
            ToolCall("read_file", {"path": "a.py"}, "call_1"),
            2,
            1.0,
            1.0,
            weakref.ref(model),
        ),
    )
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
    }
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"},
    ]
    same = chat_prompt(tokenizer, messages, TOOLS, "", store, Sampler(model, 2, 1.0, 1.0))
    plain = tokenize_segments(tokenizer, segments(messages, tokenizer.eos_token, TOOLS, True))[0]
    assert list(same.ids) == plain  # the turn re-tokenizes to the same ids here
    marked = [same.ids[i] for i, m in enumerate(same.mask) if m]
    assert marked == written and sum(same.logprobs) == pytest.approx(-0.25 * len(written))
    for sampler in (
        Sampler(model, 3, 1.0, 1.0),
        Sampler(model, 2, 0.7, 1.0),
        Sampler(Model(), 2, 1.0, 1.0),
    ):
        other = chat_prompt(tokenizer, messages, TOOLS, "", store, sampler)
        assert other.ids == same.ids and set(other.mask) == {0}
    edited = {**call, "function": {"name": "read_file", "arguments": json.dumps({"path": "b"})}}
    messages[1] = {"role": "assistant", "content": None, "tool_calls": [edited]}
    changed = chat_prompt(tokenizer, messages, TOOLS, "", store, Sampler(model, 2, 1.0, 1.0))
    assert set(changed.mask) == {0}  # the client's copy is not the turn served
    with_prefill = chat_prompt(
        tokenizer, messages, TOOLS, "<tool_call>", store, Sampler(model, 2, 1.0, 1.0)
    )
    assert with_prefill.prefill_ids == tuple(prefill)
    assert with_prefill.ids[-len(prefill) :] == tuple(prefill)
