"""The index server's app with a bag-of-words embedder and an in-memory event sink: the sync
protocol end to end, refusals, content proofs, privacy of chunk texts, and a replica rebuilt
from the published records."""

from __future__ import annotations

import gc
import logging
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from codeindex.protocol import chunk_hash
from codeindex.server.app import create_app
from codeindex.server.events import ORIGIN_HEADER, IndexEventLog, LogApplier
from codeindex.server.parsing import Limits
from codeindex.server.service import IndexService
from codeindex.server.state import IndexState
from schemas.events import ChunkEmbedded, IndexFileUpdated
from streams.gateway.keys import ApiKeyStore
from streams.serde import AvroCodec
from streams.topics import INDEX_EMBEDDINGS_TOPIC, INDEX_FILES_TOPIC
from tests.codeindex.server.index_doubles import (
    BagOfWordsEmbedder,
    MemorySink,
    Workspace,
    obf,
    segment,
)
from tests.registry_double import FakeRegistry

CANARY = "zebracanary_7f3a9"  # planted in a chunk's text; must appear nowhere server-side


class Server:
    """A TestClient on a fresh index app (one key), its state, sink and codec."""

    def __init__(self, tmp_path: Path, *, origin: str = "server-a", **limits: int) -> None:
        self.embedder = BagOfWordsEmbedder()
        self.state = IndexState(self.embedder.dim)
        self.sink = MemorySink()
        self.codec = AvroCodec(FakeRegistry())  # type: ignore[arg-type]  # a registry double
        events = IndexEventLog(
            self.sink, self.codec, embedder_name=self.embedder.name,
            embedder_version=self.embedder.version, dim=self.embedder.dim,
            producer="codeindex.server/test", origin=origin,
        )  # fmt: skip
        self.service = IndexService(self.state, self.embedder, events)
        self.keys = ApiKeyStore(tmp_path / "keys.json")
        self.secret = self.keys.add("ide")
        app = create_app(self.service, keys=self.keys, limits=Limits(**limits))
        self.client = TestClient(app)

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.secret}", **kwargs.pop("headers", {})}
        return self.client.request(method, path, json=body, headers=headers, **kwargs)

    def post(self, ws: str, step: str, body: Any) -> Any:
        return self.call("POST", f"/v1/index/{ws}/{step}", body)

    def sync(self, w: Workspace) -> dict[str, Any]:
        """A whole first sync, as the client does it; the answers of each step."""
        root = self.post(w.ws, "root", {"root": w.tree().root}).json()
        upserts = [e.to_json() for e in w.entries()]
        files = self.post(w.ws, "files", {"upserts": upserts, "deletes": []}).json()
        texts = w.texts()
        chunks = [{"hash": h, "text": texts[h]} for h in files["missing"]]
        embedded = self.post(w.ws, "chunks", {"chunks": chunks}).json() if chunks else None
        after = self.post(w.ws, "root", {"root": w.tree().root}).json()
        return {"root": root, "files": files, "chunks": embedded, "after": after}

    def search(self, ws: str, query: str, **extra: Any) -> Any:
        return self.post(ws, "search", {"query": query, **extra})


@pytest.fixture
def server(tmp_path: Path) -> Server:
    return Server(tmp_path)


def workspace() -> Workspace:
    return Workspace(
        {
            "src/parse.py": [
                "def parse_json(text):\n    return loads(text)",
                "class Tokenizer:\n    pass",
            ],
            "src/net/http.py": ["def fetch_url(url):\n    return get(url)"],
            "notes.md": [f"the {CANARY} lives here"],
        }
    )


