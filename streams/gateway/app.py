"""The HTTP ingestion gateway: a Starlette app in front of the telemetry SDK.

`POST /v1/events` takes a JSON array (or one object) or NDJSON of events, each naming its schema
in `"type"`, authenticated by an API key. Every event is validated against its Avro schema and
handed to the sender (the SDK's `TelemetryClient`); the answer lists each event's fate by index.
One bad event never sinks its batch, and no event error becomes a 500.

Status codes (docs/gateway.md): 200 when at least one event was accepted; when none was: 403 if
every refusal was a permission refusal, 503 if every refusal was the gateway's own trouble
(registry, broker, shutting down: retry), 400 otherwise. 400 also for a body that is not JSON /
NDJSON; 401 for a missing or unknown key; 403 for a revoked key; 413 for a body over
`max_body_bytes` (counted while streaming, whatever Content-Length says) or more than
`max_events` events; 415 for other content types or encodings.

"Accepted" means validated and handed to the SDK, which delivers at least once (its disk spool
keeps events the broker has not acknowledged); it does not wait for the broker's ack.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ground.asgi import BodyOverLimit, RequestMetricsMiddleware, json_error, read_body
from ground.errors import FlywheelError
from schemas.events import Event
from streams.errors import EventValidationError
from streams.gateway.errors import (
    BodyTooLarge,
    EventRefused,
    KeyRefused,
    ReasonCode,
    RequestRefused,
    UnsupportedMediaType,
)
from streams.gateway.keys import ApiKeyStore, KeyRecord, check_request_key
from streams.gateway.metrics import GatewayMetrics
from streams.gateway.parsing import (
    MediaType,
    RawItem,
    build_event,
    event_type_of,
    media_type_of,
    parse_body,
)

log = logging.getLogger("flywheel.gateway")

EVENTS_PATH = "/v1/events"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
_RETRY_AFTER = {"Retry-After": "5"}
_SHUTDOWN_FLUSH_S = 10.0


class EventSender(Protocol):
    """Where accepted events go; `streams.client.TelemetryClient` is the production one.

    `send` raises EventValidationError for an event its schema refuses, anything else when the
    event cannot be sent now. A sender may expose `closed: bool`; the gateway then answers 503
    while it is closed.
    """

    def send(self, event: Event) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> int: ...


@dataclass(frozen=True)
class EventResult:
    """The fate of the event at `index` of a batch; `code` is None when it was accepted."""

    index: int
    event_type: str | None
    event_id: str | None = None
    code: ReasonCode | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.code is None:
            return {"index": self.index, "status": "accepted", "event_id": self.event_id}
        return {"index": self.index, "status": "refused", "code": self.code, "reason": self.reason}


def create_app(
    sender: EventSender,
    keys: ApiKeyStore,
    *,
    max_body_bytes: int = 1_048_576,
    max_events: int = 5000,
) -> Starlette:
    """The gateway app: routes `POST /v1/events`, `GET /healthz`, `GET /metrics`.

    The app does not own `sender`: on shutdown (ASGI lifespan) it flushes it, and whoever made
    it closes it. Metrics live in a registry of the app's own (`app.state.metrics`).
    """
    if max_body_bytes < 1 or max_events < 1:
        raise ValueError("max_body_bytes and max_events must be positive")
    metrics = GatewayMetrics((EVENTS_PATH, HEALTH_PATH, METRICS_PATH))
    gateway = _Gateway(sender, keys, metrics, max_body_bytes, max_events)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        try:
            await run_in_threadpool(sender.flush, _SHUTDOWN_FLUSH_S)
        except Exception:  # shutting down anyway; the owner's close() spools what is left
            log.exception("flushing the sender at shutdown failed")

    app = Starlette(
        routes=[
            Route(EVENTS_PATH, gateway.post_events, methods=["POST"]),
            Route(HEALTH_PATH, gateway.healthz, methods=["GET"]),
            Route(METRICS_PATH, gateway.metrics, methods=["GET"]),
        ],
        middleware=[Middleware(RequestMetricsMiddleware, metrics=metrics)],
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    return app


class _Gateway:
    """The endpoints, sharing the sender, the key store, the limits and the metrics."""

    def __init__(
        self,
        sender: EventSender,
        keys: ApiKeyStore,
        metrics: GatewayMetrics,
        max_body_bytes: int,
        max_events: int,
    ) -> None:
        self._sender = sender
        self._keys = keys
        self._metrics = metrics
        self._max_body_bytes = max_body_bytes
        self._max_events = max_events

    async def post_events(self, request: Request) -> Response:
        key = self._authenticate(request)
        if isinstance(key, Response):
            return key
        if self._sender_closed():
            return _error(503, "the gateway is shutting down; retry later", _RETRY_AFTER)
        try:
            _check_encoding(request)
            media_type = media_type_of(request.headers.get("content-type"))
            body = await self._read_body(request)
            # Parsing, validation and encoding are CPU work and produce() may wait on a full
            # queue: keep them off the event loop so other requests (and /healthz) go on.
            results = await run_in_threadpool(self._ingest, body, media_type, key)
        except RequestRefused as exc:
            return _error(exc.status, str(exc))
        return _batch_response(results)

    async def healthz(self, _: Request) -> Response:
        if self._sender_closed():
            return JSONResponse({"status": "closed"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def metrics(self, _: Request) -> Response:
        text, content_type = self._metrics.render()
        return Response(text, media_type=content_type)

    def _authenticate(self, request: Request) -> KeyRecord | Response:
        try:
            return check_request_key(self._keys, request.headers)
        except KeyRefused as exc:
            return _error(exc.status, str(exc), exc.headers)

    async def _read_body(self, request: Request) -> bytes:
        """The body (`ground.asgi.read_body`), its size observed; BodyTooLarge over the limit."""
        try:
            body = await read_body(request, self._max_body_bytes)
        except BodyOverLimit as exc:
            if exc.size is not None:
                self._metrics.body_bytes.observe(exc.size)
            raise BodyTooLarge(str(exc)) from None
        self._metrics.body_bytes.observe(len(body))
        return body

    def _ingest(self, body: bytes, media_type: MediaType, key: KeyRecord) -> list[EventResult]:
        """Each event's result; RequestRefused when the body as a whole is refused."""
        items = parse_body(body, media_type)
        if len(items) > self._max_events:
            raise BodyTooLarge(
                f"{len(items)} events exceed the limit of {self._max_events} per request; "
                "split the batch"
            )
        return [self._ingest_one(index, item, key) for index, item in enumerate(items)]

    def _ingest_one(self, index: int, item: RawItem, key: KeyRecord) -> EventResult:
        """Convert, authorise and send one event; every failure becomes a refusal."""
        event_type: str | None = None
        try:
            event_type = event_type_of(item)
            if not key.allows(event_type):
                raise EventRefused(
                    "forbidden",
                    f"API key {key.name!r} may not send {event_type} "
                    f"(it may send {', '.join(key.event_types)})",
                )
            event = build_event(item, event_type, default_producer=f"gateway/{key.name}")
            self._send(event)
        except EventRefused as refused:
            code, reason = refused.code, str(refused)
        except Exception as exc:  # a bug in the gateway costs this event, not the batch
            log.exception("converting event %d failed", index)
            code, reason = "internal", f"the gateway failed on this event ({type(exc).__name__})"
        else:
            self._metrics.event_accepted(event_type)
            return EventResult(index, event_type, event_id=event.event_id)
        self._metrics.event_refused(event_type, code)
        return EventResult(index, event_type, code=code, reason=reason)

    def _send(self, event: Event) -> None:
        try:
            self._sender.send(event)
        except EventValidationError as exc:
            raise EventRefused("invalid", str(exc)) from None
        except FlywheelError:  # the registry is unreachable or refused the schema
            log.exception("the SDK could not send a %s", event.SCHEMA_NAME)
            raise EventRefused(
                "unavailable", "the schema registry is unavailable; retry later"
            ) from None
        except Exception as exc:  # a bug or a closed client: refuse this event, keep serving
            log.exception("the SDK failed on a %s", event.SCHEMA_NAME)
            code: ReasonCode = "unavailable" if self._sender_closed() else "internal"
            raise EventRefused(
                code, f"the gateway could not send the event ({type(exc).__name__}); retry later"
            ) from None

    def _sender_closed(self) -> bool:
        # TelemetryClient may not expose `closed`; a sender without it counts as open.
        return bool(getattr(self._sender, "closed", False))


def _check_encoding(request: Request) -> None:
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise UnsupportedMediaType(
            f"Content-Encoding {encoding!r} is not supported; send the body uncompressed"
        )


def _batch_response(results: list[EventResult]) -> JSONResponse:
    refused = [r for r in results if r.code is not None]
    body: dict[str, Any] = {
        "accepted": len(results) - len(refused),
        "refused": len(refused),
        "results": [r.to_json() for r in results],
    }
    headers: dict[str, str] = {}
    status = 200
    if len(refused) == len(results):
        codes = {r.code for r in refused}
        if codes == {"forbidden"}:
            status, body["error"] = 403, "the API key may not send any of these events"
        elif codes <= {"unavailable", "internal"}:
            status, body["error"] = 503, "no event could be sent; retry later"
            headers = _RETRY_AFTER
        else:
            status, body["error"] = 400, "no event was accepted; see each result's reason"
    return JSONResponse(body, status_code=status, headers=headers)


_error = json_error
