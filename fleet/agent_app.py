"""The HTTP app of an agent-model serving replica (`flywheel serve --kind agent`): the OpenAI API.

Routes:

* ``POST /v1/completions`` and ``POST /v1/chat/completions`` — OpenAI's request and response
  (``fleet.openai_api``), plain JSON or server-sent events (``"stream": true``). Each request is
  routed by its ``user`` (else its session) with the replica's stable canary split, tokenized,
  checked against the version's context length, and queued in the batching
  :class:`fleet.agent_engine.Engine`; a full queue answers 429 with Retry-After. Chat requests
  may carry OpenAI's ``tools`` (``fleet.openai_tools``): a choice that writes a call returns
  ``tool_calls``. With our chat template (``policies.agent_chat``) the prompt is tokenized piece
  by piece as episodes are, and the model's own earlier tool-call turns of the session are put
  back as the ids it wrote (``fleet.served_turns``), so a served session is an episode.
* ``GET /v1/models`` and ``GET /v1/models/{model}`` — the served model, with Flywheel's
  snapshot (production and canary versions) under ``flywheel``.
* ``GET /healthz`` (503 until the channels are read to their end) and ``GET /metrics``.

Every finished choice — also one whose client disconnected mid-stream — becomes one
``AgentCompletion`` event, emitted from the engine thread when the request's generation ends
(``emit``; the command passes the SDK client's, which spools what the broker does not take),
so no completion is lost or emitted twice, whatever the HTTP side does; its ``prompt_mask``
marks the prompt tokens this version generated in the session's earlier turns. Requests need
an API key of the gateway's key store (``Authorization: Bearer``, which OpenAI clients send
as ``api_key``) unless the app is made without one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Counter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fleet import openai_api as api
from fleet import openai_responses as responses
from fleet.agent_calls import Call, completion_event, connect_stream, stream_chunks
from fleet.agent_engine import Engine, Job, Overloaded
from fleet.openai_tools import new_call_id
from fleet.served_turns import ChatPrompt, Sampler, ServedTurn, ServedTurns, chat_prompt
from fleet.serving_app import ServingMetrics, ServingReplica, snapshot_json
from ground.asgi import BodyOverLimit, RequestMetricsMiddleware, read_body
from ground.errors import FlywheelError
from policies.agent_chat import CHAT_TEMPLATE
from schemas.events import AgentCompletion
from streams.gateway.errors import KeyStoreError
from streams.gateway.keys import ApiKeyStore, presented_key

log = logging.getLogger(__name__)
COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
ROUTES = (COMPLETIONS_PATH, CHAT_PATH, MODELS_PATH, HEALTH_PATH, METRICS_PATH)
Emit = Callable[[AgentCompletion], None]


class AgentApi:
    """The routes' logic over a replica, an engine, a key store and an event sink."""

    def __init__(
        self,
        replica: ServingReplica,
        engine: Engine,
        emit: Emit,
        *,
        keys: ApiKeyStore | None,
        producer: str,
        ready: Callable[[], bool],
        max_body_bytes: int,
        max_n: int,
        served_turns: ServedTurns,
    ) -> None:
        self.replica = replica
        self.engine = engine
        self.served_turns = served_turns
        self.metrics = ServingMetrics(replica, ROUTES)
        self.tool_calls = Counter(
            "flywheel_agent_tool_calls", "Tool calls returned (finish_reason tool_calls).",
            ["model", "version"], registry=self.metrics.registry,
        )  # fmt: skip
        self.malformed_tool_calls = Counter(
            "flywheel_agent_malformed_tool_calls",
            "Choices where the model wrote <tool_call> but no readable call of a given tool "
            "(returned as text).",
            ["model", "version"], registry=self.metrics.registry,
        )  # fmt: skip
        self._emit = emit
        self._keys = keys
        self._producer = producer
        self._ready = ready
        self._max_body_bytes = max_body_bytes
        self._max_n = max_n
        self.emit_failures = 0

    # Routes --------------------------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, "completions")

    async def chat(self, request: Request) -> Response:
        return await self._complete(request, "chat.completions")

    async def models(self, _: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        if name != self.replica.model_name:
            return _error(_unknown_model(name, self.replica.model_name))
        return JSONResponse(self._model_card())

    async def healthz(self, _: Request) -> Response:
        ready = self._ready()
        body = {"status": "ok" if ready else "starting", **snapshot_json(self.replica)}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def get_metrics(self, _: Request) -> Response:
        return self.metrics.render()

    def _model_card(self) -> dict[str, Any]:
        return {
            "id": self.replica.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "flywheel",
            "flywheel": snapshot_json(self.replica),
        }

    # Completions ---------------------------------------------------------------------------

    async def _complete(self, request: Request, endpoint: api.Endpoint) -> Response:
        arrived = time.monotonic()
        try:
            key_name = self._authenticate(request)
            parsed = api.parse_request(await self._body(request), endpoint, max_n=self._max_n)
            call = self._call(parsed)
            call.key_name, call.arrived = key_name, arrived
            job = call.job
            # First: a choice's tool-call turn is known before its client can send the next.
            job.future.add_done_callback(lambda _: self._remember(call))
            queue = connect_stream(job) if parsed.stream else None
            self._submit(call)
        except api.ApiError as exc:
            return _error(exc)
        if queue is not None:
            return StreamingResponse(
                stream_chunks(call, queue),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            choices = await asyncio.wrap_future(job.future)
        except FlywheelError as exc:
            return _error(api.ApiError(500, str(exc), type="server_error"))
        finally:
            job.cancel()  # a no-op once done; stops generating for a client that gave up
        usage = responses.usage(len(job.prompt_ids), job.cached_tokens, choices)
        return JSONResponse(
            responses.response_body(call.served, endpoint, call.replies(choices), usage)
        )

    def _authenticate(self, request: Request) -> str:
        """The key's name (``anonymous`` without a key store); ApiError 401/403/503."""
        if self._keys is None:
            return "anonymous"
        secret = presented_key(request.headers)
        if secret is None:
            raise api.ApiError(
                401,
                "missing API key: send 'Authorization: Bearer <key>' (the OpenAI client's "
                "api_key) or 'X-API-Key: <key>'; make one with `flywheel gateway add-key NAME`",
                code="invalid_api_key",
            )
        try:
            record = self._keys.authenticate(secret)
        except KeyStoreError:
            log.exception("cannot read the API key store")
            raise api.ApiError(
                503, "cannot check API keys now; retry later", type="server_error", retry_after_s=5
            ) from None
        if record is None:
            raise api.ApiError(401, "invalid API key", code="invalid_api_key")
        if record.revoked:
            raise api.ApiError(
                403, f"API key {record.name!r} is revoked; ask for a new key", code="revoked"
            )
        return record.name

    async def _body(self, request: Request) -> Any:
        try:
            raw = await read_body(request, self._max_body_bytes)
        except BodyOverLimit as exc:
            raise api.ApiError(413, str(exc), code="request_too_large") from None
        return api.decode_body(raw)

    def _call(self, parsed: api.ApiRequest) -> Call:
        if parsed.model != self.replica.model_name:
            raise _unknown_model(parsed.model, self.replica.model_name)
        response_id = f"cmpl-{uuid.uuid4().hex}"
        routed = self.replica.route(parsed.user or parsed.session_id or response_id)
        if routed.model is None:
            raise api.ApiError(
                503,
                f"no version of {self.replica.model_name} is in production yet; promote one "
                "(`flywheel models promote`) and retry",
                type="server_error",
                code="model_not_ready",
                retry_after_s=5,
            )
        policy = routed.model
        s = parsed.sampling
        sampler = Sampler(policy.model, routed.version, s.temperature, s.top_p)
        prompt = self._prompt(parsed, policy.tokenizer, sampler)
        _check_context(prompt.ids, parsed, policy.model)
        speculative = parsed.prediction is not None
        job = Job(policy.model, policy.tokenizer, prompt.ids, parsed.sampling,
                  speculative=speculative)  # fmt: skip
        served = responses.Served(
            response_id,
            self.replica.model_name,
            routed.version,
            routed.channel.value.lower(),
            responses.new_created(),
        )
        call_ids = [new_call_id() for _ in range(s.n)]
        return Call(parsed, job, served, sampler, prompt, call_ids)

    def _prompt(self, parsed: api.ApiRequest, tokenizer: Any, sampler: Sampler) -> ChatPrompt:
        """The prompt's ids: a chat in our template piece by piece (earlier turns of this
        model as it wrote them), anything else tokenized whole (mask all 0)."""
        if parsed.endpoint == "chat.completions" and _our_template(tokenizer):
            tools = parsed.tools if parsed.tool_choice.mode != "none" else ()
            messages = [_as_ours(m) for m in parsed.messages]
            prefill = parsed.tool_choice.prefill()
            prompt = chat_prompt(tokenizer, messages, tools, prefill, self.served_turns, sampler)
        else:
            ids = _prompt_ids(parsed, tokenizer)
            prompt = ChatPrompt(ids, (0,) * len(ids), (0.0,) * len(ids), ())
        if not prompt.ids:
            param = "prompt" if parsed.endpoint == "completions" else "messages"
            raise api.ApiError(400, "the prompt is empty; send some text", param=param)
        return prompt

    def _submit(self, call: Call) -> None:
        call.job.future.add_done_callback(lambda _: self._record(call))
        try:
            self.engine.submit(call.job)
        except Overloaded as exc:
            raise api.ApiError(
                429,
                str(exc),
                type="rate_limit_error",
                code="rate_limit_exceeded",
                retry_after_s=exc.retry_after_s,
            ) from None

    def _remember(self, call: Call) -> None:
        """Keep each choice's returned tool-call turn (engine thread, first done callback):
        its tokens are the session's next prompt. Privacy mode keeps nothing; a turn not
        ended by the model's end of sequence is not the turn the template renders."""
        try:
            choices = call.job.future.result()
        except Exception:  # a failed generation served nothing
            return
        if call.parsed.privacy_mode:
            return
        eos = call.job.tokenizer.eos_token_id
        sampler = call.sampler
        try:
            for choice, reply in zip(choices, call.replies(choices), strict=True):
                ids = choice.token_ids
                if reply.call is None or not ids or ids[-1] != eos:
                    continue
                if len(choice.logprobs) != len(ids):
                    continue
                turn = ServedTurn(
                    call.prompt.prefill_ids, tuple(ids), tuple(choice.logprobs),
                    reply.content or "", reply.call, sampler.version, sampler.temperature,
                    sampler.top_p, weakref.ref(sampler.model),
                )  # fmt: skip
                self.served_turns.put(reply.call.id, turn)
        except Exception:  # never stop the engine for a turn not kept
            log.exception("keeping the tool-call turns of %s failed", call.served.response_id)

    def _record(self, call: Call) -> None:
        """One AgentCompletion per choice (engine thread, once per job); never raises."""
        job, served = call.job, call.served
        try:
            choices = job.future.result()
        except Exception:  # a failed generation served nothing: no completion to record
            return
        finished = time.monotonic()
        arrived = call.arrived
        first_ms = None if job.first_token_at is None else (job.first_token_at - arrived) * 1000
        try:
            replies = call.replies(choices)
            labels = (served.model, str(served.version))
            for choice, reply in zip(choices, replies, strict=True):
                if reply.call is not None:
                    self.tool_calls.labels(*labels).inc()
                if reply.error is not None:
                    self.malformed_tool_calls.labels(*labels).inc()
                self._emit(
                    completion_event(
                        call, self._producer, choice, reply, finished - arrived, first_ms
                    )
                )
            self.metrics.count_decisions(
                [{"model": served.model, "channel": served.channel, "version": served.version}]
                * len(choices)
            )
        except Exception:  # an event the sink refuses must not stop the engine
            self.emit_failures += 1
            log.exception("recording completion %s failed", served.response_id)


def _our_template(tokenizer: Any) -> bool:
    return getattr(tokenizer, "chat_template", None) == CHAT_TEMPLATE


def _as_ours(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """OpenAI's ``developer`` role is the system's (o-series models); our template has no
    other role for it."""
    return {**message, "role": "system"} if message["role"] == "developer" else message


def _prompt_ids(parsed: api.ApiRequest, tokenizer: Any) -> tuple[int, ...]:
    if isinstance(parsed.prompt, tuple):
        vocab = len(tokenizer)
        if max(parsed.prompt) >= vocab:
            raise api.ApiError(
                400, f"prompt holds token ids >= the vocabulary size {vocab}", param="prompt"
            )
        return parsed.prompt
    if parsed.prompt is not None:
        text = parsed.prompt
    else:
        tools = parsed.tools if parsed.tool_choice.mode != "none" else ()
        text = api.render_chat(parsed.messages, tokenizer, tools) + parsed.tool_choice.prefill()
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])


def _check_context(prompt_ids: tuple[int, ...], parsed: api.ApiRequest, model: Any) -> None:
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 0)
    wanted = len(prompt_ids) + parsed.sampling.max_new_tokens
    if limit and wanted > limit:
        raise api.ApiError(
            400,
            f"this model's maximum context length is {limit} tokens; the request asks for "
            f"{wanted} ({len(prompt_ids)} in the prompt, {parsed.sampling.max_new_tokens} for the "
            "completion): shorten the prompt or lower max_tokens",
            param="messages" if parsed.endpoint == "chat.completions" else "prompt",
            code="context_length_exceeded",
        )


