"""From request bodies to validated protocol input: pure functions, no I/O.

Each raises IndexRequestError with the status to answer: 400 for JSON that is malformed or of
the wrong shape (a bad hash, a path that is not obfuscated, a wrong type), 413 for more items
than the limits allow, 422 for hashes that do not match what they hash (a file's over its
chunks, a chunk's over its text). Messages never quote a chunk's text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from codeindex.protocol import HASH_RE, ROOT, ChunkRef, FileEntry, chunk_hash, path_problem
from codeindex.server.errors import IndexRequestError


@dataclass(frozen=True)
class Limits:
    """Request limits (docs/index.md, "Limits"); over them a request gets 413."""

    max_body_bytes: int = 16 * 1_048_576
    max_chunk_body_bytes: int = 4 * 1_048_576
    max_files: int = 5000  # upserts + deletes per `files` request
    max_chunks_per_file: int = 10_000
    max_chunks: int = 256  # chunk texts per `chunks` request
    max_dirs: int = 10_000  # folders per `children` request
    max_query_chars: int = 4096
    max_top_k: int = 100
    max_scored: int = 1000  # chunk hashes in a search's "score" list


WORKSPACE_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def bad(message: str) -> IndexRequestError:
    return IndexRequestError(400, message)


def workspace_id(raw: str) -> str:
    """The `{ws}` of a route: a lower-case UUID (the client makes one at its first sync)."""
    if not WORKSPACE_RE.fullmatch(raw):
        raise bad(f"{raw[:40]!r} is not a workspace id (a lower-case UUID)")
    return raw


def parse_object(body: bytes) -> dict[str, Any]:
    """The JSON object in `body`."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"the body is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise bad("the body must be a JSON object")
    return parsed


def _hash(value: Any, what: str) -> str:
    if not isinstance(value, str) or not HASH_RE.fullmatch(value):
        raise bad(f"{what} must be a SHA-256 as 64 lower-case hex digits")
    return value


def _path(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise bad(f"{what} must be a string")
    problem = path_problem(value)
    if problem is not None:
        raise bad(f"{what}: {problem}")
    return value


def _list(obj: dict[str, Any], name: str, limit: int, *, required: bool = True) -> list[Any]:
    value = obj.get(name, None if required else [])
    if not isinstance(value, list):
        raise bad(f'"{name}" must be a JSON array')
    if len(value) > limit:
        raise IndexRequestError(413, f'{len(value)} items in "{name}"; send at most {limit}')
    return value


def _int(value: Any, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise bad(f"{what} must be an integer from {low} to {high}")
    return value


def parse_root(obj: dict[str, Any]) -> str:
    return _hash(obj.get("root"), '"root"')


def parse_dirs(obj: dict[str, Any], limits: Limits) -> list[str]:
    """Folder paths: ROOT ("") or obfuscated paths."""
    dirs = _list(obj, "dirs", limits.max_dirs)
    return [d if d == ROOT else _path(d, f"dirs[{i}]") for i, d in enumerate(dirs)]


def parse_files(obj: dict[str, Any], limits: Limits) -> tuple[list[FileEntry], list[str]]:
    """(upserts, deletes); 422 when an upsert's hash is not its file hash."""
    upserts = _list(obj, "upserts", limits.max_files, required=False)
    deletes = _list(obj, "deletes", limits.max_files, required=False)
    if len(upserts) + len(deletes) > limits.max_files:
        raise IndexRequestError(
            413, f"{len(upserts) + len(deletes)} upserts and deletes; send at most "
            f"{limits.max_files} per request",
        )  # fmt: skip
    entries = [_file(item, f"upserts[{i}]", limits) for i, item in enumerate(upserts)]
    return entries, [_path(p, f"deletes[{i}]") for i, p in enumerate(deletes)]


def _file(item: Any, where: str, limits: Limits) -> FileEntry:
    if not isinstance(item, dict):
        raise bad(f"{where} must be an object with path, hash and chunks")
    path = _path(item.get("path"), f"{where}.path")
    claimed = _hash(item.get("hash"), f"{where}.hash")
    chunks = _list(item, "chunks", limits.max_chunks_per_file)
    refs = []
    for j, c in enumerate(chunks):
        if not isinstance(c, dict):
            raise bad(f"{where}.chunks[{j}] must be an object with hash, start and end")
        start = _int(c.get("start"), f"{where}.chunks[{j}].start", 1, 2**31 - 1)
        end = _int(c.get("end"), f"{where}.chunks[{j}].end", start, 2**31 - 1)
        refs.append(ChunkRef(_hash(c.get("hash"), f"{where}.chunks[{j}].hash"), start, end))
    entry = FileEntry.of(path, refs)
    if entry.hash != claimed:
        raise IndexRequestError(
            422, f"{where}.hash is not the file hash of its name and chunks "
            "(codeindex.protocol.file_hash); recompute it",
        )  # fmt: skip
    return entry


def parse_chunks(obj: dict[str, Any], limits: Limits) -> list[tuple[str, str]]:
    """(hash, text) pairs; 422 when a text does not hash to its hash."""
    chunks = _list(obj, "chunks", limits.max_chunks)
    out = []
    for i, c in enumerate(chunks):
        if not isinstance(c, dict) or not isinstance(c.get("text"), str):
            raise bad(f"chunks[{i}] must be an object with hash and text (a string)")
        claimed = _hash(c.get("hash"), f"chunks[{i}].hash")
        if chunk_hash(c["text"]) != claimed:
            raise IndexRequestError(
                422, f"chunks[{i}]: the text does not hash to {claimed} "
                "(codeindex.protocol.chunk_hash); the file changed since it was chunked?",
            )  # fmt: skip
        out.append((claimed, c["text"]))
    return out


def parse_search(obj: dict[str, Any], limits: Limits) -> tuple[str, int, str | None]:
    """(query, top_k, path prefix or None)."""
    query = obj.get("query")
    if not isinstance(query, str) or not query.strip():
        raise bad('"query" must be a non-empty string')
    if len(query) > limits.max_query_chars:
        raise IndexRequestError(413, f"the query has {len(query)} characters; at most "
                                f"{limits.max_query_chars}")  # fmt: skip
    top_k = _int(obj.get("top_k", 10), '"top_k"', 1, limits.max_top_k)
    prefix = obj.get("path_prefix")
    return query, top_k, None if prefix is None else _path(prefix, '"path_prefix"')


def parse_scored(obj: dict[str, Any], limits: Limits) -> list[str]:
    """A search's optional ``"score"`` list: chunk hashes whose cosine similarity to the query
    the client asks for (its lexical candidates), each once; [] when absent."""
    scored = _list(obj, "score", limits.max_scored, required=False)
    return list(dict.fromkeys(_hash(h, f"score[{i}]") for i, h in enumerate(scored)))
