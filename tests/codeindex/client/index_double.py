"""An in-process double of the index server's sync calls, built only from
`codeindex.protocol.Tree`, for the unit tests of the client's algorithm (used through
httpx.MockTransport). The real server's integration test is the server's own."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from codeindex.protocol import ChunkRef, FileEntry, Tree, chunk_hash

_PATH = re.compile(r"/v1/index/([^/]+)(?:/(\w+))?")


class IndexDouble:
    """Workspaces' trees and one shared embedding cache (a set of chunk hashes); records
    every request as (method, call, body bytes)."""

    def __init__(self, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.trees: dict[str, Tree] = {}
        self.embedded: set[str] = set()
        self.uploaded: list[str] = []  # chunk hashes whose text came, in order
        self.requests: list[tuple[str, str, bytes]] = []
        self.search_results: list[dict[str, Any]] = []
        self.cosines: dict[str, float] = {}  # what a search's "score" list gets back

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def bodies(self, call: str) -> list[dict[str, Any]]:
        return [json.loads(body) for _, c, body in self.requests if c == call]

    def calls(self) -> list[str]:
        return [call for _, call, _ in self.requests]

    def handle(self, request: httpx.Request) -> httpx.Response:
        match = _PATH.fullmatch(request.url.path)
        if match is None:
            return _error(404, "no such route")
        ws, call = match[1], match[2] or ""
        body = request.read()
        self.requests.append((request.method, call, body))
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "missing or unknown API key")
        if request.method == "DELETE":
            return httpx.Response(200, json={"erased": self.trees.pop(ws, None) is not None})
        data = json.loads(body) if body else {}
        tree = self.trees.get(ws)
        if call == "root":
            in_sync = tree is not None and tree.root == data["root"]
            return httpx.Response(200, json={"in_sync": in_sync})
        if call == "files":
            return self._files(self.trees.setdefault(ws, Tree()), data)
        if call == "chunks":
            return self._chunks(data)
        if tree is None:
            return _error(404, f"unknown workspace {ws}")
        if call == "children":
            return httpx.Response(200, json={"children": {
                d: {n: {"kind": k, "hash": h} for n, (k, h) in (tree.children(d) or {}).items()}
                for d in data["dirs"]
            }})  # fmt: skip
        if call == "search":
            answer: dict[str, Any] = {"results": self.search_results}
            if "score" in data:
                answer["scores"] = {h: self.cosines[h] for h in data["score"] if h in self.cosines}
            return httpx.Response(200, json=answer)
        if call == "status":
            return httpx.Response(200, json={"files": len(tree.files), "root": tree.root})
        return _error(404, f"no call {call}")

    def _files(self, tree: Tree, data: dict[str, Any]) -> httpx.Response:
        for path in data["deletes"]:
            tree.delete(path)
        wanted: set[str] = set()
        for upsert in data["upserts"]:
            entry = FileEntry.of(upsert["path"], [ChunkRef(**c) for c in upsert["chunks"]])
            if entry.hash != upsert["hash"]:
                return _error(422, f"file hash of {upsert['path']} does not match its chunks")
            tree.upsert(entry)
            wanted.update(c.hash for c in entry.chunks)
        return httpx.Response(200, json={"missing": sorted(wanted - self.embedded)})

    def _chunks(self, data: dict[str, Any]) -> httpx.Response:
        for chunk in data["chunks"]:
            if chunk_hash(chunk["text"]) != chunk["hash"]:
                return _error(422, "chunk text does not match its hash")
        for chunk in data["chunks"]:
            self.embedded.add(chunk["hash"])
            self.uploaded.append(chunk["hash"])
        return httpx.Response(200, json={"embedded": len(data["chunks"])})


def _error(status: int, reason: str) -> httpx.Response:
    return httpx.Response(status, json={"error": reason})
