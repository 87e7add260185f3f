"""The HTTP app of a serving replica (`flywheel serve`): decisions from the model it follows.

Routes:

* ``POST /v1/decide`` — one request object ``{"user_id", "context", "context_spec"?, "language"?,
  "ide"?, "trigger"?}`` or a JSON array of them. Each user is routed with the replica's
  ``route(user_id)`` (a stable canary fraction, else production, else the fallback) and scored by
  that policy: ``{"show_probability", "model", "version", "channel"}`` per request (an array for
  an array). A request the served policy cannot take (wrong context length or spec, not a number)
  fails the whole call with 400 and a reason naming the field (``requests[3].context``); more than
  ``max_batch`` requests or ``max_body_bytes`` get 413; a policy that raises gets 500, and the app
  keeps serving.
* ``GET /v1/models`` — the replica's snapshot: production and canary versions, canary fraction.
* ``GET /healthz`` — 200 once ``ready()`` (the replica has read the channels to their end), else
  503; either way the body says what it serves.
* ``GET /metrics`` — Prometheus: ``flywheel_model_version`` per channel
  (``flywheel.metrics.ServingCollector``), requests by route and status, decisions by channel.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, Counter
from prometheus_client.exposition import generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fleet.errors import DecideRequestError
from fleet.metrics import ServingCollector
from ground.asgi import BodyOverLimit, RequestMetricsMiddleware, read_body
from ground.metrics import service_registry
from policies.context import CONTEXT_DIM, CONTEXT_SPEC
from policies.policy import Policy, RequestBatch
from schemas.enums import SuggestionTrigger

if TYPE_CHECKING:
    from fleet.subscriber import ModelSubscriber, Routed, ServingSnapshot

DECIDE_PATH = "/v1/decide"
MODELS_PATH = "/v1/models"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
ROUTES = (DECIDE_PATH, MODELS_PATH, HEALTH_PATH, METRICS_PATH)
MAX_USER_ID_CHARS = 256


class ServingReplica(Protocol):
    """What the app reads from a replica (``fleet.subscriber.ModelSubscriber``)."""

    model_name: str
    replica_id: str
    rejected: int

    @property
    def snapshot(self) -> ServingSnapshot[Any]: ...

    @property
    def serving_version(self) -> int: ...

    def route(self, user_id: str) -> Routed[Any]: ...


@dataclass(frozen=True)
class DecideRequest:
    """One validated request; ``field`` names it in errors (``request`` or ``requests[i]``)."""

    field: str
    user_id: str
    context: tuple[float, ...]
    context_spec: str | None
    language: str
    ide: str
    trigger: SuggestionTrigger


def parse_requests(body: Any, max_batch: int) -> tuple[list[DecideRequest], bool]:
    """The requests of a decoded JSON body and whether it was a batch (an array).

    Raises DecideRequestError (400 naming the field; 413 above ``max_batch``)."""
    if isinstance(body, list):
        if len(body) > max_batch:
            raise DecideRequestError(
                f"{len(body)} requests in one batch; send at most {max_batch} per call", 413
            )
        return [_parse_one(item, f"requests[{i}]") for i, item in enumerate(body)], True
    return [_parse_one(body, "request")], False


def _parse_one(item: Any, field: str) -> DecideRequest:
    if not isinstance(item, dict):
        raise DecideRequestError(f"{field}: expected a JSON object with user_id and context")
    user_id = item.get("user_id")
    if not isinstance(user_id, str) or not user_id or len(user_id) > MAX_USER_ID_CHARS:
        raise DecideRequestError(
            f"{field}.user_id: a non-empty string of at most {MAX_USER_ID_CHARS} characters "
            "is required (canary routing is per user)"
        )
    raw = item.get("context")
    if not isinstance(raw, list) or not all(_is_number(v) for v in raw):
        raise DecideRequestError(f"{field}.context: expected a JSON array of numbers")
    context = tuple(float(v) for v in raw)
    if not all(math.isfinite(v) for v in context):
        raise DecideRequestError(f"{field}.context: values must be finite numbers")
    names: dict[str, str | None] = {}
    for name in ("context_spec", "language", "ide", "trigger"):
        value = item.get(name)
        if value is not None and not isinstance(value, str):
            raise DecideRequestError(f"{field}.{name}: expected a string")
        names[name] = value
    try:
        trigger = SuggestionTrigger(names["trigger"] or SuggestionTrigger.AUTOMATIC)
    except ValueError:
        known = ", ".join(t.value for t in SuggestionTrigger)
        raise DecideRequestError(f"{field}.trigger: expected one of {known}") from None
    return DecideRequest(
        field, user_id, context, names["context_spec"], names["language"] or "unknown",
        names["ide"] or "unknown", trigger,
    )  # fmt: skip


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def policy_input(policy: Policy) -> tuple[str, int]:
    """(context spec, context width) ``policy`` scores: a trained policy states them in its
    ``config`` (``policies.gate_net.GateNetConfig``); the heuristic takes the simulator's layout."""
    config = getattr(policy, "config", None)
    spec = getattr(config, "context_spec", CONTEXT_SPEC)
    dim = getattr(config, "context_dim", CONTEXT_DIM)
    return str(spec), int(dim)


