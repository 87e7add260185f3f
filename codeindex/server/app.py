"""The codebase index server's HTTP app (`flywheel index serve`): the sync protocol of
docs/index.md over an `IndexService`.

Routes (`{ws}` a workspace id, a lower-case UUID):

* ``POST /v1/index/{ws}/root``, ``/children``, ``/files``, ``/chunks``, ``/search`` and
  ``GET /v1/index/{ws}/status``, ``DELETE /v1/index/{ws}``: the protocol's steps;
* ``GET /healthz`` (503 until the replica has rebuilt from the topics) and ``GET /metrics``.

Requests need an API key of the gateway's key store (`Authorization: Bearer`) unless the app is
made without one. Refusals are `{"error": reason}` with a 4xx status (docs/index.md, "Errors");
a broker that does not take a change is a 503 with Retry-After and changes nothing. Bodies are
parsed, embedded and searched off the event loop. Chunk texts exist only inside the `chunks`
request: they are never logged (no request body is) nor kept.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from codeindex.server import parsing
from codeindex.server.errors import EventLogError, IndexRequestError
from codeindex.server.metrics import HEALTH_PATH, METRICS_PATH, PREFIX
from codeindex.server.parsing import Limits
from codeindex.server.service import IndexService
from ground.asgi import BodyOverLimit, RequestMetricsMiddleware, json_error, read_body
from streams.gateway.errors import KeyRefused
from streams.gateway.keys import ApiKeyStore, check_request_key

log = logging.getLogger(__name__)
_RETRY_AFTER = {"Retry-After": "5"}
Handler = Callable[[str, dict[str, Any]], Any]


class IndexApi:
    """The routes over a service, a key store (None: no auth) and the limits."""

    def __init__(
        self,
        service: IndexService,
        keys: ApiKeyStore | None,
        limits: Limits,
        ready: Callable[[], bool],
    ) -> None:
        self.service = service
        self._keys = keys
        self._limits = limits
        self._ready = ready
        self.metrics = service.metrics

    # The protocol ------------------------------------------------------------------------

    def post_root(self, ws: str, body: dict[str, Any]) -> Any:
        return self.service.root(ws, parsing.parse_root(body))

    def post_children(self, ws: str, body: dict[str, Any]) -> Any:
        return self.service.children(ws, parsing.parse_dirs(body, self._limits))

    def post_files(self, ws: str, body: dict[str, Any]) -> Any:
        upserts, deletes = parsing.parse_files(body, self._limits)
        return {"missing": self.service.files(ws, upserts, deletes)}

    def post_chunks(self, ws: str, body: dict[str, Any]) -> Any:
        return {"embedded": self.service.embed_chunks(ws, parsing.parse_chunks(body, self._limits))}

    def post_search(self, ws: str, body: dict[str, Any]) -> Any:
        query, top_k, prefix = parsing.parse_search(body, self._limits)
        scored = parsing.parse_scored(body, self._limits)
        hits, scores = self.service.search_scored(ws, query, top_k, prefix, scored)
        answer: dict[str, object] = {"results": [hit.to_json() for hit in hits]}
        if "score" in body:
            answer["scores"] = {chunk: round(score, 6) for chunk, score in scores.items()}
        return answer

    def route(self, handler: Handler, max_body: int) -> Callable[[Request], Awaitable[Response]]:
        """A POST endpoint: authenticate, read and parse the body, run `handler` in a thread."""

        async def endpoint(request: Request) -> Response:
            try:
                self._authenticate(request)
                ws = parsing.workspace_id(request.path_params["ws"])
                try:
                    raw = await read_body(request, max_body)
                except BodyOverLimit as exc:
                    raise IndexRequestError(413, str(exc)) from None
                answer = await run_in_threadpool(_call, handler, ws, raw)
            except (IndexRequestError, KeyRefused, EventLogError) as exc:
                return _refusal(exc)
            return JSONResponse(answer)

        return endpoint

    async def status(self, request: Request) -> Response:
        return await self._without_body(request, self.service.status)

    async def erase(self, request: Request) -> Response:
        return await self._without_body(request, self.service.erase)

    async def _without_body(
        self, request: Request, action: Callable[[str], dict[str, object]]
    ) -> Response:
        try:
            self._authenticate(request)
            ws = parsing.workspace_id(request.path_params["ws"])
            answer = await run_in_threadpool(action, ws)
        except (IndexRequestError, KeyRefused, EventLogError) as exc:
            return _refusal(exc)
        return JSONResponse(answer)

    async def healthz(self, _: Request) -> Response:
        ready = self._ready()
        return JSONResponse({"status": "ok" if ready else "starting"}, 200 if ready else 503)

    async def get_metrics(self, _: Request) -> Response:
        text, content_type = self.metrics.render()
        return Response(text, media_type=content_type)

    def _authenticate(self, request: Request) -> None:
        if self._keys is not None:
            check_request_key(self._keys, request.headers, realm="flywheel-index")


def _call(handler: Handler, ws: str, raw: bytes) -> Any:
    return handler(ws, parsing.parse_object(raw))


def _refusal(exc: IndexRequestError | KeyRefused | EventLogError) -> Response:
    if isinstance(exc, EventLogError):
        log.error("%s", exc)
        return json_error(503, "the index cannot record changes now; retry later", _RETRY_AFTER)
    headers = exc.headers if isinstance(exc, KeyRefused) else None
    return json_error(exc.status, str(exc), headers)


def create_app(
    service: IndexService,
    *,
    keys: ApiKeyStore | None,
    limits: Limits | None = None,
    ready: Callable[[], bool] = lambda: True,
) -> Starlette:
    """The index app (module docstring). `app.state.api` is its `IndexApi` (metrics)."""
    limits = limits or Limits()
    api = IndexApi(service, keys, limits, ready)
    post = limits.max_body_bytes
    app = Starlette(
        routes=[
            Route(f"{PREFIX}/root", api.route(api.post_root, post), methods=["POST"]),
            Route(f"{PREFIX}/children", api.route(api.post_children, post), methods=["POST"]),
            Route(f"{PREFIX}/files", api.route(api.post_files, post), methods=["POST"]),
            Route(
                f"{PREFIX}/chunks",
                api.route(api.post_chunks, limits.max_chunk_body_bytes),
                methods=["POST"],
            ),
            Route(f"{PREFIX}/search", api.route(api.post_search, post), methods=["POST"]),
            Route(f"{PREFIX}/status", api.status, methods=["GET"]),
            Route(PREFIX, api.erase, methods=["DELETE"]),
            Route(HEALTH_PATH, api.healthz, methods=["GET"]),
            Route(METRICS_PATH, api.get_metrics, methods=["GET"]),
        ],
        middleware=[Middleware(RequestMetricsMiddleware, metrics=api.metrics)],
    )
    app.state.api = api
    app.state.metrics = api.metrics
    return app