def _unknown_model(name: str, served: str) -> api.ApiError:
    return api.ApiError(
        404,
        f"the model {name!r} does not exist on this replica; it serves {served!r}",
        param="model",
        code="model_not_found",
    )


def _error(exc: api.ApiError) -> Response:
    headers = {} if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def create_agent_app(
    replica: ServingReplica,
    engine: Engine,
    emit: Emit,
    *,
    keys: ApiKeyStore | None,
    producer: str,
    ready: Callable[[], bool] = lambda: True,
    max_body_bytes: int = 4 * 1_048_576,
    max_n: int = 8,
    served_turn_tokens: int = 262_144,
) -> Starlette:
    """The replica's OpenAI-compatible app (module docstring). The app neither starts nor
    closes ``engine`` or ``replica``: whoever made them does. ``app.state.api`` is its
    :class:`AgentApi` (metrics, counters). ``served_turn_tokens`` bounds the tokens of the
    tool-call turns kept for the sessions' next requests (``fleet.served_turns``)."""
    agent = AgentApi(
        replica,
        engine,
        emit,
        keys=keys,
        producer=producer,
        ready=ready,
        max_body_bytes=max_body_bytes,
        max_n=max_n,
        served_turns=ServedTurns(served_turn_tokens),
    )
    app = Starlette(
        routes=[
            Route(COMPLETIONS_PATH, agent.completions, methods=["POST"]),
            Route(CHAT_PATH, agent.chat, methods=["POST"]),
            Route(MODELS_PATH, agent.models, methods=["GET"]),
            Route(MODELS_PATH + "/{model:path}", agent.model, methods=["GET"]),
            Route(HEALTH_PATH, agent.healthz, methods=["GET"]),
            Route(METRICS_PATH, agent.get_metrics, methods=["GET"]),
        ],
        middleware=[Middleware(RequestMetricsMiddleware, metrics=agent.metrics)],
    )
    app.state.api = agent
    app.state.metrics = agent.metrics
    return app
