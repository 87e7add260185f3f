"""codeindex.server.state and vectors: trees, places, vectors, plans, content proofs."""

from __future__ import annotations

import numpy as np
import pytest

from codeindex.protocol import ChunkRef, FileEntry, Tree, chunk_hash
from codeindex.server.errors import IndexRequestError
from codeindex.server.state import EMPTY_ROOT, FileChange, IndexState
from codeindex.server.vectors import WorkspaceVectors
from tests.codeindex.server.index_doubles import BagOfWordsEmbedder, Workspace, obf

EMB = BagOfWordsEmbedder()


def load(state: IndexState, w: Workspace, *, embed: bool = True) -> None:
    for entry in w.entries():
        state.apply_file(w.ws, entry.path, entry)
    if embed:
        texts = w.texts()
        for chunk, vector in zip(texts, EMB.encode(list(texts.values())), strict=True):
            state.add_embedding(chunk, vector)


def query(text: str) -> np.ndarray:
    return EMB.encode([text])[0]


PARSER = Workspace(
    {
        "src/parse.py": ["def parse_json(text): return loads(text)", "class Tokenizer: pass"],
        "src/net/http.py": ["def fetch_url(url): return get(url)"],
        "docs/readme.md": ["how to parse json and fetch url"],
    }
)


def test_vectors_find_the_nearest_and_forget_removed_chunks() -> None:
    vectors = WorkspaceVectors(EMB.dim)
    texts = ["parse json text", "fetch url over http", "tokenize source code"]
    for text, vector in zip(texts, EMB.encode(texts), strict=True):
        vectors.add(chunk_hash(text), vector)
    found = vectors.search(query("json parse"), 2)
    assert found[0][0] == chunk_hash("parse json text")
    assert found[0][1] == pytest.approx(2 / 6**0.5, abs=1e-2)  # cosine: 2 shared words of 2 and 3
    vectors.remove(chunk_hash("parse json text"))
    assert chunk_hash("parse json text") not in [c for c, _ in vectors.search(query("json"), 3)]
    assert len(vectors) == 2
    with pytest.raises(ValueError, match="shape"):
        vectors.add("x", np.zeros(3, dtype=np.float32))


def test_the_state_tree_equals_the_clients_and_unknown_workspaces_have_the_empty_root() -> None:
    state = IndexState(EMB.dim)
    assert state.root(PARSER.ws) == EMPTY_ROOT
    load(state, PARSER)
    assert state.root(PARSER.ws) == PARSER.tree().root
    assert state.children(PARSER.ws, [""])[""] == {
        name: {"kind": kind, "hash": h} for name, (kind, h) in PARSER.tree().children("").items()
    }
    assert state.status(PARSER.ws) == {
        "files": 3, "chunks": 4, "chunks_embedded": 4, "root": PARSER.tree().root,
    }  # fmt: skip


def test_search_lists_every_place_and_filters_by_prefix() -> None:
    w = Workspace(
        {
            "a/x.py": ["def parse_json(text): pass", "unrelated words here"],
            "b/y.py": ["def parse_json(text): pass"],  # the same chunk in another file
            "b/z.py": ["fetch url http"],
        }
    )
    state = IndexState(EMB.dim)
    load(state, w)
    hits = state.search(w.ws, query("parse json"), 1)
    assert {(h.path, h.start) for h in hits} == {(obf("a/x.py"), 1), (obf("b/y.py"), 1)}
    assert len({h.chunk for h in hits}) == 1
    only_b = state.search(w.ws, query("parse json"), 1, prefix=obf("b"))
    assert [(h.path, h.chunk) for h in only_b] == [
        (obf("b/y.py"), chunk_hash("def parse_json(text): pass"))
    ]
    # The prefix holds one chunk that matches nothing: the search still finds it (k' grows).
    far = state.search(w.ws, query("parse json"), 2, prefix=obf("a"))
    assert {h.chunk for h in far} == {chunk_hash(t) for t in w.files["a/x.py"]}
    assert state.search(w.ws, query("parse"), 5, prefix=obf("c")) == []


def test_content_proof_a_workspace_finds_only_its_own_chunks() -> None:
    other = Workspace({"secret.py": ["def parse_json(text): return loads(text)"]})
    mine = Workspace({"mine.py": ["completely different words"]})
    state = IndexState(EMB.dim)
    load(state, other)
    load(state, mine)
    hits = state.search(mine.ws, query("parse json loads text"), 10)
    assert {h.chunk for h in hits} == {chunk_hash("completely different words")}


def test_scores_are_the_search_cosines_of_the_workspaces_own_embedded_chunks() -> None:
    other = Workspace({"secret.py": ["def parse_json(text): return loads(text)"]})
    state = IndexState(EMB.dim)
    load(state, PARSER)
    load(state, other)
    load(state, Workspace({"late.py": ["parse json later"]}, ws=PARSER.ws), embed=False)
    q = query("parse json")
    found = {h.chunk: h.score for h in state.search(PARSER.ws, q, 10)}
    asked = [*found, chunk_hash("parse json later"), other.entries()[0].chunks[0].hash, "f" * 64]
    scores = state.scores(PARSER.ws, q, asked)
    assert scores.keys() == found.keys()  # not embedded, another workspace's, unknown: left out
    for chunk, cosine in found.items():
        assert scores[chunk] == pytest.approx(cosine, abs=2e-3)
    assert state.scores("no-such-workspace", q, asked) == {}


