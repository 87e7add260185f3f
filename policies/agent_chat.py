"""The agent's chat format: OpenAI-shaped messages with tool calls, as the model reads and writes
them (DESIGN §12, "Repositories with tools").

One conversation is rendered as role blocks, each opened by a special token::

    <|system|>{system}\\n
    <|user|>{task}\\n
    <|assistant|><tool_call>{"name":"run_tests","arguments":{}}</tool_call><|eos|>
    <|tool|>{what the tool printed}\\n
    <|assistant|>…

An assistant turn ends with the end-of-sequence token, so generation stops by itself at the end
of each turn and the learner trains the decision to stop, as for single completions. A tool call
is OpenAI's function-calling shape — a function ``name`` and JSON ``arguments`` — written as
``<tool_call>{json}</tool_call>`` inside the turn (the convention of Hermes/Qwen templates).

Three things share this module so they cannot drift apart:

* :data:`CHAT_TEMPLATE`, the Jinja template saved with the tokenizer (``tokenizer.chat_template``):
  any `transformers` user, and the serving API, renders OpenAI messages with
  ``apply_chat_template`` to exactly the text below;
* :func:`render` / :func:`segments`, the same text in Python, cut where the model's tokens start
  and end: an episode's token ids are built segment by segment, generated tokens trained
  (``mask`` 1) and tool observations masked out (0);
* :func:`parse_tool_call`, which reads an assistant turn back into a :class:`ToolCall`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SYSTEM, USER, ASSISTANT, TOOL = "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"
ROLE_TOKENS = (SYSTEM, USER, ASSISTANT, TOOL)  # special tokens of a chat tokenizer
ROLE_MARKERS = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT, "tool": TOOL}
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One function call: OpenAI's ``{"id", "type": "function", "function": {"name",
    "arguments"}}`` with ``arguments`` decoded."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""

    def text(self) -> str:
        """The call as the model writes it (compact JSON, keys in the order given)."""
        body = json.dumps({"name": self.name, "arguments": dict(self.arguments)},
                          separators=(",", ":"), ensure_ascii=False)  # fmt: skip
        return f"{CALL_OPEN}{body}{CALL_CLOSE}"

    def openai(self) -> dict[str, Any]:
        """The OpenAI message field (``arguments`` as a JSON string, as the API sends it)."""
        arguments = json.dumps(dict(self.arguments), separators=(",", ":"), ensure_ascii=False)
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": arguments}}  # fmt: skip


@dataclass(frozen=True)
class ParsedTurn:
    """An assistant turn read back: its text before any call, and the call (None when the turn
    holds none or it is malformed; ``error`` then says why, for the tool observation)."""

    content: str
    call: ToolCall | None
    error: str = ""


def parse_tool_call(text: str) -> ParsedTurn:
    """The first ``<tool_call>{json}</tool_call>`` of an assistant turn (its text without the
    end-of-sequence token). Never raises: a malformed call is a :class:`ParsedTurn` with an
    ``error`` the environment shows the model."""
    match = _CALL.search(text)
    content = text[: match.start()] if match else text
    if match is None:
        unclosed = CALL_OPEN in text
        return ParsedTurn(content, None, "unclosed <tool_call>" if unclosed else "no tool call")
    try:
        raw = json.loads(match.group(1))
    except json.JSONDecodeError as exc:
        return ParsedTurn(content, None, f"tool call is not JSON: {exc.msg}")
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return ParsedTurn(content, None, "tool call needs a string 'name'")
    arguments = raw.get("arguments", {})
    if isinstance(arguments, str):  # the OpenAI API's spelling: a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ParsedTurn(content, None, f"tool call arguments are not JSON: {exc.msg}")
    if not isinstance(arguments, dict):
        return ParsedTurn(content, None, "tool call 'arguments' must be an object")
    return ParsedTurn(content, ToolCall(raw["name"], arguments))


def tools_line(tools: Sequence[Mapping[str, Any]]) -> str:
    """OpenAI tool definitions as the system block lists them: ``Tools: name(arg, arg), …``
    (short on purpose: every token of it is in every prompt)."""
    signatures = []
    for tool in tools:
        function = tool.get("function", tool)
        parameters = function.get("parameters", {}).get("properties", {})
        signatures.append(f"{function['name']}({', '.join(parameters)})")
    return "Tools: " + ", ".join(signatures)


def message_text(message: Mapping[str, Any], eos: str) -> str:
    """One OpenAI message as rendered: role marker, content, the calls of an assistant
    message, and its terminator (``eos`` after an assistant turn, a newline after others)."""
    role = message["role"]
    marker = ROLE_MARKERS.get(role)
    if marker is None:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(ROLE_MARKERS)}")
    content = message.get("content") or ""
    if role != "assistant":
        return f"{marker}{content}\n"
    calls = "".join(tool_call(c).text() for c in message.get("tool_calls") or ())
    return f"{marker}{content}{calls}{eos}"


def render(
    messages: Sequence[Mapping[str, Any]],
    eos: str,
    tools: Sequence[Mapping[str, Any]] = (),
    add_generation_prompt: bool = False,
) -> str:
    """The whole conversation as text; ``tools`` go into the system block (one is added when
    there is none). Equal to ``apply_chat_template`` with :data:`CHAT_TEMPLATE` (a test checks)."""
    return "".join(text for text, _ in segments(messages, eos, tools, add_generation_prompt))


def segments(
    messages: Sequence[Mapping[str, Any]],
    eos: str,
    tools: Sequence[Mapping[str, Any]] = (),
    add_generation_prompt: bool = False,
) -> list[tuple[str, bool]]:
    """The rendered text cut into (text, generated) pieces: an assistant turn's body (after its
    role marker, through ``eos``) is generated; everything else (the prompt, role markers, tool
    observations) is not. Tokenize the pieces one by one and concatenate: those are the ids the
    model saw and wrote, and ``generated`` is the loss mask."""
    out: list[tuple[str, bool]] = []
    pending = ""
    system = [m for m in messages[:1] if m["role"] == "system"]
    if tools and not system:
        pending += f"{SYSTEM}{tools_line(tools)}\n"
    for i, message in enumerate(messages):
        if message["role"] == "system" and i == 0 and tools:
            body = message.get("content") or ""
            pending += f"{SYSTEM}{body}{' ' if body else ''}{tools_line(tools)}\n"
        elif message["role"] == "assistant":
            pending += ASSISTANT
            out.append((pending, False))
            out.append((message_text(message, eos)[len(ASSISTANT) :], True))
            pending = ""
        else:
            pending += message_text(message, eos)
    if add_generation_prompt:
        pending += ASSISTANT
    if pending:
        out.append((pending, False))
    return out


def tool_call(raw: Any) -> ToolCall:
    """A message's ``tool_calls`` entry as a ToolCall (``arguments`` a JSON string or a dict)."""
    if isinstance(raw, ToolCall):
        return raw
    function = raw.get("function", raw)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        arguments = json.loads(arguments) if arguments.strip() else {}
    return ToolCall(function["name"], arguments, raw.get("id", ""))


