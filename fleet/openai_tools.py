"""OpenAI function calling on the agent model's API: the request's ``tools``, ``tool_choice`` and
tool messages validated, the model's output read back into ``tool_calls``, and the stream's
hold-back of text that may be a call (pure functions; ``fleet.agent_app`` moves them).

The model writes a call in the chat format it is trained with (``policies.agent_chat``):
``<tool_call>{"name":..,"arguments":{..}}</tool_call>`` then its end of sequence. ``tool_choice``
is enforced by the prompt, not by masking logits: ``required`` ends the generation prompt with
``<tool_call>`` and a named function with ``<tool_call>{"name":"NAME","arguments":`` (the
*prefill*), so the model can only go on writing a call; the prefill is part of the returned call.
``none`` leaves the tools out of the prompt and returns whatever the model writes as content.

A choice whose text (prefill + generated) holds a call that parses, naming a function of the
request, returns it in ``message.tool_calls`` with ``finish_reason`` ``tool_calls``. Text that
holds ``<tool_call>`` but no readable call comes back as content (``finish_reason`` ``stop``, or
``length`` when it was cut), never as an error: ``Reply.error`` says why, for the metrics and
the ``AgentCompletion``'s ``tool_call_error``.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from policies.agent_chat import CALL_OPEN, ToolCall, parse_tool_call

MAX_TOOLS = 128  # OpenAI's limit
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's function names
ChoiceMode = Literal["auto", "none", "required", "function"]


class ToolRequestError(ValueError):
    """A malformed tools part of a request: ``param`` names it (the API answers 400)."""

    def __init__(self, message: str, param: str, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True)
class ToolChoice:
    """``tool_choice``: ``auto`` (the model decides), ``none``, ``required``, or ``function``
    (the function ``name``)."""

    mode: ChoiceMode = "auto"
    name: str | None = None

    def prefill(self) -> str:
        """The text the generation prompt ends with, so that the model writes a call."""
        if self.mode == "required":
            return CALL_OPEN
        if self.mode == "function":
            return f'{CALL_OPEN}{{"name":{json.dumps(self.name, ensure_ascii=False)},"arguments":'
        return ""


def parse_tools(value: Any) -> tuple[dict[str, Any], ...]:
    """``tools``: OpenAI function definitions ``{"type": "function", "function": {"name",
    "description"?, "parameters"?}}``, names unique."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise ToolRequestError(f"tools must be an array of at most {MAX_TOOLS} functions", "tools")
    tools, names = [], set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type") != "function"
            or not isinstance(function, dict)
        ):
            raise ToolRequestError(
                f'{where} must be {{"type": "function", "function": {{"name", ...}}}}', where
            )
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ToolRequestError(
                f"{where}.function.name must be 1-64 letters, digits, _ or -", f"{where}.function"
            )
        if name in names:
            raise ToolRequestError(f"{where}: the function {name!r} is defined twice", where)
        names.add(name)
        parameters = function.get("parameters", {})
        properties = parameters.get("properties", {}) if isinstance(parameters, dict) else None
        if not isinstance(properties, dict):
            raise ToolRequestError(
                f"{where}.function.parameters must be a JSON Schema object (properties an object)",
                f"{where}.function.parameters",
            )
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise ToolRequestError(
                f"{where}.function.description must be a string", f"{where}.function.description"
            )
        tools.append({"type": "function", "function": dict(function)})
    return tuple(tools)


