"""The sync algorithm against a double of the server built from the protocol's Tree: what a
first sync, an unchanged re-sync, a 1% change, a deleted folder and a dry run send; errors;
search mapping results back and dropping stale ones."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from codeindex.client.chunking import chunk_file
from codeindex.client.errors import IndexClientError
from codeindex.client.search import search
from codeindex.client.state import WorkspaceState
from codeindex.client.sync import SyncReport, build_local_index, sync
from tests.codeindex.client.index_double import IndexDouble

URL = "http://index.test"
PAST_NS = (time.time() - 3600) * 1e9  # older than the chunk cache's racy window


def source(i: int, version: int = 0) -> str:
    functions = (
        f'def f{i}_{j}(x):\n    """Function {j} of file {i}."""\n'
        f"    return x + {j * 1000 + version}\n\n\n"
        for j in range(3)
    )
    return "".join(functions) + f"VALUE_{i} = {i}\n"


def make_workspace(root: Path, n: int) -> list[Path]:
    paths = []
    for i in range(n):
        path = root / f"pkg{i % 20}" / f"sub{i % 3}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source(i))
        os.utime(path, ns=(int(PAST_NS), int(PAST_NS)))
        paths.append(path)
    return paths


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def server() -> IndexDouble:
    return IndexDouble(api_key="k")


def run(ws: Path, server: IndexDouble, **kwargs: Any) -> SyncReport:
    state = ws.parent / "state"
    return sync(ws, URL, "k", state_root=state, transport=server.transport(), **kwargs)


def test_first_sync_sends_every_file_and_chunk_then_agrees(ws: Path, server: IndexDouble) -> None:
    make_workspace(ws, 50)
    report = run(ws, server)
    assert report.in_sync and report.files == report.files_sent == 50
    assert report.chunks == 50 * 4  # three functions and the module top
    assert report.chunks_uploaded == len(server.uploaded) == 200
    tree = server.trees[report.workspace_id]
    assert tree.root == report.root
    assert server.calls()[0] == "root" and server.calls()[-1] == "root"
    assert report.requests == len(server.requests)
    assert report.bytes_sent == sum(len(body) for _, _, body in server.requests)
    for path in tree.files:  # obfuscated: no real name reached the server
        assert "pkg" not in path and "mod" not in path and ".py" not in path


def test_an_unchanged_resync_sends_one_hash_and_reads_no_file(
    ws: Path, server: IndexDouble
) -> None:
    make_workspace(ws, 50)
    run(ws, server)
    server.requests.clear()
    report = run(ws, server)
    assert server.calls() == ["root"]
    assert report.requests == 1 and report.in_sync
    assert report.bytes_sent == len(f'{{"root":"{report.root}"}}')
    assert report.files_read == 0  # a stat walk only: every file from the chunk cache
    local = build_local_index(ws, WorkspaceState(ws, ws.parent / "state"))
    assert local.root == report.root and "tree" not in vars(local)  # the cached root


def test_changing_one_percent_sends_a_few_percent_and_only_the_new_chunks(
    ws: Path, server: IndexDouble
) -> None:
    paths = make_workspace(ws, 2000)
    first = run(ws, server)
    assert first.chunks_uploaded == 8000
    changed = paths[::100]  # 20 files, spread over the folders
    new_chunks = set()
    for i, path in zip(range(0, 2000, 100), changed, strict=True):
        text = source(i).replace(f"return x + {1000}", "return x - 1")  # one function each
        path.write_text(text)
        new_chunks |= {c.hash for c in chunk_file("x.py", text)} - {
            c.hash for c in chunk_file("x.py", source(i))
        }
    server.uploaded.clear()
    second = run(ws, server)
    assert second.in_sync and second.files_sent == 20 and second.deletes == 0
    assert second.files_read == 20
    assert set(server.uploaded) == new_chunks and len(new_chunks) == 20
    assert second.bytes_sent <= 0.03 * first.bytes_sent, (second.bytes_sent, first.bytes_sent)
    assert server.trees[second.workspace_id].root == second.root


def test_deleting_a_folder_sends_one_delete(ws: Path, server: IndexDouble) -> None:
    make_workspace(ws, 60)
    run(ws, server)
    for path in sorted((ws / "pkg3").rglob("*.py")):
        path.unlink()
    for folder in sorted((ws / "pkg3").rglob("*"), reverse=True):
        folder.rmdir()
    (ws / "pkg3").rmdir()
    server.requests.clear()
    report = run(ws, server)
    (files_call,) = server.bodies("files")
    assert files_call["upserts"] == [] and len(files_call["deletes"]) == 1
    assert report.deletes == 1 and report.chunks_uploaded == 0 and report.in_sync
    assert server.calls() == ["root", "children", "files", "root"]


def test_a_dry_run_reads_only_and_names_what_it_would_send(ws: Path, server: IndexDouble) -> None:
    paths = make_workspace(ws, 30)
    run(ws, server)
    paths[0].write_text(source(0, version=1))
    paths[1].unlink()
    (ws / "new.txt").write_text("hello\n")
    (tree,) = server.trees.values()
    before = dict(tree.files)
    server.requests.clear()
    report = run(ws, server, dry_run=True)
    assert set(server.calls()) == {"root", "children"}
    assert dict(tree.files) == before  # nothing changed on the server
    assert report.dry_run and not report.in_sync and report.chunks_uploaded == 0
    assert sorted(report.would_send) == ["new.txt", "pkg0/sub0/mod0.py"]
    assert report.would_delete == ["pkg1/sub1"]  # mod1.py was its only file: the folder goes
    assert run(ws, server).files_sent == 2  # the real sync then sends the same


def test_an_unknown_workspace_gets_everything_after_the_server_forgot_it(
    ws: Path, server: IndexDouble
) -> None:
    make_workspace(ws, 10)
    first = run(ws, server)
    server.trees.clear()  # erased on the server, or a new server
    server.embedded.clear()
    again = run(ws, server)
    assert again.files_sent == 10 and again.chunks_uploaded == first.chunks_uploaded


def test_two_workspaces_share_the_embedding_cache(tmp_path: Path, server: IndexDouble) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    make_workspace(one, 10)
    make_workspace(two, 10)
    run(one, server)
    report = run(two, server)
    assert report.files_sent == 10 and report.chunks_uploaded == 0
    assert len(server.trees) == 2


def test_a_refused_key_and_a_missing_server_say_what_to_do(ws: Path) -> None:
    make_workspace(ws, 2)
    with pytest.raises(IndexClientError, match=r"401.*unknown API key.*--api-key"):
        run(ws, IndexDouble(api_key="other"))

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    with pytest.raises(IndexClientError, match="flywheel index serve"):
        sync(ws, URL, None, state_root=ws.parent / "s", transport=httpx.MockTransport(refuse))


def test_a_server_that_still_differs_after_the_sync_is_an_error(
    ws: Path, server: IndexDouble
) -> None:
    make_workspace(ws, 3)
    handle = server.handle

    def drop_deletes_and_upserts(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/files"):
            server.requests.append((request.method, "files", request.read()))
            return httpx.Response(200, json={"missing": []})
        return handle(request)

    with pytest.raises(IndexClientError, match="still differs"):
        sync(ws, URL, "k", state_root=ws.parent / "state",
             transport=httpx.MockTransport(drop_deletes_and_upserts))  # fmt: skip


def test_a_file_changed_during_the_sync_is_an_error(ws: Path, server: IndexDouble) -> None:
    paths = make_workspace(ws, 2)
    handle = server.handle

    def edit_after_files(request: httpx.Request) -> httpx.Response:
        response = handle(request)
        if request.url.path.endswith("/files"):
            paths[0].write_text(source(0, version=7))
        return response

    with pytest.raises(IndexClientError, match=r"mod0\.py changed during the sync"):
        sync(ws, URL, "k", state_root=ws.parent / "state",
             transport=httpx.MockTransport(edit_after_files))  # fmt: skip


def test_search_maps_results_back_and_drops_stale_ones(ws: Path, server: IndexDouble) -> None:
    paths = make_workspace(ws, 3)
    report = run(ws, server)
    store = WorkspaceState(ws, ws.parent / "state")
    local = build_local_index(ws, store)
    obf = {rel: path for path, rel in local.real.items()}
    rels = ("pkg0/sub0/mod0.py", "pkg1/sub1/mod1.py")
    entries = {rel: local.tree.files[obf[rel]] for rel in rels}
    server.search_results = [
        {"chunk": c.hash, "path": entries[rel].path, "start": c.start, "end": c.end, "score": s}
        for rel, s in (("pkg0/sub0/mod0.py", 0.9), ("pkg1/sub1/mod1.py", 0.8))
        for c in entries[rel].chunks[:1]
    ]
    paths[1].write_text("def changed():\n    pass\n" + source(1))  # mod1's lines moved
    server.requests.clear()
    hits = search(ws, URL, "k", "function", top_k=5, path_prefix="pkg0", lexical_weight=0,
                  state_root=ws.parent / "state", transport=server.transport())  # fmt: skip
    (body,) = server.bodies("search")
    assert body["path_prefix"] == obf["pkg0"] and body["top_k"] == 5 and "score" not in body
    assert [(h.path, h.start, h.score) for h in hits] == [("pkg0/sub0/mod0.py", 1, 0.9)]
    assert hits[0].text.startswith("def f0_0(x):")
    assert report.workspace_id in server.trees


def test_search_needs_a_synced_workspace(ws: Path) -> None:
    with pytest.raises(IndexClientError, match="flywheel index sync"):
        search(ws, URL, None, "q", state_root=ws.parent / "state")


def test_the_key_never_leaves_even_with_the_state_inside_the_workspace(
    ws: Path, server: IndexDouble
) -> None:
    make_workspace(ws, 3)
    state = ws / ".state"
    sync(ws, URL, "k", state_root=state, transport=server.transport())
    (ws / "new.py").write_text("y = 2\n")  # the second sync sends something
    again = sync(ws, URL, "k", state_root=state, transport=server.transport())
    key = WorkspaceState(ws, state).key_file.read_text().strip()
    assert again.skipped["the index's own state"] == 1 and again.files_sent == 1
    assert all(key.encode() not in body for _, _, body in server.requests)
