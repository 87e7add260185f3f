"""The codebase index end to end on the real broker and registry: the real client
(`codeindex.client`) syncing temp workspaces over HTTP with index servers wired as
`flywheel index serve` wires them (`build_index_server`, served by uvicorn in a thread, a test
embedder, each test's own topics). Checks issue 34's "How it is checked": no canary of a
chunk's text or of a path in any byte the server side keeps (topic records with their keys and
headers, logs, files), content proofs, a rebuilt replica's top-k, what a re-sync sends, erasure.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from codeindex.client import lifecycle
from codeindex.client.api import IndexClient, IndexServerError
from codeindex.client.chunking import chunk_file
from codeindex.client.search import search
from codeindex.client.state import WorkspaceState
from codeindex.client.sync import SyncReport, sync
from codeindex.server.events import IndexTopics, embedding_key, file_key
from flywheel.commands.index_server import IndexServer, build_index_server
from flywheel.settings import Settings
from streams.admin import TopicAdmin
from streams.gateway.keys import ApiKeyStore, default_key_path
from streams.topic_io import watermarks
from tests.codeindex.served import served
from tests.codeindex.server.index_doubles import BagOfWordsEmbedder
from tests.codeindex.synthetic_tree import edit_one_definition, write_tree

pytestmark = pytest.mark.integration

# Canaries: the code one sits in a string literal of a chunk, the path ones name its folder and
# file. Searches use the chunk's other words, so no request but `chunks` carries a canary.
CODE_CANARY = "quokkacanary51c2"
DIR_CANARY = "wombatcanary8d1"
FILE_CANARY = "numbatcanary4e2"
CANARIES = (CODE_CANARY, DIR_CANARY, FILE_CANARY)
CANARY_REL = f"{DIR_CANARY}/{FILE_CANARY}.py"
CANARY_CODE = f'''def platypus_ledger_reconcile(entries):
    """Reconcile the platypus ledger against its entries."""
    secret = "{CODE_CANARY}"
    return [entry for entry in entries if entry != secret]
'''
CANARY_QUERY = "reconcile the platypus ledger"
QUERIES = (CANARY_QUERY, "parse the payment schema", "retry the webhook", "invoice tax total",
           "schedule a worker task", "render the dashboard widget")  # fmt: skip
PAST_NS = int((time.time() - 3600) * 1e9)  # older than the chunk cache's racy window
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


@pytest.fixture
def topics(stack: Settings, unique: str) -> IndexTopics:
    names = IndexTopics.prefixed(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(names.specs())
    return names


class Harness:
    """Index servers on the test's topics sharing one key store, and the client's state root."""

    def __init__(self, settings: Settings, topics: IndexTopics, tmp: Path, exits: ExitStack):
        self.settings, self.topics, self.exits = settings, topics, exits
        self.home = tmp / "server-home"  # everything a server process may write goes here
        self.keys = ApiKeyStore(default_key_path(self.home))
        self.owner_key, self.teammate_key = self.keys.add("owner"), self.keys.add("teammate")
        self.state_root = tmp / "client-state"

    def start(self, replica_id: str) -> tuple[IndexServer, str]:
        """A server rebuilt from the topics (as `flywheel index serve` starts), and its URL."""
        server = build_index_server(
            self.settings, BagOfWordsEmbedder(), self.keys, self.topics, replica_id
        )
        self.exits.callback(server.close)
        return server, self.exits.enter_context(served(server.app, log_level="info"))

    def sync(self, ws: Path, url: str, key: str) -> SyncReport:
        return sync(ws, url, key, state_root=self.state_root)

    def workspace_id(self, ws: Path) -> str:
        return WorkspaceState(ws, self.state_root).load().workspace_id


@pytest.fixture
def harness(stack: Settings, topics: IndexTopics, tmp_path: Path) -> Iterator[Harness]:
    with ExitStack() as exits:
        yield Harness(stack, topics, tmp_path, exits)


def owner_workspace(root: Path, files: int = 30) -> Path:
    write_tree(root, files, seed=1, mtime_ns=PAST_NS)
    canary = root / CANARY_REL
    canary.parent.mkdir(parents=True)
    canary.write_text(CANARY_CODE)
    return root


def chunk_hashes(ws: Path) -> set[str]:
    """The chunk hashes the client makes of `ws` (every .py file)."""
    return {
        c.hash
        for path in ws.rglob("*.py")
        for c in chunk_file(path.relative_to(ws).as_posix(), path.read_text())
    }


def read_raw(config: dict[str, str], topic: str) -> list[Record]:
    """Every record of `topic` (all partitions) to the end offsets now: key, value, headers."""
    consumer = Consumer({**config, "group.id": f"e2e-{time.monotonic_ns()}", "log_level": 4})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends, assignment = {}, []
        for p in partitions:
            low, high = watermarks(consumer, TopicPartition(topic, p), 30)
            if high > low:
                ends[p] = high
                assignment.append(TopicPartition(topic, p, low))
        consumer.assign(assignment)
        records: list[Record] = []
        deadline = time.monotonic() + 30
        while ends and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            raw = message.headers() or []
            pairs = list(raw.items()) if isinstance(raw, dict) else raw
            headers = [(k, v.encode() if isinstance(v, str) else v or b"") for k, v in pairs]
            records.append((message.key(), message.value(), headers))
            partition, offset = message.partition() or 0, message.offset() or 0
            if offset >= ends.get(partition, 0) - 1:
                ends.pop(partition, None)
        if ends:
            raise AssertionError(f"reading {topic} did not finish in 30 s")
        return records
    finally:
        consumer.close()


def record_bytes(records: list[Record]) -> bytes:
    return b"\n".join(
        (k or b"") + b"\0" + (v or b"") + b"".join(n.encode() + b"=" + h for n, h in headers)
        for k, v, headers in records
    )


def leaked(haystack: bytes) -> list[str]:
    lowered = haystack.lower()
    return [c for c in CANARIES if c.encode() in lowered]


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def raw_search(url: str, key: str, ws_id: str, query: str, top_k: int = 10) -> list[Any]:
    with IndexClient(url, key, ws_id) as client:
        return client.search(query, top_k, None)


def test_no_canary_reaches_the_server_side_and_only_holders_find_a_chunk(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    _, url = harness.start("e2e-a")
    owner = owner_workspace(tmp_path / "owner")
    teammate = tmp_path / "teammate"  # another workspace id and obfuscation key, no canary
    write_tree(teammate, 20, seed=2, mtime_ns=PAST_NS)

    first = harness.sync(owner, url, harness.owner_key)
    assert first.in_sync and first.chunks_uploaded == len(chunk_hashes(owner))
    assert harness.sync(teammate, url, harness.teammate_key).in_sync
    # Edit the canary's file and re-sync: the new text goes through `chunks` again.
    (owner / CANARY_REL).write_text(CANARY_CODE + "\n\nLIMIT = 3\n")
    assert harness.sync(owner, url, harness.owner_key).chunks_uploaded == 1

    # The owner finds the chunk by its meaning; the hit is read from the owner's own disk.
    hits = search(owner, url, harness.owner_key, CANARY_QUERY, top_k=3,
                  state_root=harness.state_root)  # fmt: skip
    assert hits and hits[0].path == CANARY_REL and CODE_CANARY in hits[0].text
    # The teammate, asking the same and everything else, never gets it: content proofs.
    canary_chunk = next(c.hash for c in chunk_file(CANARY_REL, CANARY_CODE))
    mine = chunk_hashes(teammate)
    for query in QUERIES:
        results = raw_search(url, harness.teammate_key, harness.workspace_id(teammate), query, 100)
        assert results and {r["chunk"] for r in results} <= mine
        assert canary_chunk not in {r["chunk"] for r in results}
        hits = search(teammate, url, harness.teammate_key, query, state_root=harness.state_root)
        assert all(CODE_CANARY not in h.text and DIR_CANARY not in h.path for h in hits)

    # Every byte the server side kept: both topics' records (keys, values, headers), the logs
    # of this process (servers and uvicorn's access log included), the server's files.
    config = harness.settings.kafka_client_config()
    files = read_raw(config, harness.topics.files)
    embeddings = read_raw(config, harness.topics.embeddings)
    assert len(files) > first.files and len(embeddings) > first.chunks_uploaded
    assert all(headers for _, _, headers in files + embeddings)  # origin headers, scanned too
    assert leaked(record_bytes(files + embeddings)) == []
    logs = "\n".join(f"{r.name} {r.getMessage()}" for r in caplog.records)
    captured = capfd.readouterr()
    assert "POST /v1/index/" in captured.out + captured.err  # the access log was captured
    assert leaked((logs + captured.out + captured.err).encode()) == []
    written = [p for p in harness.home.rglob("*") if p.is_file()]
    assert written and leaked(b"".join(p.read_bytes() for p in written)) == []
    # The client's own state (outside the workspace) holds no text either: hashes and paths,
    # and, in `terms.jsonl` only, the term counts its BM25 ranks with (code-derived data that
    # stays on the client: docs/index.md).
    client_files = [p for p in harness.state_root.rglob("*") if p.is_file()]
    terms = [p for p in client_files if p.name == "terms.jsonl"]
    assert terms and CODE_CANARY.encode() in b"".join(p.read_bytes() for p in terms)
    others = [p for p in client_files if p.name != "terms.jsonl"]
    assert CODE_CANARY.encode() not in b"".join(p.read_bytes() for p in others)


def test_an_unchanged_resync_sends_one_hash_and_an_edit_uploads_only_new_chunks(
    harness: Harness, tmp_path: Path
) -> None:
    server, url = harness.start("e2e-resync")
    ws = tmp_path / "ws"
    paths = write_tree(ws, 60, seed=3, mtime_ns=PAST_NS)
    first = harness.sync(ws, url, harness.owner_key)
    assert first.in_sync and first.chunks_uploaded == len(chunk_hashes(ws)) > 60

    again = harness.sync(ws, url, harness.owner_key)
    root_body = IndexClient.encode({"root": first.root})
    assert (again.requests, again.bytes_sent, again.files_read) == (1, len(root_body), 0)

    before = chunk_hashes(ws)
    rng = random.Random(4)
    edited = rng.sample(paths, 5)
    for path in edited:
        edit_one_definition(path, rng)
    next(p for p in reversed(paths) if p not in edited).unlink()
    (ws / "newpkg").mkdir()
    (ws / "newpkg" / "fresh.py").write_text("def brand_new(x):\n    return x * 2\n")
    embedded_before = embedded_total(server)

    after = harness.sync(ws, url, harness.owner_key)
    new_chunks = chunk_hashes(ws) - before
    assert after.in_sync and 5 < len(new_chunks) <= 5 * 2 + 1
    assert after.chunks_uploaded == len(new_chunks)
    assert embedded_total(server) - embedded_before == len(new_chunks)
    assert (after.files_sent, after.deletes) == (6, 1)
    assert after.bytes_sent < first.bytes_sent / 10
    assert server.service.state.root(harness.workspace_id(ws)) == after.root


def embedded_total(server: IndexServer) -> float:
    value = server.service.metrics.registry.get_sample_value("flywheel_index_chunks_embedded_total")
    return value or 0.0


def by_score(results: list[Any]) -> list[tuple[float, frozenset[tuple[Any, ...]]]]:
    """Results grouped by score, best first: equal scores may come in any order."""
    groups: dict[float, set[tuple[Any, ...]]] = {}
    for r in results:
        groups.setdefault(r["score"], set()).add((r["chunk"], r["path"], r["start"], r["end"]))
    return [(score, frozenset(items)) for score, items in groups.items()]


def assert_same_top_k(a: list[Any], b: list[Any]) -> None:
    """The same ranking: equal score groups in order; the last group (a tie may straddle the
    cut at top_k) by its score only."""
    ga, gb = by_score(a), by_score(b)
    assert [s for s, _ in ga] == [s for s, _ in gb]
    assert ga[:-1] == gb[:-1]


def test_a_new_replica_answers_alike_and_an_erase_leaves_tombstones_everywhere(
    harness: Harness, tmp_path: Path
) -> None:
    a, url_a = harness.start("e2e-a")
    owner = owner_workspace(tmp_path / "owner", files=60)
    teammate = tmp_path / "teammate"
    write_tree(teammate, 20, seed=2, mtime_ns=PAST_NS)
    shared = "def shared_helper(values):\n    return sorted(set(values))\n"
    for ws in (owner, teammate):
        (ws / "common.py").write_text(shared)
    synced = harness.sync(owner, url_a, harness.owner_key)
    assert synced.in_sync
    assert harness.sync(teammate, url_a, harness.teammate_key).in_sync
    owner_id, teammate_id = harness.workspace_id(owner), harness.workspace_id(teammate)

    b, url_b = harness.start("e2e-b")  # a new replica: rebuilt from the topics alone
    assert b.service.state.root(owner_id) == a.service.state.root(owner_id)
    for query in QUERIES:
        for ws_id, key in ((owner_id, harness.owner_key), (teammate_id, harness.teammate_key)):
            assert_same_top_k(
                raw_search(url_a, key, ws_id, query), raw_search(url_b, key, ws_id, query)
            )
        mine = search(owner, url_a, harness.owner_key, query, state_root=harness.state_root)
        theirs = search(owner, url_b, harness.owner_key, query, state_root=harness.state_root)
        assert [h.score for h in mine] == [h.score for h in theirs] and mine
    # The rebuild ran each vector through the same float16 bytes: identical scores.
    assert raw_search(url_a, harness.owner_key, owner_id, CANARY_QUERY, 1) == raw_search(
        url_b, harness.owner_key, owner_id, CANARY_QUERY, 1
    )

    owner_chunks = chunk_hashes(owner)
    assert lifecycle.erase(owner, url_a, harness.owner_key, state_root=harness.state_root)
    for url in (url_a, url_b):  # the replica follows the erase
        wait_for(partial(forgotten, url, harness.owner_key, owner_id), f"{url} to erase")
        with pytest.raises(IndexServerError) as refused:
            raw_search(url, harness.owner_key, owner_id, CANARY_QUERY)
        assert refused.value.status == 404
        assert raw_search(url, harness.teammate_key, teammate_id, "shared helper values")

    config = harness.settings.kafka_client_config()
    last = {k or b"": v for k, v, _ in read_raw(config, harness.topics.files)}  # compacted view
    owner_keys = {k for k in last if k.startswith(f"{owner_id}/".encode())}
    assert len(owner_keys) == synced.files and all(last[k] is None for k in owner_keys)
    assert any(v is not None for k, v in last.items() if k.startswith(teammate_id.encode()))
    vectors = {k or b"": v for k, v, _ in read_raw(config, harness.topics.embeddings)}
    embedder = BagOfWordsEmbedder()
    name = f"{embedder.name}:{embedder.version}"
    shared_chunk = next(c.hash for c in chunk_file("common.py", shared))
    only_owner = owner_chunks - chunk_hashes(teammate)
    assert only_owner and all(vectors[embedding_key(name, h).encode()] is None for h in only_owner)
    assert vectors[embedding_key(name, shared_chunk).encode()] is not None
    assert file_key(owner_id, "x").startswith(owner_id)  # the key layout the filter assumes


def forgotten(url: str, key: str, ws_id: str) -> bool:
    """Whether the server at `url` answers 404 for the workspace's status."""
    with IndexClient(url, key, ws_id) as client:
        try:
            client.status()
        except IndexServerError as exc:
            return exc.status == 404
    return False