# The same rendering for `transformers`' apply_chat_template (saved as tokenizer.chat_template).
# Arguments given as a JSON string are written as they are; the API and our episodes write
# compact JSON, so both spellings render the same text for the same call.
CHAT_TEMPLATE = (
    "{%- set tools_text = none -%}"
    "{%- if tools -%}{%- set ns = namespace(text='Tools: ') -%}"
    "{%- for t in tools -%}{%- set f = t.function if t.function is defined else t -%}"
    "{%- set args = (f.parameters.properties | list) if f.parameters is defined and "
    "f.parameters.properties is defined else [] -%}"
    "{%- set ns.text = ns.text ~ ('' if loop.first else ', ') ~ f.name ~ '(' ~ "
    "(args | join(', ')) ~ ')' -%}{%- endfor -%}"
    "{%- set tools_text = ns.text -%}{%- endif -%}"
    "{%- if tools_text and (messages | length == 0 or messages[0].role != 'system') -%}"
    "<|system|>{{ tools_text }}{{ '\\n' }}{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' and loop.first and tools_text -%}"
    "<|system|>{{ m.content or '' }}{{ ' ' if m.content else '' }}{{ tools_text }}{{ '\\n' }}"
    "{%- elif m.role == 'assistant' -%}<|assistant|>{{ m.content or '' }}"
    "{%- for c in (m.tool_calls or []) -%}"
    "{%- set f = c.function if c.function is defined else c -%}"
    '<tool_call>{"name":{{ f.name | tojson }},"arguments":'
    "{%- if f.arguments is string -%}{{ f.arguments }}{%- else -%}"
    "{{ f.arguments | tojson(separators=(',', ':')) }}{%- endif -%}}</tool_call>"
    "{%- endfor -%}{{ eos_token }}"
    "{%- else -%}<|{{ m.role }}|>{{ m.content or '' }}{{ '\\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)