def decide(replica: ServingReplica, requests: Sequence[DecideRequest]) -> list[dict[str, Any]]:
    """Route and score ``requests``: one policy call per routed policy (a canary split costs one
    extra call, not one per request). Raises DecideRequestError (400) when a request does not
    fit the policy its user is routed to, (500) when a policy fails."""
    routed = [replica.route(r.user_id) for r in requests]
    groups: dict[int, list[int]] = {}
    for i, (request, route) in enumerate(zip(requests, routed, strict=True)):
        spec, dim = policy_input(route.model)
        if request.context_spec is not None and request.context_spec != spec:
            raise DecideRequestError(
                f"{request.field}.context_spec: {request.context_spec!r}, but "
                f"{route.model.name} v{route.version} serves {spec!r}; send that layout"
            )
        if len(request.context) != dim:
            raise DecideRequestError(
                f"{request.field}.context: {len(request.context)} values, but "
                f"{route.model.name} v{route.version} expects {dim} ({spec})"
            )
        groups.setdefault(id(route.model), []).append(i)
    probabilities = np.zeros(len(requests), dtype=np.float64)
    for members in groups.values():
        policy = routed[members[0]].model
        batch = RequestBatch(
            contexts=np.asarray([requests[i].context for i in members], dtype=np.float32),
            languages=tuple(requests[i].language for i in members),
            ides=tuple(requests[i].ide for i in members),
            triggers=tuple(requests[i].trigger for i in members),
            user_ids=tuple(requests[i].user_id for i in members),
        )
        try:
            probabilities[members] = policy.show_probabilities(batch)
        except Exception as exc:  # a policy bug answers 500; the replica keeps serving
            raise DecideRequestError(
                f"{policy.name} v{routed[members[0]].version} failed to score: "
                f"{type(exc).__name__}: {exc}",
                500,
            ) from exc
    return [
        {
            "show_probability": float(p),
            "model": route.model.name,
            "version": route.version,
            "channel": route.channel.value.lower(),
        }
        for p, route in zip(probabilities, routed, strict=True)
    ]


def snapshot_json(replica: ServingReplica) -> dict[str, Any]:
    """The replica's model, id and what it serves per channel (None for an idle canary)."""
    snapshot = replica.snapshot  # one read: a concurrent swap cannot mix two snapshots
    production, canary = snapshot.production, snapshot.canary
    return {
        "model": replica.model_name,
        "replica_id": replica.replica_id,
        "production": {
            "version": production.version if production else replica.serving_version,
            "artifact_sha256": production.artifact_sha256 if production else None,
            "fallback": production is None,
        },
        "canary": None
        if canary is None
        else {
            "version": canary.version,
            "artifact_sha256": canary.artifact_sha256,
            "traffic_fraction": canary.traffic_fraction,
        },
        "rejected_versions": replica.rejected,
    }


