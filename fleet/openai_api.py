"""The OpenAI API's requests, for the agent model's serving app: parsing and validation, and
errors (pure functions: the app in ``fleet.agent_app`` moves them; responses and stream chunks
are ``fleet.openai_responses``').

Requests follow the OpenAI reference for ``POST /v1/completions`` and ``/v1/chat/completions``:
``model``, ``prompt`` or ``messages``, ``max_tokens`` (chat: also ``max_completion_tokens``),
``temperature``, ``top_p``, ``n``, ``stop``, ``stream`` (+ ``stream_options.include_usage``),
``user``, and ``prediction`` (Predicted Outputs: ``{"type": "content", "content": ...}``, the
original code of an edit: the request is decoded speculatively), and on the chat route OpenAI's
function calling: ``tools``, ``tool_choice``, assistant messages with ``tool_calls`` and ``tool``
messages with ``tool_call_id`` (``fleet.openai_tools``). Parameters the replica does not
implement (``seed``, ``logprobs``, penalties, ``parallel_tool_calls``: one call per turn, ...)
are accepted and ignored, as a client library may send them; a known parameter of the wrong type
is a 400 naming it. Flywheel reads
two more body fields a client sends with ``extra_body``: ``session_id`` (the completion's
session, for joining feedback; default: the response id) and ``privacy_mode`` (no token ids or
text are recorded).

Errors are OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``. Every malformed
body is a 400 in that shape, never a 500: bytes that are not UTF-8, text that is not JSON or
nests too deeply, a JSON value that is not an object, a string no UTF-8 can carry, a parameter
of the wrong type.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fleet.openai_tools import (
    ToolChoice,
    ToolRequestError,
    check_tool_call_ids,
    message_tool_calls,
    parse_tool_choice,
    parse_tools,
)
from policies.agent_sampling import SamplingParams

Endpoint = Literal["completions", "chat.completions"]
MAX_STOP = 4  # OpenAI's limit
MAX_ID_CHARS = 256
_ROLES = ("system", "user", "assistant", "developer", "tool")
NO_TOOLS = ToolChoice("none")


class ApiError(Exception):
    """An OpenAI-style error response: ``status``, message, ``type``, ``param``, ``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # OpenAI's field name
        param: str | None = None,
        code: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass(frozen=True)
class ApiRequest:
    """A validated completion request. ``prompt`` is text (chat messages already rendered by
    the app with the model's template) or token ids."""

    endpoint: Endpoint
    model: str
    prompt: str | tuple[int, ...] | None
    messages: tuple[Mapping[str, Any], ...]
    sampling: SamplingParams
    stream: bool
    include_usage: bool
    user: str | None
    session_id: str | None
    privacy_mode: bool
    prediction: str | None
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: ToolChoice = NO_TOOLS


