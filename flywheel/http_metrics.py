"""Counting every HTTP request of an ASGI app by route and final status: one middleware for the
gateway and the serving replica."""

from __future__ import annotations

import time
from typing import Protocol

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
