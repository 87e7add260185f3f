"""The HTTP app of an agent-model serving replica (`flywheel serve --kind agent`): the OpenAI API.

Routes:

* ``POST /v1/completions`` and ``POST /v1/chat/completions`` — OpenAI's request and response
  (``fleet.openai_api``), plain JSON or server-sent events (``"stream": true``). Each request is
  routed by its ``user`` (else its session) with the replica's stable canary split, tokenized,
  checked against the version's context length, and queued in the batching
  :class:`fleet.agent_engine.Engine`; a full queue answers 429 with Retry-After.
* ``GET /v1/models`` and ``GET /v1/models/{model}`` — the served model, with Flywheel's
  snapshot (production and canary versions) under ``flywheel``.
* ``GET /healthz`` (503 until the channels are read to their end) and ``GET /metrics``.

Every finished choice — also one whose client disconnected mid-stream — becomes one
``AgentCompletion`` event, emitted from the engine thread when the request's generation ends
(``emit``; the command passes the SDK client's, which spools what the broker does not take),
so no completion is lost or emitted twice, whatever the HTTP side does. Requests need an API key
of the gateway's key store (``Authorization: Bearer``, which OpenAI clients send as
``api_key``) unless the app is made without one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fleet import openai_api as api
from fleet.agent_engine import Choice, Engine, Job, Overloaded
from fleet.serving_app import ServingMetrics, ServingReplica, snapshot_json
from ground.asgi import BodyOverLimit, RequestMetricsMiddleware, read_body
from ground.errors import FlywheelError
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
_DONE = object()  # the stream's end marker, queued after a request's last text


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
    ) -> None:
        self.replica = replica
        self.engine = engine
        self.metrics = ServingMetrics(replica, ROUTES)
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
            job, served = self._job(parsed)
            queue = self._connect_stream(job) if parsed.stream else None
            self._submit(job, served, parsed, key_name, arrived)
        except api.ApiError as exc:
            return _error(exc)
        if queue is not None:
            return StreamingResponse(
                self._stream(job, served, parsed, queue),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            choices = await asyncio.wrap_future(job.future)
        except FlywheelError as exc:
            return _error(api.ApiError(500, str(exc), type="server_error"))
        finally:
            job.cancel()  # a no-op once done; stops generating for a client that gave up
        usage = api.usage(len(job.prompt_ids), job.cached_tokens, choices)
        return JSONResponse(api.response_body(served, endpoint, choices, usage))

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

    def _job(self, parsed: api.ApiRequest) -> tuple[Job, api.Served]:
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
        prompt_ids = _prompt_ids(parsed, policy.tokenizer)
        _check_context(prompt_ids, parsed, policy.model)
        speculative = parsed.prediction is not None
        job = Job(policy.model, policy.tokenizer, prompt_ids, parsed.sampling,
                  speculative=speculative)  # fmt: skip
        served = api.Served(
            response_id,
            self.replica.model_name,
            routed.version,
            routed.channel.value.lower(),
            api.new_created(),
        )
        return job, served

    def _submit(
        self,
        job: Job,
        served: api.Served,
        parsed: api.ApiRequest,
        key_name: str,
        arrived: float,
    ) -> None:
        job.future.add_done_callback(lambda _: self._record(job, served, parsed, key_name, arrived))
        try:
            self.engine.submit(job)
        except Overloaded as exc:
            raise api.ApiError(
                429,
                str(exc),
                type="rate_limit_error",
                code="rate_limit_exceeded",
                retry_after_s=exc.retry_after_s,
            ) from None

    @staticmethod
    def _connect_stream(job: Job) -> asyncio.Queue[Any]:
        """A queue the engine thread puts the job's text in, then the end marker."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def on_text(index: int, text: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (index, text))

        job.on_text = on_text
        job.future.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, _DONE))
        return queue

    @staticmethod
    async def _stream(
        job: Job, served: api.Served, parsed: api.ApiRequest, queue: asyncio.Queue[Any]
    ) -> AsyncIterator[bytes]:
        """Server-sent chunks as the engine hands over text, each choice's finish reason, the
        usage when asked for, then ``[DONE]``. A disconnect cancels the generator, and the
        job with it (its completion is still recorded, ``finish_reason`` cancelled)."""
        endpoint = parsed.endpoint
        started: set[int] = set()
        try:
            while (item := await queue.get()) is not _DONE:
                index, text = item
                yield api.sse(api.chunk(served, endpoint, index, text, first=index not in started))
                started.add(index)
            try:
                choices = job.future.result()
            except FlywheelError as exc:
                yield api.sse(api.ApiError(500, str(exc), type="server_error").body())
                return
            for choice in choices:
                first = choice.index not in started
                text = "" if first else None
                reason = choice.finish_reason or "length"
                yield api.sse(api.chunk(served, endpoint, choice.index, text, reason, first=first))
            if parsed.include_usage:
                usage = api.usage(len(job.prompt_ids), job.cached_tokens, choices)
                yield api.sse(api.usage_chunk(served, endpoint, usage))
            yield api.sse("[DONE]")
        finally:
            job.cancel()

    def _record(
        self,
        job: Job,
        served: api.Served,
        parsed: api.ApiRequest,
        key_name: str,
        arrived: float,
    ) -> None:
        """One AgentCompletion per choice (engine thread, once per job); never raises."""
        try:
            choices = job.future.result()
        except Exception:  # a failed generation served nothing: no completion to record
            return
        finished = time.monotonic()
        first_ms = None if job.first_token_at is None else (job.first_token_at - arrived) * 1000
        try:
            for choice in choices:
                self._emit(
                    self._event(job, served, parsed, key_name, choice, finished - arrived, first_ms)
                )
            self.metrics.count_decisions(
                [{"model": served.model, "channel": served.channel, "version": served.version}]
                * len(choices)
            )
        except Exception:  # an event the sink refuses must not stop the engine
            self.emit_failures += 1
            log.exception("recording completion %s failed", served.response_id)

    def _event(
        self,
        job: Job,
        served: api.Served,
        parsed: api.ApiRequest,
        key_name: str,
        choice: Choice,
        latency_s: float,
        first_ms: float | None,
    ) -> AgentCompletion:
        sampling = parsed.sampling
        return AgentCompletion(
            producer=self._producer,
            completion_id=served.completion_id(choice.index),
            request_id=served.response_id,
            session_id=parsed.session_id or served.response_id,
            user_id=parsed.user,
            api_key=key_name,
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
            completion_text=choice.text,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            stop=sampling.stop,
            finish_reason=choice.finish_reason or "length",
            speculative=job.speculative,
            latency_ms=round(latency_s * 1000),
            first_token_ms=None if first_ms is None else round(first_ms),
            privacy_mode=parsed.privacy_mode,
        )


def _prompt_ids(parsed: api.ApiRequest, tokenizer: Any) -> tuple[int, ...]:
    if isinstance(parsed.prompt, tuple):
        vocab = len(tokenizer)
        if max(parsed.prompt) >= vocab:
            raise api.ApiError(
                400, f"prompt holds token ids >= the vocabulary size {vocab}", param="prompt"
            )
        return parsed.prompt
    text = (
        parsed.prompt if parsed.prompt is not None else api.render_chat(parsed.messages, tokenizer)
    )
    ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not ids:
        param = "prompt" if parsed.endpoint == "completions" else "messages"
        raise api.ApiError(400, "the prompt is empty; send some text", param=param)
    return ids


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
) -> Starlette:
    """The replica's OpenAI-compatible app (module docstring). The app neither starts nor
    closes ``engine`` or ``replica``: whoever made them does. ``app.state.api`` is its
    :class:`AgentApi` (metrics, counters)."""
    agent = AgentApi(
        replica,
        engine,
        emit,
        keys=keys,
        producer=producer,
        ready=ready,
        max_body_bytes=max_body_bytes,
        max_n=max_n,
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