def test_a_first_sync_then_an_unchanged_resync_then_search(server: Server) -> None:
    w = workspace()
    steps = server.sync(w)
    assert steps["root"] == {"in_sync": False, "missing": []}
    assert sorted(steps["files"]["missing"]) == sorted(w.texts())
    assert steps["chunks"] == {"embedded": 4}
    assert steps["after"] == {"in_sync": True, "missing": []}
    # An unchanged re-sync: one hash sent, in sync.
    assert server.post(w.ws, "root", {"root": w.tree().root}).json()["in_sync"] is True
    hits = server.search(w.ws, "fetch a url", top_k=1).json()["results"]
    assert hits == [
        {"chunk": chunk_hash(w.files["src/net/http.py"][0]), "path": obf("src/net/http.py"),
         "start": 1, "end": 2, "score": pytest.approx(hits[0]["score"])},
    ]  # fmt: skip
    assert 0.3 < hits[0]["score"] <= 1.0
    status = server.call("GET", f"/v1/index/{w.ws}/status").json()
    assert status == {
        "workspace": w.ws, "files": 3, "chunks": 4, "chunks_embedded": 4, "root": w.tree().root,
        "embedder": {"name": "test-bow", "version": "1", "dim": 64},
    }  # fmt: skip
    children = server.post(w.ws, "children", {"dirs": ["", obf("src")]}).json()["children"]
    assert set(children[""]) == {obf("src"), obf("notes.md")}
    assert children[obf("src")][segment("net")]["kind"] == "dir"  # children by name


def test_a_second_workspace_reuses_embeddings_and_finds_only_its_own_chunks(
    server: Server,
) -> None:
    a = workspace()
    server.sync(a)
    b = Workspace({"lib/copy.py": [a.files["src/parse.py"][0]], "lib/other.py": ["nothing alike"]})
    steps = server.sync(b)
    assert steps["files"]["missing"] == [chunk_hash("nothing alike")]  # the shared one is cached
    assert server.embedder.calls == 2  # a's chunks once, b's new one once
    hits = server.search(b.ws, "fetch url get", top_k=10).json()["results"]
    assert chunk_hash(a.files["src/net/http.py"][0]) not in {h["chunk"] for h in hits}
    assert {h["path"] for h in hits} <= {obf("lib/copy.py"), obf("lib/other.py")}
    metrics = server.call("GET", "/metrics").text
    assert "flywheel_index_embedding_cache_hits_total 1.0" in metrics
    assert "flywheel_index_chunks_embedded_total 5.0" in metrics
    assert (
        'flywheel_index_requests_total{route="/v1/index/{ws}/search",status="200"} 1.0' in metrics
    )
    assert "flywheel_index_search_duration_seconds_count 1.0" in metrics


def test_a_path_prefix_limits_the_results(server: Server) -> None:
    w = workspace()
    server.sync(w)
    hits = server.search(w.ws, "parse json text", top_k=3, path_prefix=obf("src/net")).json()
    assert [h["path"] for h in hits["results"]] == [obf("src/net/http.py")]


def test_a_search_scores_the_listed_chunks_of_its_own_tree(server: Server) -> None:
    w = workspace()
    server.sync(w)
    stranger = Workspace({"x.py": ["def parse_json(): theirs"]})
    server.sync(stranger)
    hits = server.search(w.ws, "parse json text", top_k=1).json()["results"]
    mine = [chunk_hash(t) for texts in w.files.values() for t in texts]
    theirs = chunk_hash(stranger.files["x.py"][0])
    answer = server.search(w.ws, "parse json text", top_k=1, score=[*mine, theirs, "e" * 64])
    assert answer.json()["results"] == hits  # the ranking is unchanged
    scores = answer.json()["scores"]
    assert sorted(scores) == sorted(mine)  # the content proof: only chunks of w's tree
    assert scores[hits[0]["chunk"]] == pytest.approx(hits[0]["score"], abs=2e-3)
    assert max(scores, key=scores.__getitem__) == hits[0]["chunk"]
    assert "scores" not in server.search(w.ws, "parse json text").json()  # not asked: as before


def test_chunks_outside_the_tree_are_not_embedded(server: Server) -> None:
    w = workspace()
    server.sync(w)
    text = "def parse_json(): stolen"
    answer = server.post(w.ws, "chunks", {"chunks": [{"hash": chunk_hash(text), "text": text}]})
    assert answer.status_code == 422
    assert "not in workspace" in answer.json()["error"]


