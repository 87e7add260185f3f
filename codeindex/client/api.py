"""The index server's HTTP API as the client calls it (docs/index.md, "The sync protocol").

One method per call, JSON bodies written compactly and counted (requests made, request-body
bytes sent), errors turned into IndexClientError messages that say what to do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import httpx

from codeindex.client.errors import IndexClientError
from codeindex.protocol import DIR, FILE, FileEntry

DEFAULT_TIMEOUT_S = 120.0  # a chunk batch is embedded before its answer: allow for a slow CPU


class IndexServerError(IndexClientError):
    """The server answered with an error status; `status` is its HTTP code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class IndexClient:
    """Calls one workspace's endpoints on the server at `base_url` with a bearer `api_key`
    (None: no header, for a server run without auth). `transport` replaces the network (tests).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        workspace_id: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.workspace_id = workspace_id
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport
        )
        self.requests = 0
        self.bytes_sent = 0  # request bodies: what the sync criteria count

    def __enter__(self) -> IndexClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def root(self, root_hash: str) -> dict[str, Any]:
        """`POST root`: the answer (`in_sync`, and whatever else the server adds)."""
        answer = self._call("POST", "/root", {"root": root_hash})
        if not isinstance(answer.get("in_sync"), bool):
            raise self._unexpected("/root", answer)
        return answer

    def children(self, dirs: Sequence[str]) -> dict[str, dict[str, tuple[str, str]]]:
        """`POST children`: each folder's children as name -> (kind, hash); a folder the server
        does not hold maps to {}."""
        answer = self._call("POST", "/children", {"dirs": list(dirs)})
        out: dict[str, dict[str, tuple[str, str]]] = {}
        try:
            for folder, children in (answer["children"] or {}).items():
                out[folder] = {name: (c["kind"], c["hash"]) for name, c in (children or {}).items()}
        except (KeyError, TypeError, AttributeError):
            raise self._unexpected("/children", answer) from None
        if any(kind not in (DIR, FILE) for c in out.values() for kind, _ in c.values()):
            raise self._unexpected("/children", answer)
        return out

    def files(self, upserts: Sequence[FileEntry], deletes: Sequence[str]) -> list[str]:
        """`POST files`: the chunk hashes of `upserts` the server has no embedding for."""
        body = {"upserts": [e.to_json() for e in upserts], "deletes": list(deletes)}
        answer = self._call("POST", "/files", body)
        missing = answer.get("missing")
        if not isinstance(missing, list):
            raise self._unexpected("/files", answer)
        return [str(h) for h in missing]

    def chunks(self, chunks: Iterable[tuple[str, str]]) -> int:
        """`POST chunks` with (hash, text) pairs: how many the server embedded."""
        body = {"chunks": [{"hash": h, "text": text} for h, text in chunks]}
        return int(self._call("POST", "/chunks", body).get("embedded", 0))

    def search(self, query: str, top_k: int, path_prefix: str | None) -> list[dict[str, Any]]:
        """`POST search`: results as the server sends them (chunk, path, start, end, score)."""
        return self.search_scored(query, top_k, path_prefix)[0]

    def search_scored(
        self, query: str, top_k: int, path_prefix: str | None, score: Sequence[str] = ()
    ) -> tuple[list[dict[str, Any]], dict[str, float]]:
        """`POST search`, asking also for the cosine similarity of the chunks `score` lists
        (hashes only): (the results as sent, chunk hash -> cosine for those the server holds)."""
        body: dict[str, Any] = {"query": query, "top_k": top_k, "path_prefix": path_prefix}
        if score:
            body["score"] = list(score)
        answer = self._call("POST", "/search", body)
        results, scores = answer.get("results"), answer.get("scores", {})
        if not isinstance(results, list) or not isinstance(scores, dict):
            raise self._unexpected("/search", answer)
        try:
            return results, {str(h): float(v) for h, v in scores.items()}
        except (TypeError, ValueError):
            raise self._unexpected("/search", answer) from None

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/status")

    def erase(self) -> dict[str, Any]:
        """`DELETE` the workspace on the server (its files, and embeddings no other holds)."""
        return self._call("DELETE", "")

    @staticmethod
    def encode(body: object) -> bytes:
        """A request body as sent: compact JSON."""
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def _call(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        content = None if body is None else self.encode(body)
        url = f"/v1/index/{self.workspace_id}{path}"
        self.requests += 1
        self.bytes_sent += len(content or b"")
        try:
            response = self._http.request(method, url, content=content)
        except httpx.ConnectError as exc:
            raise IndexClientError(
                f"cannot reach the index server at {self.base_url} ({exc}); start one with "
                "`flywheel index serve`, or point --url at the running one"
            ) from exc
        except httpx.TimeoutException as exc:
            raise IndexClientError(
                f"the index server at {self.base_url} did not answer {method} {path or '/'} "
                f"in time ({exc.__class__.__name__}); is it overloaded? try again"
            ) from exc
        except httpx.HTTPError as exc:
            raise IndexClientError(f"{method} {self.base_url}{url} failed: {exc}") from exc
        if response.status_code >= 400:
            raise self._refused(method, path, response)
        if not response.content:
            return {}
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self._unexpected(path, response.text[:200])
        return answer

    def _refused(self, method: str, path: str, response: httpx.Response) -> IndexServerError:
        try:
            reason = str(response.json().get("error", response.reason_phrase))
        except (ValueError, AttributeError):
            reason = response.text[:200] or response.reason_phrase
        hint = ""
        if response.status_code in (401, 403):
            hint = "; pass the server's key with --api-key or FLYWHEEL_API_KEY"
        return IndexServerError(
            f"the index server refused {method} {path or '/'} ({response.status_code}): "
            f"{reason}{hint}",
            response.status_code,
        )

    def _unexpected(self, path: str, answer: object) -> IndexClientError:
        return IndexClientError(
            f"the index server at {self.base_url} gave an unexpected answer to {path}: "
            f"{str(answer)[:200]}; is --url an index server (`flywheel index serve`)?"
        )
