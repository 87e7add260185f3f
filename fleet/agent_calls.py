"""One accepted request of the agent API on its way (:class:`Call`): the server-sent chunks of a
streamed one (text as the engine hands it over, a tool call held back until it is whole and then
sent as OpenAI's deltas) and the ``AgentCompletion`` event each of its choices becomes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fleet import openai_api as api
from fleet import openai_responses as responses
from fleet.agent_engine import Choice, Job
from fleet.openai_tools import CallHoldBack, Reply, read_reply, tool_names
from fleet.served_turns import ChatPrompt, Sampler
from ground.errors import FlywheelError
from schemas.events import AgentCompletion

_DONE = object()  # the stream's end marker, queued after a request's last text


@dataclass
class Call:
    """One accepted request on its way: the job, what answers it, and its chat context (the
    tool_choice prefill, the prompt's mask of earlier generated tokens, the call id each choice
    returns a call under)."""

    parsed: api.ApiRequest
    job: Job
    served: responses.Served
    sampler: Sampler
    prompt: ChatPrompt
    call_ids: list[str]
    key_name: str = "anonymous"
    arrived: float = 0.0
    _replies: list[Reply] | None = field(default=None, repr=False)

    def replies(self, choices: list[Choice]) -> list[Reply]:
        """Each choice as the API returns it (the same for the response, the stream and the
        event: read once)."""
        if self._replies is None:
            prefill = self.parsed.tool_choice.prefill()
            names = tool_names(self.parsed.tools)
            self._replies = [
                read_reply(
                    c.text,
                    responses.finish_reason(c),
                    prefill=prefill,
                    choice=self.parsed.tool_choice,
                    names=names,
                    call_id=self.call_ids[c.index],
                )
                for c in choices
            ]
        return self._replies


def connect_stream(job: Job) -> asyncio.Queue[Any]:
    """A queue the engine thread puts the job's text in, then the end marker."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def on_text(index: int, text: str) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (index, text))

    job.on_text = on_text
    job.future.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, _DONE))
    return queue


async def stream_chunks(call: Call, queue: asyncio.Queue[Any]) -> AsyncIterator[bytes]:
    """Server-sent chunks as the engine hands over text (what may be a tool call held back,
    ``CallHoldBack``), each choice's end — the rest of its content or its call, and its
    finish reason —, the usage when asked for, then ``[DONE]``. A disconnect cancels the
    generator, and the job with it (its completion is still recorded, ``finish_reason``
    cancelled)."""
    job, served, parsed = call.job, call.served, call.parsed
    endpoint = parsed.endpoint
    active = parsed.tool_choice.mode != "none" and bool(parsed.tools)
    gates = [CallHoldBack(active, parsed.tool_choice.prefill()) for _ in job.choices]
    started: set[int] = set()
    try:
        while (item := await queue.get()) is not _DONE:
            index, text = item
            if out := gates[index].feed(text):
                first = index not in started
                yield responses.sse(responses.chunk(served, endpoint, index, out, first=first))
                started.add(index)
        try:
            choices = job.future.result()
        except FlywheelError as exc:
            yield responses.sse(api.ApiError(500, str(exc), type="server_error").body())
            return
        for choice, reply in zip(choices, call.replies(choices), strict=True):
            index = choice.index
            rest = gates[index].rest(reply)
            if rest or (reply.call is None and index not in started):
                first = index not in started
                yield responses.sse(responses.chunk(served, endpoint, index, rest, first=first))
                started.add(index)
            if reply.call is not None:
                for body in responses.tool_call_chunks(
                    served, index, reply, first=index not in started
                ):
                    yield responses.sse(body)
                started.add(index)
            yield responses.sse(responses.chunk(served, endpoint, index, None, reply.finish_reason))
        if parsed.include_usage:
            usage = responses.usage(len(job.prompt_ids), job.cached_tokens, choices)
            yield responses.sse(responses.usage_chunk(served, endpoint, usage))
        yield responses.sse("[DONE]")
    finally:
        job.cancel()


def completion_event(
    call: Call,
    producer: str,
    choice: Choice,
    reply: Reply,
    latency_s: float,
    first_ms: float | None,
) -> AgentCompletion:
    job, served, parsed = call.job, call.served, call.parsed
    sampling = parsed.sampling
    private = parsed.privacy_mode
    generated = not private and 1 in call.prompt.mask
    calls = [reply.call] if reply.call is not None else []
    return AgentCompletion(
        producer=producer,
        completion_id=served.completion_id(choice.index),
        request_id=served.response_id,
        session_id=parsed.session_id or served.response_id,
        user_id=parsed.user,
        api_key=call.key_name,
        model_name=served.model,
        model_version=served.version,
        channel=served.channel,
        endpoint=parsed.endpoint,
        choice_index=choice.index,
        prompt_tokens=len(job.prompt_ids),
        cached_prompt_tokens=job.cached_tokens,
        completion_tokens=len(choice.token_ids),
        prompt_token_ids=job.prompt_ids,
        completion_token_ids=tuple(choice.token_ids),
        behaviour_logprobs=tuple(choice.logprobs),
        completion_text=None if private else reply.text,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=sampling.max_new_tokens,
        stop=sampling.stop,
        finish_reason=reply.finish_reason,
        speculative=job.speculative,
        latency_ms=round(latency_s * 1000),
        first_token_ms=None if first_ms is None else round(first_ms),
        privacy_mode=private,
        turn=sum(1 for m in parsed.messages if m["role"] == "assistant"),
        tool_call_ids=tuple(c.id for c in calls),
        tool_call_names=tuple(c.name for c in calls),
        tool_call_error=reply.error,
        prompt_mask=call.prompt.mask if generated else (),
        prompt_logprobs=call.prompt.logprobs if generated else (),
    )