def test_an_embedding_arriving_before_or_after_its_file_ends_in_the_index() -> None:
    text = "def parse_json(text): pass"
    w = Workspace({"x.py": [text]})
    early, late = IndexState(EMB.dim), IndexState(EMB.dim)
    early.add_embedding(chunk_hash(text), query(text))
    load(early, w, embed=False)
    load(late, w, embed=False)
    assert late.unembedded(w.ws, 10) == [chunk_hash(text)]
    late.add_embedding(chunk_hash(text), query(text))
    for state in (early, late):
        assert [h.chunk for h in state.search(w.ws, query("parse"), 1)] == [chunk_hash(text)]
        assert state.unembedded(w.ws, 10) == []


def test_an_edited_file_drops_the_chunks_it_lost_and_keeps_the_others() -> None:
    w = Workspace({"x.py": ["keep this chunk", "drop this chunk"]})
    state = IndexState(EMB.dim)
    load(state, w)
    w.files["x.py"] = ["keep this chunk", "a new chunk"]
    load(state, w)
    hits = state.search(w.ws, query("chunk"), 10)
    assert {h.chunk for h in hits} == {chunk_hash("keep this chunk"), chunk_hash("a new chunk")}
    assert state.status(w.ws)["chunks"] == 2


def replay(changes: list[tuple[str, FileChange]], compacted: bool) -> IndexState:
    """A replica's state from a log of (workspace, change); `compacted`: only each key's last
    record survives (tombstones included, as within delete.retention.ms), in log order."""
    if compacted:
        last = {(ws, path): i for i, (ws, (path, _)) in enumerate(changes)}
        changes = [c for i, c in enumerate(changes) if last[(c[0], c[1][0])] == i]
    state = IndexState(EMB.dim)
    for ws, (path, entry) in changes:
        state.apply_file(ws, path, entry)
    return state


def test_a_file_replacing_a_folder_is_planned_as_tombstones_first() -> None:
    w = Workspace({"pkg/a.py": ["one"], "pkg/b.py": ["two"], "top.py": ["three"]})
    writer = IndexState(EMB.dim)
    log: list[tuple[str, FileChange]] = []

    def sync(upserts: list[FileEntry], deletes: list[str] = []) -> None:  # noqa: B006
        for change in writer.plan_files(w.ws, upserts, deletes):
            log.append((w.ws, change))
            writer.apply_file(w.ws, *change)

    sync(w.entries())
    pkg_file = FileEntry.of(obf("pkg"), [ChunkRef(chunk_hash("now a file"), 1, 1)])
    plan = writer.plan_files(w.ws, [pkg_file], [])
    assert plan == [(obf("pkg/a.py"), None), (obf("pkg/b.py"), None), (obf("pkg"), pkg_file)]
    sync([pkg_file])
    inner = FileEntry.of(obf("pkg/c.py"), [ChunkRef(chunk_hash("a folder again"), 1, 1)])
    sync([inner])  # the file pkg is replaced by a folder: its tombstone comes first
    sync([], [obf("top.py")])
    for compacted in (False, True):
        replica = replay(log, compacted)
        assert replica.root(w.ws) == writer.root(w.ws)
        assert replica.root(w.ws) == Tree([inner]).root


def test_upserts_colliding_in_one_request_are_refused() -> None:
    state = IndexState(EMB.dim)
    a = FileEntry.of(obf("a"), [])
    inside = FileEntry.of(obf("a/b"), [])
    with pytest.raises(IndexRequestError) as refused:
        state.plan_files("ws", [a, inside], [])
    assert refused.value.status == 422
    with pytest.raises(IndexRequestError):
        state.plan_files("ws", [a, a], [])


def test_unchanged_upserts_are_not_planned_and_deletes_of_folders_take_every_file() -> None:
    w = Workspace({"d/a.py": ["x"], "d/e/b.py": ["y"], "c.py": ["z"]})
    state = IndexState(EMB.dim)
    load(state, w)
    assert state.plan_files(w.ws, w.entries(), []) == []
    assert state.plan_files(w.ws, [], [obf("d")]) == [
        (obf("d/a.py"), None),
        (obf("d/e/b.py"), None),
    ]


def test_erase_plan_lists_the_files_and_the_embeddings_no_one_else_holds() -> None:
    shared = "def shared(): pass"
    a = Workspace({"a.py": [shared, "only in a"]})
    b = Workspace({"b.py": [shared]})
    state = IndexState(EMB.dim)
    load(state, a)
    load(state, b)
    paths, orphans = state.erase_plan(a.ws)
    assert paths == [obf("a.py")]
    assert orphans == [chunk_hash("only in a")]
    for path in paths:
        state.apply_file(a.ws, path, None)
    assert not state.known(a.ws)
    assert state.known(b.ws)