def parse_tool_choice(value: Any, tools: Sequence[Mapping[str, Any]]) -> ToolChoice:
    """``tool_choice`` (default ``auto`` with tools, ``none`` without); ``required`` and a named
    function need ``tools``, and the name must be one of them."""
    names = tool_names(tools)
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if value in ("auto", "none"):
        return ToolChoice(value)
    if value == "required":
        if not tools:
            raise ToolRequestError("tool_choice 'required' needs tools", "tool_choice")
        return ToolChoice("required")
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise ToolRequestError(
            'tool_choice must be "auto", "none", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if name not in names:
        raise ToolRequestError(
            f"tool_choice names the function {name!r}, which is not in tools", "tool_choice"
        )
    return ToolChoice("function", name)


def tool_names(tools: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(str(t["function"]["name"]) for t in tools)


def message_tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls``, normalised to OpenAI's shape with ``arguments`` a
    JSON string that decodes to an object."""
    if not isinstance(value, list):
        raise ToolRequestError(f"{where}.tool_calls must be an array", f"{where}.tool_calls")
    calls = []
    for j, call in enumerate(value):
        at = f"{where}.tool_calls[{j}]"
        function = _call_function(call)
        if function is None:
            raise ToolRequestError(
                f'{at} must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}',
                at,
            )
        arguments = function.get("arguments", "{}")
        try:
            decoded = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            decoded = None
        if not isinstance(decoded, dict):
            raise ToolRequestError(f"{at}.function.arguments must be a JSON object string", at)
        calls.append({"id": call["id"], "type": "function",
                      "function": {"name": function["name"], "arguments": arguments}})  # fmt: skip
    return calls


def _call_function(call: Any) -> dict[str, Any] | None:
    """The ``function`` of a well-shaped call (an id, a name, string arguments), else None."""
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        return None
    function = call.get("function")
    if not isinstance(call.get("id"), str) or not call["id"] or not isinstance(function, dict):
        return None
    name, arguments = function.get("name"), function.get("arguments", "{}")
    return function if isinstance(name, str) and name and isinstance(arguments, str) else None


def check_tool_call_ids(messages: Sequence[Mapping[str, Any]]) -> None:
    """Each ``tool`` message answers a call an earlier assistant message of the request made."""
    issued: set[str] = set()
    for i, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            issued.add(call["id"])
        if message["role"] != "tool":
            continue
        call_id = message.get("tool_call_id")
        where = f"messages[{i}].tool_call_id"
        if not isinstance(call_id, str) or not call_id:
            raise ToolRequestError(f"{where} is required for a tool message", where)
        if call_id not in issued:
            raise ToolRequestError(
                f"{where} is {call_id!r}, which no earlier assistant message's tool_calls issued",
                where,
                code="invalid_tool_call_id",
            )


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


# Reading a choice back ---------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A choice as the API returns it. ``text`` is everything the choice wrote (prefill +
    generated: the whole call, so its arguments can be read back)."""

    text: str
    content: str | None
    call: ToolCall | None
    error: str | None
    finish_reason: str

    def tool_calls(self) -> list[dict[str, Any]]:
        return [self.call.openai()] if self.call is not None else []


def read_reply(
    generated: str,
    finish_reason: str,
    *,
    prefill: str,
    choice: ToolChoice,
    names: frozenset[str],
    call_id: str,
) -> Reply:
    """The reply of a choice that generated ``generated`` after ``prefill`` (module docstring).
    ``finish_reason`` is the engine's (stop, length, cancelled)."""
    text = prefill + generated
    if choice.mode == "none" or not names:
        return Reply(text, text, None, None, finish_reason)
    parsed = parse_tool_call(text)
    call = parsed.call
    if call is not None and call.name in names:
        returned = ToolCall(call.name, call.arguments, call_id)
        return Reply(text, parsed.content or None, returned, None, "tool_calls")
    if CALL_OPEN not in text:
        return Reply(text, text, None, None, finish_reason)
    error = parsed.error if call is None else f"the call names {call.name!r}, not a tool given"
    return Reply(text, text, None, error, "stop" if finish_reason == "stop" else finish_reason)


class CallHoldBack:
    """The streamed text of one choice: what may be the start of a call waits until the choice
    ends, so a stream never shows as content what the finished reply returns as a call.
    ``feed`` returns what can go out as content now; the content streamed is always a prefix of
    the final reply's content."""

    def __init__(self, active: bool, prefill: str) -> None:
        self._active = active
        self._text = prefill
        self._held = bool(prefill)  # a prefilled choice is a call from its first character
        self.sent = 0  # characters of text streamed as content

    def feed(self, new: str) -> str:
        self._text += new
        if not self._active:
            upto = len(self._text)
        elif self._held:
            return ""
        else:
            found = self._text.find(CALL_OPEN, self.sent)
            if found >= 0:
                self._held = True
                upto = found
            else:
                upto = len(self._text) - _partial_open(self._text)
        out = self._text[self.sent : upto]
        self.sent = max(self.sent, upto)
        return out

    def rest(self, reply: Reply) -> str:
        """The content still to send when the choice has ended."""
        return (reply.content or "")[self.sent :]


def _partial_open(text: str) -> int:
    """Length of the longest tail of ``text`` that ``CALL_OPEN`` starts with."""
    for k in range(min(len(CALL_OPEN) - 1, len(text)), 0, -1):
        if text.endswith(CALL_OPEN[:k]):
            return k
    return 0


def argument_pieces(arguments: str, pieces: int = 4) -> list[str]:
    """``arguments`` cut into a few deltas, as OpenAI streams a call's arguments."""
    size = max(1, -(-len(arguments) // pieces))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]