class ServingMetrics:
    """The app's registry: the replica's versions plus request and decision counters, and a
    running total of decisions for the command's status line (``decisions``)."""

    def __init__(self, replica: ServingReplica, routes: Sequence[str] = ROUTES) -> None:
        # ServingCollector reads only ServingReplica's attributes; any replica satisfies it.
        collector = ServingCollector([cast("ModelSubscriber[Any]", replica)])
        self._routes = frozenset(routes)
        self.registry = service_registry(collector)
        self.requests = Counter(
            "flywheel_serving_requests", "HTTP requests by route and status.",
            ["route", "status"], registry=self.registry,
        )  # fmt: skip
        self.decided = Counter(
            "flywheel_serving_decisions",
            "Requests answered (gate decisions, agent completions), by model, channel and version.",
            ["model", "channel", "version"], registry=self.registry,
        )  # fmt: skip
        self._lock = threading.Lock()
        self._decisions = 0

    @property
    def decisions(self) -> int:
        return self._decisions

    def count_decisions(self, results: list[dict[str, Any]]) -> None:
        for r in results:
            self.decided.labels(r["model"], r["channel"], str(r["version"])).inc()
        with self._lock:
            self._decisions += len(results)

    def record_request(self, path: str, status: int, seconds: float) -> None:
        """One HTTP request (unknown paths: ``other``); ``RequestMetricsMiddleware`` calls it."""
        self.requests.labels(path if path in self._routes else "other", str(status)).inc()

    def render(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    replica: ServingReplica,
    *,
    ready: Callable[[], bool] = lambda: True,
    max_batch: int = 1000,
    max_body_bytes: int = 1_048_576,
) -> Starlette:
    """The replica's app (routes in the module docstring). The app reads ``replica`` and never
    closes it: whoever made it does. ``app.state.metrics`` is its :class:`ServingMetrics`."""
    if max_batch < 1 or max_body_bytes < 1:
        raise ValueError("max_batch and max_body_bytes must be positive")
    metrics = ServingMetrics(replica)

    async def post_decide(request: Request) -> Response:
        try:
            body = await _read_json(request, max_body_bytes)
            requests, batch = parse_requests(body, max_batch)
            # Scoring is CPU work (numpy): off the event loop, like the gateway's sends.
            results = await run_in_threadpool(decide, replica, requests)
        except DecideRequestError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        metrics.count_decisions(results)
        return JSONResponse(results if batch else results[0])

    async def get_models(_: Request) -> Response:
        return JSONResponse(snapshot_json(replica))

    async def healthz(_: Request) -> Response:
        is_ready = ready()
        body = {"status": "ok" if is_ready else "starting", **snapshot_json(replica)}
        return JSONResponse(body, status_code=200 if is_ready else 503)

    async def get_metrics(_: Request) -> Response:
        return metrics.render()

    app = Starlette(
        routes=[
            Route(DECIDE_PATH, post_decide, methods=["POST"]),
            Route(MODELS_PATH, get_models, methods=["GET"]),
            Route(HEALTH_PATH, healthz, methods=["GET"]),
            Route(METRICS_PATH, get_metrics, methods=["GET"]),
        ],
        middleware=[Middleware(RequestMetricsMiddleware, metrics=metrics)],
    )
    app.state.metrics = metrics
    return app


async def _read_json(request: Request, max_body_bytes: int) -> Any:
    """The decoded body; DecideRequestError 413 above ``max_body_bytes``, 400 for bad JSON."""
    try:
        raw = await read_body(request, max_body_bytes)
    except BodyOverLimit as exc:
        raise DecideRequestError(str(exc), 413) from None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise DecideRequestError(f"body: not JSON ({exc})") from None
