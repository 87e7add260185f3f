"""ASGI pieces the HTTP services share (the gateway, the serving replica, the index server): a
middleware counting every request by route and final status, reading a body under a size limit,
and the `{"error": reason}` answer of a refused request."""

from __future__ import annotations

import time
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RequestRecorder(Protocol):
    """Where the counts go (a service's metrics object)."""

    def record_request(self, path: str, status: int, seconds: float) -> None: ...


class RequestMetricsMiddleware:
    """Pure ASGI middleware (not BaseHTTPMiddleware, so streamed request bodies pass untouched)
    reporting each request's path, final status and latency to ``metrics``. The recorder maps
    paths to bounded route labels."""

    def __init__(self, app: ASGIApp, metrics: RequestRecorder) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # if the app raises before it starts a response, the server sends a 500

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            path = str(scope.get("path", ""))
            self.metrics.record_request(path, status, time.perf_counter() - started)


class BodyOverLimit(Exception):
    """A request body over the limit; ``size`` is what was read when it passed the limit
    (None when the Content-Length header alone said so). The caller answers 413."""

    def __init__(self, limit: int, size: int | None) -> None:
        super().__init__(f"the body exceeds the limit of {limit} bytes; send smaller batches")
        self.size = size


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with BodyOverLimit as soon as it passes ``limit`` bytes: Content-Length
    is checked first when sent, but the count while streaming is what holds (chunked bodies)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyOverLimit(limit, None)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyOverLimit(limit, size)
        chunks.append(chunk)
    return b"".join(chunks)


def json_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """A refusal as the services answer it: `{"error": message}` with `status`."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)
