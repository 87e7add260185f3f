"""The gateway app with an in-memory sender: statuses, reasons, limits, keys and metrics."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.testclient import TestClient

from schemas.events import Event
from streams.errors import EventValidationError
from streams.gateway.app import create_app
from streams.gateway.keys import ApiKeyStore
from tests.sample_events import one_of_each


class FakeSender:
    """Records what it is sent; `fail_on` makes it raise for events with that session_id."""

    def __init__(self) -> None:
        self.sent: list[Event] = []
        self.flushes = 0
        self.closed = False
        self.fail_on: dict[str, Exception] = {}

    def send(self, event: Event) -> None:
        failure = self.fail_on.get(str(getattr(event, "session_id", "")))
        if failure is not None:
            raise failure
        self.sent.append(event)

    def flush(self, timeout_s: float = 30.0) -> int:
        self.flushes += 1
        return 0


class Gateway:
    """A TestClient on a fresh app, with one full key and one RolloutResult-only key."""

    def __init__(self, tmp_path: Path, **limits: int) -> None:
        self.sender = FakeSender()
        self.keys = ApiKeyStore(tmp_path / "keys.json")
        self.secret = self.keys.add("ide")
        self.agents_secret = self.keys.add("agents", ["RolloutResult"])
        self.client = TestClient(create_app(self.sender, self.keys, **limits))

    def post(
        self, body: Any, *, secret: str | None = None, headers: dict[str, str] | None = None
    ) -> Any:  # the TestClient's response: httpx2's when installed, else httpx's
        """POST `body` (JSON-encoded unless bytes or an iterator of bytes) with the full key."""
        headers = {
            "Authorization": f"Bearer {secret or self.secret}",
            "Content-Type": "application/json",
            **(headers or {}),
        }
        content = body if isinstance(body, bytes | Iterator) else json.dumps(body).encode()
        return self.client.post("/v1/events", content=content, headers=headers)


@pytest.fixture
def gw(tmp_path: Path) -> Gateway:
    return Gateway(tmp_path)


def as_json(event: Event) -> dict[str, Any]:
    """How a client writes an SDK event over HTTP."""
    return {"type": event.SCHEMA_NAME, **event.to_record()}


def valid_batch(session: str = "s-1") -> list[dict[str, Any]]:
    return [as_json(e) for e in one_of_each(session)]


def test_a_valid_batch_is_accepted_and_sent_in_order(gw: Gateway) -> None:
    batch = valid_batch()
    response = gw.post(batch)
    assert response.status_code == 200
    body = response.json()
    assert body["accepted"] == 5
    assert body["refused"] == 0
    assert [r["event_id"] for r in body["results"]] == [e["event_id"] for e in batch]
    assert [r["status"] for r in body["results"]] == ["accepted"] * 5
    assert gw.sender.sent == one_of_each_like(batch)


def one_of_each_like(batch: list[dict[str, Any]]) -> list[Event]:
    from schemas.events import EVENT_TYPES

    return [EVENT_TYPES[e["type"]].from_record(e) for e in batch]


def test_ndjson_and_a_single_object_are_read(gw: Gateway) -> None:
    ndjson = "\n".join(json.dumps(e) for e in valid_batch()) + "\n\n"
    response = gw.post(ndjson.encode(), headers={"Content-Type": "application/x-ndjson"})
    assert response.status_code == 200
    assert response.json()["accepted"] == 5
    assert gw.post(valid_batch()[1]).json()["accepted"] == 1


def test_producer_and_event_id_default(gw: Gateway) -> None:
    event = valid_batch()[1]
    del event["producer"], event["event_id"]
    result = gw.post([event]).json()["results"][0]
    assert gw.sender.sent[0].producer == "gateway/ide"
    assert gw.sender.sent[0].event_id == result["event_id"]


def test_a_mixed_batch_keeps_its_valid_events(gw: Gateway) -> None:
    good = valid_batch()
    wrong_type = {**good[1], "accepted_chars": "many"}
    missing = {k: v for k, v in good[2].items() if k != "chars_inserted"}
    batch = [good[0], "not an object", wrong_type, {**good[3], "type": "Nope"}, missing, good[4]]
    response = gw.post(batch)
    assert response.status_code == 200
    body = response.json()
    assert (body["accepted"], body["refused"]) == (2, 4)
    results = body["results"]
    assert [r["index"] for r in results] == list(range(6))
    assert [r["status"] for r in results] == ["accepted"] + ["refused"] * 4 + ["accepted"]
    assert [r.get("code") for r in results[1:5]] == [
        "malformed",
        "invalid",
        "unknown_type",
        "invalid",
    ]
    assert "'accepted_chars' must be int" in results[2]["reason"]
    assert "SuggestionOffered, SuggestionOutcome" in results[3]["reason"]
    assert "chars_inserted" in results[4]["reason"]
    assert [e.event_id for e in gw.sender.sent] == [good[0]["event_id"], good[4]["event_id"]]


def test_a_batch_with_no_valid_event_is_400_with_reasons(gw: Gateway) -> None:
    response = gw.post([{"type": "Nope"}, {**valid_batch()[1], "outcome": "MAYBE"}])
    assert response.status_code == 400
    body = response.json()
    assert body["accepted"] == 0
    assert "no event was accepted" in body["error"]
    assert "'outcome' must be one of ACCEPTED" in body["results"][1]["reason"]
    assert gw.sender.sent == []


def test_one_bad_ndjson_line_does_not_sink_the_rest(gw: Gateway) -> None:
    lines = [json.dumps(e) for e in valid_batch()]
    lines.insert(2, '{"type": "SuggestionOutcome", "session_id": ')
    response = gw.post("\n".join(lines).encode(), headers={"Content-Type": "application/x-ndjson"})
    assert response.status_code == 200
    body = response.json()
    assert (body["accepted"], body["refused"]) == (5, 1)
    assert body["results"][2]["reason"].startswith("line 3: malformed JSON")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'[{"type": "SuggestionOutcome", ', "malformed JSON at line 1 column 32"),
        (b"{'single': 'quotes'}", "malformed JSON at line 1 column 2"),
        (b'"a string"', "the body is a JSON string"),
        (b"[]", "the body holds no events"),
        (b"", "the body is empty"),
        (b"\xc3\x28", "the body is not UTF-8"),
    ],
)
def test_malformed_bodies_are_400_and_the_gateway_keeps_serving(
    gw: Gateway, body: bytes, reason: str
) -> None:
    response = gw.post(body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert reason in response.json()["error"]
    assert gw.post(valid_batch()).status_code == 200
    assert gw.client.get("/healthz").status_code == 200


def test_missing_and_invalid_keys_are_401(gw: Gateway) -> None:
    batch = json.dumps(valid_batch())
    plain = {"Content-Type": "application/json"}
    no_key = gw.client.post("/v1/events", content=batch, headers=plain)
    assert no_key.status_code == 401
    assert no_key.headers["WWW-Authenticate"].startswith("Bearer")
    assert "missing API key" in no_key.json()["error"]
    for auth in ["Bearer fw_wrong", f"Basic {gw.secret}", "Bearer", gw.secret]:
        response = gw.client.post(
            "/v1/events", content=batch, headers={**plain, "Authorization": auth}
        )
        assert response.status_code == 401, auth
        assert "WWW-Authenticate" in response.headers
    wrong_header = gw.client.post(
        "/v1/events", content=batch, headers={**plain, "X-API-Key": "fw_wrong"}
    )
    assert wrong_header.json() == {"error": "invalid API key"}
    assert gw.sender.sent == []


def test_the_x_api_key_header_works(gw: Gateway) -> None:
    response = gw.client.post(
        "/v1/events",
        content=json.dumps(valid_batch()),
        headers={"Content-Type": "application/json", "X-API-Key": gw.secret},
    )
    assert response.status_code == 200


def test_a_revoked_key_is_403(gw: Gateway) -> None:
    gw.keys.revoke("ide")
    response = gw.post(valid_batch())
    assert response.status_code == 403
    assert "'ide' is revoked" in response.json()["error"]
    assert gw.sender.sent == []


def test_events_a_key_may_not_send_are_refused_and_all_refused_is_403(gw: Gateway) -> None:
    batch = valid_batch()
    mixed = gw.post(batch, secret=gw.agents_secret)
    assert mixed.status_code == 200
    results = mixed.json()["results"]
    assert [r["status"] for r in results] == ["refused"] * 4 + ["accepted"]
    assert results[0]["code"] == "forbidden"
    assert "'agents' may not send SuggestionOffered" in results[0]["reason"]
    assert gw.sender.sent[0].producer == "tests/sample"  # a producer the client gave is kept
    forbidden = gw.post(batch[:2], secret=gw.agents_secret)
    assert forbidden.status_code == 403
    assert forbidden.json()["refused"] == 2


def test_oversized_bodies_are_413_with_or_without_content_length(tmp_path: Path) -> None:
    gw = Gateway(tmp_path, max_body_bytes=2000)
    big = json.dumps(valid_batch() * 3).encode()
    assert len(big) > 2000
    with_length = gw.post(big)
    assert with_length.status_code == 413
    assert "limit of 2000 bytes" in with_length.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
        yield from (big[i : i + 500] for i in range(0, len(big), 500))

    chunked = gw.post(chunks())
    assert chunked.request.headers.get("content-length") is None
    assert chunked.status_code == 413
    assert gw.post(valid_batch()[:2]).status_code == 200


def test_too_many_events_is_413(tmp_path: Path) -> None:
    gw = Gateway(tmp_path, max_events=3)
    response = gw.post(valid_batch())
    assert response.status_code == 413
    assert "5 events exceed the limit of 3" in response.json()["error"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/x-www-form-urlencoded"},
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
    ],
)
def test_other_content_types_are_415(gw: Gateway, headers: dict[str, str]) -> None:
    response = gw.post(json.dumps(valid_batch()).encode(), headers=headers)
    assert response.status_code == 415
    assert "not supported" in response.json()["error"]


def test_sender_failures_refuse_only_their_event(gw: Gateway) -> None:
    gw.sender.fail_on = {
        "bad": EventValidationError("invalid SuggestionOutcome: field x"),
        "boom": RuntimeError("bug"),
    }
    batch = [valid_batch("bad")[1], valid_batch("boom")[1], valid_batch("ok")[1]]
    body = gw.post(batch).json()
    assert [r["status"] for r in body["results"]] == ["refused", "refused", "accepted"]
    assert body["results"][0]["code"] == "invalid"
    assert body["results"][1] == {
        "index": 1,
        "status": "refused",
        "code": "internal",
        "reason": "the gateway could not send the event (RuntimeError); retry later",
    }
    only_failures = gw.post(batch[1:2])
    assert only_failures.status_code == 503
    assert only_failures.headers["Retry-After"] == "5"


def test_a_closed_sender_makes_health_and_posts_503(gw: Gateway) -> None:
    assert gw.client.get("/healthz").json() == {"status": "ok"}
    gw.sender.closed = True
    assert gw.client.get("/healthz").status_code == 503
    assert gw.post(valid_batch()).status_code == 503


def test_the_sender_is_flushed_at_shutdown(tmp_path: Path) -> None:
    gw = Gateway(tmp_path)
    with gw.client:
        assert gw.post(valid_batch()).status_code == 200
    assert gw.sender.flushes == 1


def test_wrong_methods_and_paths(gw: Gateway) -> None:
    assert gw.client.get("/v1/events").status_code == 405
    assert gw.client.post("/v1/nope").status_code == 404


def test_metrics_count_requests_events_and_bytes(gw: Gateway) -> None:
    batch = valid_batch()
    gw.post([batch[0], {**batch[1], "outcome": "MAYBE"}, {"type": "Made-Up"}])
    gw.post(batch, secret="fw_wrong")
    response = gw.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in [
        'flywheel_gateway_requests_total{route="/v1/events",status="200"} 1.0',
        'flywheel_gateway_requests_total{route="/v1/events",status="401"} 1.0',
        'flywheel_gateway_events_accepted_total{event_type="SuggestionOffered"} 1.0',
        'flywheel_gateway_events_refused_total{event_type="SuggestionOutcome",reason="invalid"}',
        'flywheel_gateway_events_refused_total{event_type="unknown",reason="unknown_type"} 1.0',
        'flywheel_gateway_request_duration_seconds_count{route="/v1/events"} 2.0',
        "flywheel_gateway_request_body_bytes_count 1.0",
    ]:
        assert line in text, line
    assert "Made-Up" not in text  # client strings never become label values


def test_two_apps_keep_separate_metrics(tmp_path: Path) -> None:
    first, second = Gateway(tmp_path / "a"), Gateway(tmp_path / "b")
    first.post(valid_batch())
    assert "events_accepted_total{" not in second.client.get("/metrics").text


def test_a_real_server_refuses_a_chunked_oversized_body_and_keeps_serving(
    tmp_path: Path,
) -> None:
    gw = Gateway(tmp_path, max_body_bytes=2000)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(gw.client.app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        big = json.dumps(valid_batch() * 3).encode()
        url = f"http://127.0.0.1:{port}/v1/events"
        headers = {"Authorization": f"Bearer {gw.secret}", "Content-Type": "application/json"}
        with httpx.Client(timeout=10) as http:
            chunks = (big[i : i + 500] for i in range(0, len(big), 500))
            assert http.post(url, content=chunks, headers=headers).status_code == 413
            small = json.dumps(valid_batch()[:2])
            assert http.post(url, content=small, headers=headers).status_code == 200
            assert http.get(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok"}
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert len(gw.sender.sent) == 2


def test_a_bug_on_one_event_refuses_that_event_only(
    gw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streams.gateway.parsing import build_event

    def flaky(item: Any, event_type: str, default_producer: str) -> Event:
        if event_type == "EditObserved":
            raise KeyError("a bug")
        return build_event(item, event_type, default_producer)

    monkeypatch.setattr("streams.gateway.app.build_event", flaky)
    response = gw.post(valid_batch())
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["accepted"] * 2 + ["refused"] + ["accepted"] * 2
    assert results[2]["code"] == "internal"
    assert "KeyError" in results[2]["reason"]