def decode_body(raw: bytes) -> Any:
    """The JSON value of a request body; ApiError 400 when the bytes are not UTF-8 (RFC 8259:
    JSON between systems is UTF-8; a leading byte-order mark is allowed), not JSON, nested too
    deeply for the parser, or hold a string no UTF-8 can carry (a lone surrogate escape such as
    ``"\\ud800"``: the tokenizer, and the completion event's Avro strings, fail on it)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ApiError(
            400, f"the body is not valid UTF-8 (byte {exc.start}); send JSON encoded as UTF-8"
        ) from None
    try:
        body = json.loads(text)
    except RecursionError:
        raise ApiError(400, "the body's JSON nests too deeply") from None
    except ValueError as exc:
        raise ApiError(400, f"the body is not valid JSON ({exc})") from None
    if not _utf8_strings(body):
        raise ApiError(
            400, "the body holds a lone UTF-16 surrogate escape (\\ud800-\\udfff); send text"
        )
    return body


def _utf8_strings(value: Any) -> bool:
    """Whether every string (keys included) in a decoded JSON value encodes as UTF-8. A stack,
    not recursion: the value may nest as deep as the parser allows."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def parse_request(body: Any, endpoint: Endpoint, *, max_n: int) -> ApiRequest:
    """The request in ``body`` (decoded JSON); ApiError 400 naming the parameter at fault."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    model = _string(body, "model", required=True)
    assert model is not None
    prompt: str | tuple[int, ...] | None = None
    messages: tuple[Mapping[str, Any], ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice = NO_TOOLS
    if endpoint == "completions":
        prompt = _prompt(body.get("prompt"))
    else:
        try:
            messages = _messages(body.get("messages"))
            check_tool_call_ids(messages)
            tools = parse_tools(body.get("tools"))
            tool_choice = parse_tool_choice(body.get("tool_choice"), tools)
        except ToolRequestError as exc:
            raise ApiError(400, str(exc), param=exc.param, code=exc.code) from None
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = 16 if limit is None else _int(limit, "max_tokens", low=1)
    n = 1 if body.get("n") is None else _int(body["n"], "n", low=1)
    if n > max_n:
        raise ApiError(
            400, f"n is {n}; this replica serves at most {max_n} choices per request", param="n"
        )
    sampling = SamplingParams(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, open_low=True),
        max_new_tokens=max_tokens,
        stop=_stop(body.get("stop")),
        n=n,
    )
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    return ApiRequest(
        endpoint=endpoint,
        model=model,
        prompt=prompt,
        messages=messages,
        sampling=sampling,
        stream=stream,
        include_usage=bool(options and options.get("include_usage") is True),
        user=_string(body, "user"),
        session_id=_string(body, "session_id"),
        privacy_mode=_bool(body, "privacy_mode"),
        prediction=_prediction(body.get("prediction")),
        tools=tools,
        tool_choice=tool_choice,
    )


def _string(body: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise ApiError(
                400, f"you must provide {name!r}", param=name, code="missing_required_parameter"
            )
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise ApiError(
            400,
            f"{name} must be a non-empty string of at most {MAX_ID_CHARS} characters",
            param=name,
        )
    return value


def _bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false, got {_show(value)}", param=name)
    return value


def _int(value: Any, name: str, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ApiError(400, f"{name} must be an integer >= {low}, got {_show(value)}", param=name)
    return value


def _number(
    body: Mapping[str, Any],
    name: str,
    default: float,
    low: float,
    high: float,
    *,
    open_low: bool = False,
) -> float:
    value = body.get(name)
    if value is None:
        return default
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (low < value if open_low else low <= value) or value > high:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        raise ApiError(
            400, f"{name} must be a number in {interval}, got {_show(value)}", param=name
        )
    return float(value)


def _prompt(value: Any) -> str | tuple[int, ...]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
        value = value[0]  # a batch of one prompt
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(_is_token(t) for t in value):
        return tuple(value)
    if value is None:
        raise ApiError(
            400, "you must provide 'prompt'", param="prompt", code="missing_required_parameter"
        )
    raise ApiError(
        400,
        "prompt must be a string, a list of token ids, or a list of one of "
        "them (send one prompt per request; ask for choices with n)",
        param="prompt",
    )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _messages(value: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not value:
        raise ApiError(
            400, "messages must be a non-empty array of {role, content}", param="messages"
        )
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise ApiError(
                400, f"{where}: an object with a role, one of {', '.join(_ROLES)}", param=where
            )
        role = message["role"]
        calls = message.get("tool_calls") if role == "assistant" else None
        content = message.get("content")
        kept: dict[str, Any] = {"role": role}
        kept["content"] = "" if content is None and calls else _content(content, where)
        if calls:  # an empty list is no calls, as OpenAI's own API takes it
            kept["tool_calls"] = message_tool_calls(calls, where)
        if role == "tool":
            kept["tool_call_id"] = message.get("tool_call_id")
        out.append(kept)
    return tuple(out)


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: text only
        texts = [p.get("text") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        if len(texts) == len(value) and all(isinstance(t, str) for t in texts):
            return "".join(str(t) for t in texts)
    raise ApiError(400, f"{where}.content must be a string or text parts", param=f"{where}.content")


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise ApiError(
            400, f"stop must be a string or up to {MAX_STOP} non-empty strings", param="stop"
        )
    return tuple(stops)


def _prediction(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict) and value.get("type") == "content":
        content = value.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return _content(content, "prediction")
    raise ApiError(
        400,
        'prediction must be {"type": "content", "content": <the expected text>}',
        param="prediction",
    )


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    tools: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The prompt text of a conversation for a tokenizer whose chat template is not ours
    (``policies.agent_chat``, whose prompts the app builds piece by piece): its own template
    when it has one (a foreign checkpoint; ``tools`` passed to it), else one ``<role>:
    <content>`` line per message and ``assistant:`` to answer."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=[dict(t) for t in tools] or None,
            tokenize=False,
            add_generation_prompt=True,
        )
        return str(text)
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join([*lines, "assistant:"])
