"""The hybrid search end to end in one process: the real client syncs a workspace with the real
index app (a bag-of-words test embedder), then fuses the server's cosines with its own BM25;
the client's terms never reach the server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from codeindex.client.lexical import LexicalIndex
from codeindex.client.ranking import weighted_fusion
from codeindex.client.search import search
from codeindex.client.state import WorkspaceState
from codeindex.client.sync import sync
from codeindex.protocol import chunk_hash
from codeindex.server.app import create_app
from codeindex.server.events import IndexEventLog
from codeindex.server.service import IndexService
from codeindex.server.state import IndexState
from streams.serde import AvroCodec
from tests.codeindex.server.index_doubles import BagOfWordsEmbedder, MemorySink
from tests.registry_double import FakeRegistry

URL = "http://index.test"
# The function BM25 finds (its identifier splits into the query's words) and the bag-of-words
# embedder does not (it sees one word, `fetchhttpresponse`).
TARGET = "def fetchHttpResponse(address):\n    return download(address)\n"
# A planted chunk: its words may leave the client only as its text, in the sync's upload.
CANARY_WORDS = ("zebracanary", "quokkasecret")
CANARY = "def zebracanary_fetch(x):\n    return 'quokkasecret'\n"


class AppTransport(httpx.BaseTransport):
    """The client's requests into the app in-process; every request body is kept."""

    def __init__(self, app: object) -> None:
        self._client = TestClient(app)  # type: ignore[arg-type]  # a Starlette app
        self.sent: list[tuple[str, bytes]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        self.sent.append((request.url.path, body))
        answer = self._client.request(
            request.method, request.url.path, content=body, headers=dict(request.headers)
        )
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    def bodies(self, call: str) -> list[bytes]:
        return [body for path, body in self.sent if path.endswith("/" + call)]


@pytest.fixture
def index() -> tuple[AppTransport, IndexState, BagOfWordsEmbedder]:
    embedder = BagOfWordsEmbedder()
    state = IndexState(embedder.dim)
    events = IndexEventLog(
        MemorySink(), AvroCodec(FakeRegistry()),  # type: ignore[arg-type]  # a registry double
        embedder_name=embedder.name, embedder_version=embedder.version, dim=embedder.dim,
        producer="codeindex.client/test", origin="test",
    )  # fmt: skip
    app = create_app(IndexService(state, embedder, events), keys=None)
    return AppTransport(app), state, embedder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """60 helpers sharing the word `fetch` with the query (the embedder's nearest), the target
    and the canary."""
    root = tmp_path / "ws"
    (root / "helpers").mkdir(parents=True)
    for i in range(60):
        (root / "helpers" / f"h{i}.py").write_text(f"def fetch_item_{i}(x):\n    return x\n")
    (root / "net").mkdir()
    (root / "net" / "http.py").write_text(TARGET)
    (root / "net" / "canary.py").write_text(CANARY)
    return root


def test_the_hybrid_finds_what_bm25_adds_and_fuses_as_the_benchmark_does(
    ws: Path, index: tuple[AppTransport, IndexState, BagOfWordsEmbedder]
) -> None:
    transport, state, embedder = index
    report = sync(ws, URL, None, state_root=ws.parent / "state", transport=transport)
    query = "fetch http response"

    def run(**kwargs: float) -> list[tuple[str, float]]:
        hits = search(ws, URL, None, query, top_k=3, state_root=ws.parent / "state",
                      transport=transport, **kwargs)  # fmt: skip
        return [(h.path, h.score) for h in hits]

    dense_only = run(lexical_weight=0)
    assert len(dense_only) == 3 and "net/http.py" not in {p for p, _ in dense_only}
    transport.sent.clear()
    hybrid = run()
    assert hybrid[0][0] == "net/http.py"
    (body,) = [json.loads(b) for b in transport.bodies("search")]
    assert body["top_k"] == 50 and chunk_hash(TARGET) in body["score"]
    # The scores are weighted_fusion's of the server's cosines and the client's BM25.
    bm25 = LexicalIndex.load(WorkspaceState(ws, ws.parent / "state").terms_file).scores(query)
    cosines = state.scores(report.workspace_id, embedder.encode([query])[0], list(bm25))
    fused = weighted_fusion(cosines, bm25, 0.5)
    files = {p.relative_to(ws).as_posix(): chunk_hash(p.read_text()) for p in ws.rglob("*.py")}
    for path, score in hybrid:
        assert score == pytest.approx(fused[files[path]], abs=1e-5)
    assert [s for _, s in hybrid] == pytest.approx(
        sorted(fused.values(), reverse=True)[:3], abs=1e-5
    )
    # A path prefix limits BM25's candidates too.
    hits = search(ws, URL, None, query, path_prefix="helpers", state_root=ws.parent / "state",
                  transport=transport)  # fmt: skip
    assert hits and all(h.path.startswith("helpers/") for h in hits)


def test_the_clients_terms_never_leave_it(
    ws: Path, index: tuple[AppTransport, IndexState, BagOfWordsEmbedder]
) -> None:
    transport, _, _ = index
    sync(ws, URL, None, state_root=ws.parent / "state", transport=transport)
    (ws / "net" / "http.py").write_text(TARGET + "\n\ndef more():\n    pass\n")
    sync(ws, URL, None, state_root=ws.parent / "state", transport=transport)
    for query, prefix in (("fetch", None), ("fetch x", "net"), ("return a value", "net")):
        search(ws, URL, None, query, path_prefix=prefix, state_root=ws.parent / "state",
               transport=transport)  # fmt: skip
    terms = LexicalIndex.load(WorkspaceState(ws, ws.parent / "state").terms_file)
    assert all(w in terms.chunks[chunk_hash(CANARY)] for w in CANARY_WORDS)  # held locally
    scored = [h for b in transport.bodies("search") for h in json.loads(b).get("score", [])]
    assert chunk_hash(CANARY) in scored  # its hash went, as a candidate
    uploads = 0
    for path, body in transport.sent:
        if path.endswith("/chunks"):
            for chunk in json.loads(body)["chunks"]:
                uploads += chunk["hash"] == chunk_hash(CANARY)
                if chunk["hash"] != chunk_hash(CANARY):
                    assert not any(w in chunk["text"] for w in CANARY_WORDS)
        else:
            assert not any(w.encode() in body for w in CANARY_WORDS), path
    assert uploads == 1  # its text went once, to be embedded
