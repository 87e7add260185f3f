"""The event schemas shipped in ``schemas/avro/``: lookup by name, and their history.

Each ``schemas/avro/<Name>.avsc`` holds the current value schema of one event (namespace
``flywheel.v1``); ``schemas/avro/history/<Name>/v<N>.avsc`` holds every version ever released,
``v1`` first. Evolution is BACKWARD_TRANSITIVE: the current schema must read data written with
every version in its history (checked by the tests with :mod:`schemas.compatibility`).

To change a schema: edit ``<Name>.avsc``, then copy it to the next ``v<N+1>.avsc``. Which
topic carries which schema is declared with the topics (``streams.topics.TOPIC_VALUE_SCHEMAS``).
"""

from __future__ import annotations

import functools
import json
import re
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, cast

import fastavro

from schemas.errors import SchemaError

NAMESPACE = "flywheel.v1"

_SUFFIX = ".avsc"
_HISTORY_FILE = re.compile(r"v([1-9][0-9]*)\.avsc")


def _avro_dir() -> Traversable:
    # importlib.resources, not __file__, so this also works from a wheel or a zip.
    return files("schemas").joinpath("avro")


def subject_for(topic: str) -> str:
    """Registry subject of a topic's value schema: ``<topic>-value`` (TopicNameStrategy)."""
    return f"{topic}-value"


@functools.cache
def schema_names() -> tuple[str, ...]:
    """Names of all current schemas (``<Name>`` of each ``schemas/avro/<Name>.avsc``), sorted."""
    return tuple(
        sorted(
            entry.name.removesuffix(_SUFFIX)
            for entry in _avro_dir().iterdir()
            if entry.is_file() and entry.name.endswith(_SUFFIX)
        )
    )


def _check_name(name: str) -> None:
    # Also keeps a caller-supplied name from reaching outside schemas/avro/.
    if name not in schema_names():
        raise SchemaError(
            f"unknown schema {name!r}; known schemas: {', '.join(schema_names())}. "
            f"Add schemas/avro/{name}.avsc or fix the name."
        )


def _parse_json(text: str, where: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{where} is not valid JSON ({exc}); fix the file.") from exc
    if not isinstance(parsed, dict):
        raise SchemaError(f"{where} must hold one JSON object (an Avro record schema).")
    return cast(dict[str, Any], parsed)


def schema_text(name: str) -> str:
    """The current schema ``name`` exactly as stored (what to register in the registry).

    Raises :class:`SchemaError` when no ``schemas/avro/<name>.avsc`` exists.
    """
    _check_name(name)
    return _avro_dir().joinpath(name + _SUFFIX).read_text(encoding="utf-8")


def load_schema(name: str) -> dict[str, Any]:
    """The current schema ``name`` as parsed JSON; a fresh dict on every call, safe to modify.

    Raises :class:`SchemaError` when the schema does not exist or is not a JSON object.
    """
    return _parse_json(schema_text(name), f"schemas/avro/{name}{_SUFFIX}")


@functools.cache
def parsed_schema(name: str) -> dict[str, Any]:
    """The current schema ``name`` parsed by :func:`fastavro.parse_schema`, for fastavro I/O.

    Parsed once per process and shared (an unparsed schema encodes 2.3x slower): do not modify
    the returned dict. Raises :class:`SchemaError` when the schema is missing or invalid Avro.
    """
    schema = load_schema(name)
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as exc:  # fastavro raises several unrelated types for a bad schema
        raise SchemaError(
            f"schemas/avro/{name}{_SUFFIX} is not a valid Avro schema: {exc}"
        ) from exc
    return cast(dict[str, Any], parsed)


def history(name: str) -> list[dict[str, Any]]:
    """Every released version of schema ``name`` as parsed JSON, oldest (``v1``) first.

    Returns ``[]`` when ``schemas/avro/history/<name>/`` does not exist. Raises
    :class:`SchemaError` for an unknown schema, a file not named ``v<N>.avsc``, or a gap in the
    numbering (index ``i`` of the result is always version ``i + 1``).
    """
    _check_name(name)
    folder = _avro_dir().joinpath("history", name)
    if not folder.is_dir():
        return []
    versions: dict[int, Traversable] = {}
    for entry in folder.iterdir():
        match = _HISTORY_FILE.fullmatch(entry.name)
        if match is None:
            raise SchemaError(
                f"schemas/avro/history/{name}/{entry.name}: history files must be named "
                "v<N>.avsc (v1.avsc, v2.avsc, ...); rename or remove it."
            )
        versions[int(match.group(1))] = entry
    expected = list(range(1, len(versions) + 1))
    if sorted(versions) != expected:
        raise SchemaError(
            f"schemas/avro/history/{name}/ holds versions {sorted(versions)}; they must be "
            f"numbered {expected} without gaps."
        )
    return [
        _parse_json(
            versions[number].read_text(encoding="utf-8"),
            f"schemas/avro/history/{name}/v{number}{_SUFFIX}",
        )
        for number in expected
    ]
