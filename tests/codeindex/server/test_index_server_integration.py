"""The index server on the real broker and registry: a replica rebuilt from its own copies of
the index topics answers like the writer, follows its changes and its erasure, and no byte of a
chunk's text or a real path reaches the topics."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from codeindex.protocol import chunk_hash
from codeindex.server.app import create_app
from codeindex.server.events import IndexEventLog, IndexFollower, IndexTopics, LogApplier, rebuild
from codeindex.server.service import IndexService
from codeindex.server.state import IndexState
from flywheel.settings import Settings
from streams.admin import TopicAdmin
from streams.serde import AvroCodec
from streams.topic_io import EventProducer, read_to_end
from tests.codeindex.server.index_doubles import BagOfWordsEmbedder, Workspace, obf

pytestmark = pytest.mark.integration

CANARY_TEXT = "quokka_canary_51c2"
CANARY_PATH = "wombat_canary_dir"
QUERIES = ("parse json text", "fetch a url", "tokenizer class", "sum of numbers", "lives here")


@pytest.fixture
def topics(stack: Settings, unique: str) -> IndexTopics:
    names = IndexTopics.prefixed(unique)
    TopicAdmin(stack.kafka_client_config()).ensure(names.specs())
    return names


class Replica:
    """One index server process: state, service and a TestClient on its app."""

    def __init__(self, settings: Settings, topics: IndexTopics, origin: str) -> None:
        self.embedder = BagOfWordsEmbedder()
        self.state = IndexState(self.embedder.dim)
        self.codec = AvroCodec.for_url(settings.registry_url)
        events = IndexEventLog(
            EventProducer(settings.kafka_client_config()), self.codec,
            embedder_name=self.embedder.name, embedder_version=self.embedder.version,
            dim=self.embedder.dim, producer=f"test/{origin}", origin=origin, topics=topics,
        )  # fmt: skip
        self.applier = LogApplier(
            self.state, self.codec, embedder_name=self.embedder.name,
            embedder_version=self.embedder.version, topics=topics, origin=origin,
        )  # fmt: skip
        self.client = TestClient(create_app(IndexService(self.state, self.embedder, events),
                                            keys=None))  # fmt: skip

    def post(self, ws: str, step: str, body: Any) -> Any:
        answer = self.client.post(f"/v1/index/{ws}/{step}", json=body)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def sync(self, w: Workspace, deletes: list[str] = []) -> None:  # noqa: B006
        upserts = [e.to_json() for e in w.entries()]
        missing = self.post(w.ws, "files", {"upserts": upserts, "deletes": deletes})["missing"]
        texts = w.texts()
        if missing:
            self.post(w.ws, "chunks", {"chunks": [{"hash": h, "text": texts[h]} for h in missing]})
        assert self.post(w.ws, "root", {"root": w.tree().root}) == {"in_sync": True, "missing": []}

    def answers(self, ws: str) -> list[Any]:
        return [self.post(ws, "search", {"query": q, "top_k": 3})["results"] for q in QUERIES]


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def followers() -> Iterator[list[IndexFollower]]:
    started: list[IndexFollower] = []
    yield started
    for follower in started:
        follower.close()


def test_a_rebuilt_replica_answers_alike_follows_and_forgets_an_erased_workspace(
    stack: Settings, topics: IndexTopics, followers: list[IndexFollower]
) -> None:
    shared = "def total(numbers):\n    return sum(numbers)"
    w = Workspace(
        {
            "src/parse.py": ["def parse_json(text):\n    return loads(text)", "class Tokenizer:"],
            "src/net/http.py": ["def fetch_url(url):\n    return get(url)"],
            f"{CANARY_PATH}/notes.md": [f"the {CANARY_TEXT} lives here"],
            "src/math.py": [shared],
        }
    )  # fmt: skip
    teammate = Workspace({"lib/sums.py": [shared, "def mean(numbers): pass"]})
    a = Replica(stack, topics, "a")
    a.sync(w)
    a.sync(teammate)

    b = Replica(stack, topics, "b")
    followers.append(rebuild(stack.kafka_client_config(), b.applier, topics, timeout_s=60))
    for ws in (w.ws, teammate.ws):
        assert b.state.root(ws) == a.state.root(ws)
        assert b.answers(ws) == a.answers(ws)
        assert b.state.status(ws) == a.state.status(ws)

    # B follows A's next sync: an edited file and a deleted one.
    w.files["src/parse.py"] = ["def parse_yaml(text):\n    return safe_load(text)"]
    del w.files["src/net/http.py"]
    a.sync(w, deletes=[obf("src/net/http.py")])
    wait_for(lambda: b.state.root(w.ws) == a.state.root(w.ws), "the replica to follow the edit")
    wait_for(lambda: b.state.embedded(chunk_hash(w.files["src/parse.py"][0])), "the new vector")
    assert b.answers(w.ws) == a.answers(w.ws)

    # Erasing on A: B drops the workspace; the teammate's shared chunk survives everywhere.
    assert a.client.delete(f"/v1/index/{w.ws}").status_code == 200
    wait_for(lambda: not b.state.known(w.ws), "the replica to drop the erased workspace")
    wait_for(lambda: not b.state.embedded(chunk_hash(w.files["src/parse.py"][0])), "tombstones")
    assert b.state.embedded(chunk_hash(shared))
    assert b.answers(teammate.ws) == a.answers(teammate.ws)

    config = stack.kafka_client_config()
    files = read_to_end(config, topics.files, keep=lambda _: True)
    embeddings = read_to_end(config, topics.embeddings, keep=lambda _: True)
    file_tombstones = {k.decode() for k, v in files if v is None and k is not None}
    assert {f"{w.ws}/{e.path}" for e in w.entries()} <= file_tombstones
    assert f"{w.ws}/{obf('src/net/http.py')}" in file_tombstones
    vector_tombstones = {k.decode() for k, v in embeddings if v is None and k is not None}
    assert f"test-bow:1@{chunk_hash(f'the {CANARY_TEXT} lives here')}" in vector_tombstones
    assert f"test-bow:1@{chunk_hash(shared)}" not in vector_tombstones
    for key, value in files + embeddings:
        for canary in (CANARY_TEXT, CANARY_PATH, "parse_json", "fetch_url"):
            assert canary.encode() not in (key or b"") + (value or b"")