def bad_requests(w: Workspace) -> list[tuple[str, str, Any, int, str]]:
    entry = w.entries()[0].to_json()
    text = w.files["notes.md"][0]
    backwards = {"hash": "0" * 64, "start": 3, "end": 2}
    return [
        ("POST", "root", b"{not json", 400, "not JSON"),
        ("POST", "root", [1], 400, "JSON object"),
        ("POST", "root", {"root": "ABC"}, 400, "SHA-256"),
        ("POST", "children", {"dirs": ["src"]}, 400, "obfuscated path"),
        ("POST", "files", {"upserts": [{**entry, "path": "src/x.py"}]}, 400, "obfuscated path"),
        ("POST", "files", {"upserts": [{**entry, "hash": "0" * 64}]}, 422, "file hash"),
        ("POST", "files", {"upserts": [{**entry, "chunks": [backwards]}]}, 400, "integer"),
        ("POST", "files", {"deletes": "x"}, 400, "JSON array"),
        ("POST", "chunks", {"chunks": [{"hash": "0" * 64, "text": text}]}, 422, "does not hash"),
        ("POST", "chunks", {"chunks": [{"hash": chunk_hash(text)}]}, 400, "text"),
        ("POST", "search", {"query": ""}, 400, "query"),
        ("POST", "search", {"query": "x", "top_k": 101}, 400, "top_k"),
        ("POST", "search", {"query": "x", "path_prefix": "/etc"}, 400, "obfuscated path"),
        ("POST", "search", {"query": "x", "score": ["abc"]}, 400, "SHA-256"),
        ("POST", "search", {"query": "x", "score": "abc"}, 400, "JSON array"),
    ]  # fmt: skip


def test_refusals_say_why_with_4xx(server: Server) -> None:
    w = workspace()
    server.sync(w)
    for method, step, body, status, reason in bad_requests(w):
        raw = body if isinstance(body, bytes) else None
        answer = server.client.request(
            method, f"/v1/index/{w.ws}/{step}", content=raw, json=None if raw else body,
            headers={"Authorization": f"Bearer {server.secret}"},
        )  # fmt: skip
        assert answer.status_code == status, (step, body, answer.text)
        assert reason in answer.json()["error"], (step, answer.json())
        assert CANARY not in answer.text


def test_unknown_workspaces_bad_ids_and_keys(server: Server) -> None:
    unknown = Workspace({}).ws
    for step, body in (("children", {"dirs": [""]}), ("search", {"query": "x"}),
                       ("chunks", {"chunks": []})):  # fmt: skip
        assert server.post(unknown, step, body).status_code == 404
    assert server.call("GET", f"/v1/index/{unknown}/status").status_code == 404
    assert server.call("DELETE", f"/v1/index/{unknown}").status_code == 404
    assert server.post(unknown, "root", {"root": "0" * 64}).json() == {
        "in_sync": False,
        "missing": [],
    }
    assert server.post("NOT-A-UUID", "root", {"root": "0" * 64}).status_code == 400
    anonymous = server.client.post(f"/v1/index/{unknown}/root", json={"root": "0" * 64})
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="flywheel-index"'
    server.keys.revoke("ide")
    assert server.post(unknown, "root", {"root": "0" * 64}).status_code == 403


def test_limits_answer_413(tmp_path: Path) -> None:
    server = Server(tmp_path, max_chunks=2, max_files=2, max_chunk_body_bytes=1000, max_scored=2)
    w = workspace()
    server.sync(Workspace({"a.py": ["x"]}, ws=w.ws))
    chunks = [{"hash": chunk_hash(str(i)), "text": str(i)} for i in range(3)]
    assert server.post(w.ws, "chunks", {"chunks": chunks}).status_code == 413
    big = [{"hash": chunk_hash("y" * 2000), "text": "y" * 2000}]
    assert server.post(w.ws, "chunks", {"chunks": big}).status_code == 413
    files = {"upserts": [e.to_json() for e in w.entries()], "deletes": []}
    assert server.post(w.ws, "files", files).status_code == 413
    assert server.search(w.ws, "x", score=[chunk_hash(str(i)) for i in range(3)]).status_code == 413


def test_a_broker_that_refuses_changes_nothing_and_answers_503(server: Server) -> None:
    w = workspace()
    server.sink.fail = True
    answer = server.post(w.ws, "files", {"upserts": [e.to_json() for e in w.entries()]})
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "5"
    assert not server.state.known(w.ws)


def decoded(server: Server) -> list[tuple[str, str, Any]]:
    contract = {"index.files": INDEX_FILES_TOPIC, "index.embeddings": INDEX_EMBEDDINGS_TOPIC}
    out = []
    for r in server.sink.records:
        value = None if r.value is None else server.codec.decode(contract[r.topic], r.value)
        out.append((r.topic, r.key.decode(), value))
    return out


