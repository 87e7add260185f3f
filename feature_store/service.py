"""HTTP lookups of online feature values: a Starlette app over an :class:`OnlineFeatureStore`.

Routes (docs/features.md):

* ``GET /features`` — the declarations.
* ``GET /features/{entity_type}/{entity_id}`` — one entity; query ``features=a,b`` (qualified or
  short names, default all of the type) and ``as_of`` (epoch ms or ISO 8601 with a zone,
  default the watermark).
* ``POST /features/{entity_type}`` — many: a JSON list of ids, or
  ``{"ids": [...], "features": [...], "as_of": ...}``; answers in the order of ``ids``.
* ``GET /healthz`` — 200 once the processor has caught up with its topics, 503 before.

Errors are JSON ``{"error": reason}``: 404 for an undeclared entity type or feature, 400 for a
malformed body or ``as_of`` (or one older than the store keeps), 413 for more than ``max_ids``.
Lookups run on the event loop: they are microseconds under the store's lock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from feature_store.declarations import FeatureDeclaration
from feature_store.errors import (
    FeatureStoreError,
    UnknownEntityError,
    UnknownFeatureError,
)
from feature_store.online import FeatureValue, OnlineFeatureStore
from feature_store.semantics import from_epoch_ms

HEALTH_PATH = "/healthz"


class _BadRequest(FeatureStoreError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def create_app(
    store: OnlineFeatureStore,
    *,
    ready: Callable[[], bool] = lambda: True,
    max_ids: int = 10_000,
) -> Starlette:
    """The lookup app. ``ready`` says whether the store's state is complete (the processor has
    caught up); ``/healthz`` answers 503 until it is."""

    async def list_features(_: Request) -> JSONResponse:
        return JSONResponse({"features": [_declaration(f) for f in store.features]})

    async def get_one(request: Request) -> JSONResponse:
        entity_type = request.path_params["entity_type"]
        entity_id = request.path_params["entity_id"]
        try:
            features = _names(request.query_params.get("features"))
            as_of = _as_of(request.query_params.get("as_of"))
            values = store.get(entity_type, entity_id, features, as_of)
            t = store.resolve_as_of(as_of)
        except FeatureStoreError as exc:
            return _error(exc)
        body = {"entity_type": entity_type, "entity_id": entity_id, **_as_of_json(t)}
        return JSONResponse({**body, "features": _values(values)})

    async def post_many(request: Request) -> JSONResponse:
        entity_type = request.path_params["entity_type"]
        try:
            ids, features, as_of = _many_body(await request.body(), max_ids)
            values = store.get_many(entity_type, ids, features, as_of)
            t = store.resolve_as_of(as_of)
        except FeatureStoreError as exc:
            return _error(exc)
        entities = [
            {"entity_id": e, "features": _values(v)} for e, v in zip(ids, values, strict=True)
        ]
        return JSONResponse({"entity_type": entity_type, **_as_of_json(t), "entities": entities})

    async def healthz(_: Request) -> JSONResponse:
        watermark = store.watermark_ms
        body = {
            "status": "ok" if ready() else "catching_up",
            "watermark": None if watermark is None else from_epoch_ms(watermark).isoformat(),
            "series": store.aggregator.series_count(),
        }
        return JSONResponse(body, status_code=200 if ready() else 503)

    return Starlette(
        routes=[
            Route("/features", list_features, methods=["GET"]),
            Route("/features/{entity_type}/{entity_id:path}", get_one, methods=["GET"]),
            Route("/features/{entity_type}", post_many, methods=["POST"]),
            Route(HEALTH_PATH, healthz, methods=["GET"]),
        ]
    )


def _error(exc: FeatureStoreError) -> JSONResponse:
    if isinstance(exc, UnknownEntityError | UnknownFeatureError):
        status = 404
    elif isinstance(exc, _BadRequest):
        status = exc.status
    else:
        status = 400  # AsOfOutOfRangeError and other bad input
    return JSONResponse({"error": str(exc)}, status_code=status)


def _names(raw: str | None) -> list[str] | None:
    if raw is None or not raw.strip():
        return None
    return [n.strip() for n in raw.split(",") if n.strip()]


def parse_as_of(text: str) -> int | datetime:
    """An ``as_of`` as given by a user: epoch milliseconds (digits) or ISO 8601 with a zone.

    Raises ValueError for anything else (a time without a zone would be ambiguous).
    """
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ValueError(f"{text!r} is neither epoch milliseconds nor ISO 8601 with a zone (…Z)")
    return parsed


def _as_of(raw: Any) -> datetime | int | None:
    """Epoch ms (int or text) or ISO 8601 with a zone; _BadRequest otherwise."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return parse_as_of(raw)
        except ValueError as exc:
            raise _BadRequest(400, f"as_of {exc}") from None
    raise _BadRequest(
        400, f"as_of {raw!r} is neither epoch milliseconds nor ISO 8601 with a zone (…Z)"
    )


def _many_body(body: bytes, max_ids: int) -> tuple[list[str], list[str] | None, Any]:
    try:
        data = json.loads(body or b"null")
    except ValueError:
        raise _BadRequest(
            400, 'the body is not JSON; send a list of ids or {"ids": [...]}'
        ) from None
    features = as_of = None
    if isinstance(data, dict):
        ids, features, as_of = data.get("ids"), data.get("features"), data.get("as_of")
    else:
        ids = data
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _BadRequest(400, "ids must be a JSON list of entity id strings")
    if features is not None and (
        not isinstance(features, list) or not all(isinstance(f, str) for f in features)
    ):
        raise _BadRequest(400, "features must be a JSON list of feature names")
    if len(ids) > max_ids:
        raise _BadRequest(413, f"{len(ids)} ids is over the limit of {max_ids}; split the batch")
    return ids, features, _as_of(as_of)


def _values(values: dict[str, FeatureValue]) -> dict[str, dict[str, Any]]:
    return {name: {"value": v.value, "count": v.count} for name, v in values.items()}


def _as_of_json(t: int | None) -> dict[str, Any]:
    return {"as_of": None if t is None else from_epoch_ms(t).isoformat(), "as_of_ms": t}


def _declaration(feature: FeatureDeclaration) -> dict[str, Any]:
    return {
        "name": feature.qualified_name,
        "entity_type": feature.entity.name,
        "entity_keys": list(feature.entity.keys),
        "source": feature.source,
        "aggregation": feature.aggregation,
        "window": feature.window,
        "ttl_ms": feature.ttl_ms,
        "description": feature.description,
    }
