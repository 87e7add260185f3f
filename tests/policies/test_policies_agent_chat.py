"""The chat format end to end: a chat tokenizer keeps role markers whole, and a saved checkpoint's
``apply_chat_template`` renders OpenAI messages with tool calls exactly as ``agent_chat.render``
does, and each assistant turn parses back to its calls (non-ASCII arguments included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerFast

from policies.agent_chat import ROLE_TOKENS, ToolCall, message_text, parse_tool_call, render
from policies.agent_lm import EOS, train_tokenizer

CORPUS = [f'<tool_call>{{"name":"read_file","arguments":{{"path":"m{i}.py"}}}}</tool_call>'
          for i in range(100)]  # fmt: skip
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {}, "start": {}, "end": {}}}}},
    {"type": "function", "function": {"name": "edit", "parameters": {
        "type": "object", "properties": {"path": {}, "old": {}, "new": {}}}}},
    {"type": "function", "function": {"name": "submit", "parameters": {"properties": {}}}},
]  # fmt: skip
CALLS = [
    ToolCall("read_file", {"path": "text.py", "start": 1, "end": 9}, "call_0"),
    ToolCall("edit", {"path": "text.py", "old": 'return "é✓"', "new": 'return "ü\\n"\n'}, "call_1"),
    ToolCall("submit", {}, "call_2"),
]


def _conversation(spelling: str) -> list[dict[str, Any]]:
    """System, user, then each call as an assistant turn and its tool reply. ``spelling``: the
    arguments as the OpenAI API sends them (a JSON string) or decoded (a dict)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Fix the bug."},
        {"role": "user", "content": "shout('abc') should be 'CBA' — ça ne marche pas"},
    ]
    for call in CALLS:
        openai = call.openai()
        if spelling == "dict":
            openai["function"]["arguments"] = dict(call.arguments)
        messages.append({"role": "assistant", "content": "", "tool_calls": [openai]})
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok ✓"})
    return messages


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> PreTrainedTokenizerFast:
    directory: Path = tmp_path_factory.mktemp("chat")
    train_tokenizer(CORPUS, 300, chat=True).save_pretrained(directory)
    return PreTrainedTokenizerFast.from_pretrained(directory, local_files_only=True)


def test_role_markers_are_single_ids_that_never_split(loaded: PreTrainedTokenizerFast) -> None:
    for marker in (*ROLE_TOKENS, EOS):
        ids = loaded(f"x{marker}y", add_special_tokens=False)["input_ids"]
        assert loaded.convert_tokens_to_ids(marker) in ids
        assert len(ids) == 3
    assert set(ROLE_TOKENS) <= set(loaded.all_special_tokens)


@pytest.mark.parametrize("spelling", ["json-string", "dict"])
@pytest.mark.parametrize("generation_prompt", [False, True])
def test_the_saved_template_renders_as_render_does(
    loaded: PreTrainedTokenizerFast, spelling: str, generation_prompt: bool
) -> None:
    messages = _conversation(spelling)
    text = loaded.apply_chat_template(
        messages, tools=TOOLS, tokenize=False, add_generation_prompt=generation_prompt
    )
    assert text == render(messages, EOS, TOOLS, generation_prompt)
    assert "é✓" in text and "\\u" not in text  # tojson keeps non-ASCII as is, as ToolCall.text


def test_each_assistant_turn_parses_back_to_its_call() -> None:
    turns = [m for m in _conversation("json-string") if m["role"] == "assistant"]
    for message, call in zip(turns, CALLS, strict=True):
        body = message_text(message, EOS).removeprefix("<|assistant|>").removesuffix(EOS)
        parsed = parse_tool_call(body)
        assert parsed.call is not None and parsed.error == ""
        assert (parsed.call.name, dict(parsed.call.arguments)) == (call.name, call.arguments)


def test_without_chat_the_tokenizer_is_as_before() -> None:
    plain = train_tokenizer(CORPUS, 300)
    assert plain.chat_template is None
    assert not set(ROLE_TOKENS) & set(plain.all_special_tokens)
    assert len(plain("<|user|>", add_special_tokens=False)["input_ids"]) > 1
