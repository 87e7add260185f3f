"""The client's lexical index: BM25 equal to bm25s's default, the terms store, and the sync
keeping it in step with the workspace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from codeindex.client.lexical import TERMS_FORMAT, LexicalIndex, term_counts
from codeindex.client.state import WorkspaceState
from codeindex.client.sync import build_local_index
from codeindex.protocol import chunk_hash
from codeindex.terms import code_terms

CORPUS = [
    "def read_json_file(path):\n    with open(path) as f:\n        return json.load(f)",
    "def write_json_file(path, data):\n    json.dump(data, open(path, 'w'))",
    "def send_email(to, body):\n    smtp.send(to, body)\n    log.info('sent email')",
    "def resize_image(img, size):\n    return img.resize(size)",
    "class HttpClient:\n    def get(self, url): return fetch(url)\n    def post(self, url): ...",
    "def parse_http_response(raw):\n    header, body = raw.split('\\n\\n', 1)\n    return body",
    "JSON_INDENT = 2  # json json json",
]
QUERIES = ["read a JSON file", "send the email body", "http response body", "json json path", "zzz"]


def test_bm25_scores_equal_bm25s_default() -> None:
    bm25s = pytest.importorskip("bm25s")
    reference = bm25s.BM25()  # the benchmark's reference: method "lucene", k1 1.5, b 0.75
    reference.index([code_terms(t) for t in CORPUS], show_progress=False)
    index = LexicalIndex({chunk_hash(t): term_counts(t) for t in CORPUS})
    for query in QUERIES:
        terms = [t for t in code_terms(query) if t in reference.vocab_dict]
        expected = reference.get_scores(terms) if terms else np.zeros(len(CORPUS))
        mine = index.scores(query)
        got = [mine.get(chunk_hash(t), 0.0) for t in CORPUS]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=query)
        assert all(v > 0 for v in mine.values())  # chunks sharing no term are left out
    assert index.scores("json json path")[chunk_hash(CORPUS[0])] > 0


def test_scores_among_some_chunks_keep_the_whole_index_statistics() -> None:
    index = LexicalIndex({chunk_hash(t): term_counts(t) for t in CORPUS})
    everything = index.scores("json file path")
    some = [chunk_hash(CORPUS[1]), chunk_hash(CORPUS[3])]
    assert index.scores("json file path", among=some) == {some[0]: everything[some[0]]}
    assert LexicalIndex().scores("json") == {}


def test_the_store_round_trips_and_damage_gives_an_empty_index(tmp_path: Path) -> None:
    path = tmp_path / "terms.jsonl"
    assert LexicalIndex.stored_root(path) is None and len(LexicalIndex.load(path)) == 0
    LexicalIndex({"a" * 64: {"json": 2}}).save(path, "r" * 64)
    assert LexicalIndex.stored_root(path) == "r" * 64
    assert LexicalIndex.load(path).chunks == {"a" * 64: {"json": 2}}
    header = json.loads(path.read_text().splitlines()[0])
    assert header == {"format": TERMS_FORMAT, "root": "r" * 64, "chunks": 1}
    path.write_text('{"format": "0", "root": "x"}\n{}\n')  # another format: rebuilt
    assert LexicalIndex.stored_root(path) is None and len(LexicalIndex.load(path)) == 0
    path.write_text("garbage")
    assert LexicalIndex.stored_root(path) is None and len(LexicalIndex.load(path)) == 0


def chunk_hashes(store: WorkspaceState, ws: Path) -> set[str]:
    local = build_local_index(ws, store)
    return {c.hash for entry in local.tree.files.values() for c in entry.chunks}


def test_the_sync_walk_keeps_the_terms_of_exactly_the_current_chunks(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "a.py").write_text("def getHttpResponse(url):\n    return fetch(url)\n")
    (ws / "pkg" / "b.py").write_text("def resize_image(img):\n    return img\n")
    store = WorkspaceState(ws, tmp_path / "state")
    hashes = chunk_hashes(store, ws)
    index = LexicalIndex.load(store.terms_file)
    assert set(index.chunks) == hashes and not store.terms_file.is_relative_to(ws)
    a = chunk_hash("def getHttpResponse(url):\n    return fetch(url)\n")
    assert index.chunks[a] == {"def": 1, "get": 1, "http": 1, "response": 1, "url": 2,
                               "return": 1, "fetch": 1}  # fmt: skip
    # An unchanged walk reads and writes nothing.
    before = store.terms_file.stat().st_mtime_ns
    os.utime(store.terms_file, ns=(before - 10**9, before - 10**9))
    assert chunk_hashes(store, ws) == hashes
    assert store.terms_file.stat().st_mtime_ns == before - 10**9
    # A deleted file's chunks leave; a lost store is rebuilt from disk.
    (ws / "pkg" / "b.py").unlink()
    assert chunk_hashes(store, ws) == {a}
    assert set(LexicalIndex.load(store.terms_file).chunks) == {a}
    store.terms_file.unlink()
    chunk_hashes(store, ws)
    assert set(LexicalIndex.load(store.terms_file).chunks) == {a}
