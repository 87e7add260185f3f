"""The OpenAI API's responses for the agent model's serving app: plain JSON bodies, stream
chunks (text deltas, tool-call deltas as OpenAI streams them, usage) and server-sent events (pure
functions: the app in ``fleet.agent_app`` moves them; requests are ``fleet.openai_api``'s).
Every body carries Flywheel's own field, ``flywheel``: the version and channel served and the
completion ids feedback names."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.agent_engine import Choice
from fleet.openai_api import Endpoint
from fleet.openai_tools import Reply, argument_pieces


@dataclass(frozen=True)
class Served:
    """What answered a request: the response id, the model name, version and channel."""

    response_id: str
    model: str
    version: int
    channel: str
    created: int

    @property
    def fingerprint(self) -> str:
        return f"{self.model}-v{self.version}"

    def completion_id(self, index: int) -> str:
        """The id a feedback event names (``AgentFeedback.completion_id``)."""
        return f"{self.response_id}:{index}"


def new_created() -> int:
    return int(time.time())


def _object(endpoint: Endpoint, chunk: bool) -> str:
    if endpoint == "completions":
        return "text_completion"
    return "chat.completion.chunk" if chunk else "chat.completion"


def usage(prompt_tokens: int, cached: int, choices: Sequence[Choice]) -> dict[str, Any]:
    completion = sum(len(c.token_ids) for c in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _header(served: Served, endpoint: Endpoint, chunk: bool) -> dict[str, Any]:
    return {
        "id": served.response_id,
        "object": _object(endpoint, chunk),
        "created": served.created,
        "model": served.model,
        "system_fingerprint": served.fingerprint,
    }


def _flywheel(served: Served, choices: int) -> dict[str, Any]:
    """Flywheel's own field: the version and channel served, and the completion ids to send
    feedback with."""
    return {
        "version": served.version,
        "channel": served.channel,
        "completion_ids": [served.completion_id(i) for i in range(choices)],
    }


def response_body(
    served: Served, endpoint: Endpoint, replies: Sequence[Reply], usage_: Mapping[str, Any]
) -> dict[str, Any]:
    """The plain JSON response: one choice per reply, in index order."""
    body = _header(served, endpoint, chunk=False)
    if endpoint == "completions":
        body["choices"] = [
            {"index": i, "text": r.text, "finish_reason": r.finish_reason, "logprobs": None}
            for i, r in enumerate(replies)
        ]
    else:
        body["choices"] = [
            {
                "index": i,
                "message": _message(r),
                "finish_reason": r.finish_reason,
                "logprobs": None,
            }
            for i, r in enumerate(replies)
        ]
    body["usage"] = dict(usage_)
    body["flywheel"] = _flywheel(served, len(replies))
    return body


def _message(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.call is not None:
        message["tool_calls"] = reply.tool_calls()
    return message


def chunk(
    served: Served,
    endpoint: Endpoint,
    index: int,
    text: str | None,
    finish_reason: str | None = None,
    *,
    first: bool = False,
) -> dict[str, Any]:
    """One stream chunk of choice ``index``: new text, or its finish reason."""
    body = _header(served, endpoint, chunk=True)
    if endpoint == "completions":
        choice: dict[str, Any] = {"index": index, "text": text or "", "logprobs": None}
    else:
        delta: dict[str, Any] = {"role": "assistant"} if first else {}
        if text is not None:
            delta["content"] = text
        choice = {"index": index, "delta": delta, "logprobs": None}
    choice["finish_reason"] = finish_reason
    body["choices"] = [choice]
    return body


def tool_call_chunks(
    served: Served, index: int, reply: Reply, *, first: bool
) -> list[dict[str, Any]]:
    """The stream chunks of a reply's call, as OpenAI streams one: the id, type and name with
    empty arguments, then the arguments in a few pieces (finish reason in a chunk after)."""
    call = reply.tool_calls()[0]
    function = call["function"]
    head = {"index": 0, "id": call["id"], "type": "function",
            "function": {"name": function["name"], "arguments": ""}}  # fmt: skip
    deltas: list[dict[str, Any]] = [{"tool_calls": [head]}]
    for piece in argument_pieces(function["arguments"]):
        deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    if first:
        deltas[0] = {"role": "assistant", "content": None, **deltas[0]}
    out = []
    for delta in deltas:
        body = _header(served, "chat.completions", chunk=True)
        body["choices"] = [{"index": index, "delta": delta, "logprobs": None,
                            "finish_reason": None}]  # fmt: skip
        out.append(body)
    return out


def usage_chunk(served: Served, endpoint: Endpoint, usage_: Mapping[str, Any]) -> dict[str, Any]:
    """The last chunk when the client asked for ``stream_options.include_usage``."""
    body = _header(served, endpoint, chunk=True)
    body["choices"] = []
    body["usage"] = dict(usage_)
    body["flywheel"] = _flywheel(served, 0)
    return body


def sse(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def finish_reason(choice: Choice) -> str:
    """The engine's finish reason as the API says it ("cancelled" is ours: the client went
    away, so such a response is never read)."""
    return choice.finish_reason or "length"