def test_events_carry_hashes_and_vectors_and_erase_publishes_tombstones(server: Server) -> None:
    a, shared = workspace(), "def shared():\n    pass"
    a.files["src/shared.py"] = [shared]
    b = Workspace({"b.py": [shared]})
    server.sync(a)
    server.sync(b)
    records = decoded(server)
    files = [IndexFileUpdated.from_record(v) for t, _, v in records if t == "index.files"]
    assert {(f.workspace_id, f.path) for f in files} == {
        *((a.ws, e.path) for e in a.entries()), (b.ws, obf("b.py")),
    }  # fmt: skip
    vectors = [ChunkEmbedded.from_record(v) for t, _, v in records if t == "index.embeddings"]
    assert len(vectors) == len({*a.texts(), *b.texts()}) == 5
    assert all(len(v.vector) == 2 * 64 and v.embedder_version == "1" for v in vectors)
    assert all(r.headers == [(ORIGIN_HEADER, b"server-a")] for r in server.sink.records)
    before = len(server.sink.records)
    erased = server.call("DELETE", f"/v1/index/{a.ws}").json()
    assert erased == {"workspace": a.ws, "files_removed": 4, "embeddings_removed": 4}
    tombstones = {
        (r.topic, r.key.decode()) for r in server.sink.records[before:] if r.value is None
    }
    assert len(tombstones) == 8 == len(server.sink.records) - before
    assert ("index.embeddings", f"test-bow:1@{chunk_hash(shared)}") not in tombstones  # b holds it
    assert ("index.files", f"{a.ws}/{obf('notes.md')}") in tombstones
    assert server.post(a.ws, "search", {"query": "parse"}).status_code == 404
    assert [h["chunk"] for h in server.search(b.ws, "shared").json()["results"]] == [
        chunk_hash(shared)
    ]


def test_chunk_texts_are_in_no_event_no_state_and_no_log(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    w = workspace()
    server.sync(w)
    server.search(w.ws, "lives here")
    for r in server.sink.records:
        assert CANARY.encode() not in r.key + (r.value or b"")
    assert CANARY not in caplog.text
    assert not [s for s in reachable_strings(server.state) if CANARY in s]


def reachable_strings(root: object) -> list[str]:
    """Every str and bytes (decoded) reachable from `root` through Python references."""
    seen, stack, found = set(), [root], []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        if isinstance(obj, str):
            found.append(obj)
        elif isinstance(obj, bytes | bytearray):
            found.append(bytes(obj).decode("latin-1"))
        else:
            stack.extend(gc.get_referents(obj))
    return found


def test_a_replica_rebuilt_from_the_records_answers_the_same(
    server: Server, tmp_path: Path
) -> None:
    a, b = workspace(), Workspace({"b.py": ["fetch url and parse json"], "c.py": ["tokenizer"]})
    server.sync(a)
    server.sync(b)
    a.files["src/parse.py"] = ["def parse_json(text):\n    return loads(text)"]
    del a.files["notes.md"]
    root = server.sync(a)["root"]
    assert root["in_sync"] is False
    replica = Server(tmp_path / "r", origin="server-b")
    applier = LogApplier(
        replica.state, replica.codec, embedder_name="test-bow", embedder_version="1"
    )
    foreign = LogApplier(IndexState(64), replica.codec, embedder_name="other", embedder_version="1")
    mine = LogApplier(IndexState(64), replica.codec, embedder_name="test-bow",
                      embedder_version="1", origin="server-a")  # fmt: skip
    for r in server.sink.records:
        for target in (applier, foreign, mine):
            target.apply(r.topic, r.key, r.value, r.headers)
    assert applier.skipped == 0
    assert foreign.skipped == len([r for r in server.sink.records if r.topic == "index.embeddings"])
    assert mine.applied == 0 and mine.skipped == len(server.sink.records)
    for ws in (a.ws, b.ws):
        assert replica.state.root(ws) == server.state.root(ws)
        for q in ("parse json", "fetch url", "tokenizer class", "lives here"):
            assert replica.search(ws, q).json() == server.search(ws, q).json()
