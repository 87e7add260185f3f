"""The SDK against the real broker and registry: round trips, privacy, validation, the spool."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from flywheel.clients import telemetry_client
from flywheel.settings import Settings
from schemas.events import Event
from streams.client import CLIENT_TOPICS, ROUTES
from streams.errors import EventValidationError
from streams.stack.local import LocalStack
from tests.readback import end_offsets, read_events
from tests.sample_events import offered, one_of_each, served

pytestmark = pytest.mark.integration


def _client(stack: Settings, tmp_path: Path, **options: Any) -> Any:
    return telemetry_client(stack, name="test", spool_dir=tmp_path / "spool", **options)


def test_every_kind_round_trips_keyed_as_designed(stack: Settings, tmp_path: Path) -> None:
    session = f"s-{uuid.uuid4()}"
    sent = one_of_each(session)
    topics = list(CLIENT_TOPICS)
    since = end_offsets(stack, topics)
    with _client(stack, tmp_path) as client:
        for event in sent:
            client.send(event)
        assert client.flush(30) == 0
        assert client.stats.acked == len(sent)
    found = {str(r.record["event_id"]): r for r in read_events(
        stack, topics, [e.event_id for e in sent], since)}  # fmt: skip
    for event in sent:
        topic, key_field = ROUTES[type(event)]
        read = found[event.event_id]
        assert read.topic == topic
        assert read.key == str(getattr(event, key_field)).encode()
        back = type(event).from_record(read.record)
        if event is sent[0]:  # ids are pseudonymised at the source, nothing else changes
            assert back.user_id.startswith("user:")  # type: ignore[attr-defined]
            assert back.repo_id.startswith("repo:")  # type: ignore[attr-defined]
            back = dataclasses.replace(back, user_id="user-1", repo_id="repo-1")  # type: ignore[call-arg]
        assert back == event


def test_privacy_no_secret_or_code_leaves_the_process(stack: Settings, tmp_path: Path) -> None:
    canary = f"CANARY-{uuid.uuid4().hex}"
    aws_key = "AKIA" + "Q" * 16
    private = offered(privacy_mode=True, suggestion_text=f"x = '{canary}'\n", user_id=canary)
    redacted = offered(suggestion_text=f'aws_access_key_id = "{aws_key}"\nprint(1)\n')
    since = end_offsets(stack, ["telemetry.suggestions"])
    with _client(stack, tmp_path) as client:
        client.send(private)
        client.send(redacted)
        assert client.flush(30) == 0
    wanted = [private.event_id, redacted.event_id]
    found = {
        r.record["event_id"]: r.record
        for r in read_events(stack, ["telemetry.suggestions"], wanted, since)
    }
    assert found[uuid.UUID(private.event_id)]["suggestion_text"] is None
    assert canary not in repr(found[uuid.UUID(private.event_id)])
    text = found[uuid.UUID(redacted.event_id)]["suggestion_text"]
    assert aws_key not in text
    assert "print(1)" in text


def test_a_private_served_session_turn_keeps_counts_and_ids_only(
    stack: Settings, tmp_path: Path
) -> None:
    """Privacy mode on a tool session's turn: no tokens, text or marks of which prompt tokens
    the model wrote leave the process (even if the caller filled them)."""
    turn = served(privacy_mode=True, turn=1, prompt_mask=(0, 1, 1), prompt_logprobs=(0, -1, -1),
                  tool_call_ids=("call_1",), tool_call_names=("read_file",))  # fmt: skip
    since = end_offsets(stack, ["agent.completions"])
    with _client(stack, tmp_path) as client:
        client.send(turn)
        assert client.flush(30) == 0
    (read,) = read_events(stack, ["agent.completions"], [turn.event_id], since)
    back = read.record
    assert back["completion_text"] is None and back["prompt_token_ids"] is None
    assert (back["prompt_mask"], back["prompt_logprobs"]) == ([], [])
    assert (back["turn"], back["tool_call_names"]) == (1, ["read_file"])  # counts and ids stay


def test_an_invalid_event_is_refused_naming_the_field(stack: Settings, tmp_path: Path) -> None:
    with _client(stack, tmp_path) as client:
        with pytest.raises(EventValidationError, match="latency_ms"):
            client.send(dataclasses.replace(offered(), latency_ms="slow"))  # type: ignore[arg-type]
        with pytest.raises(EventValidationError, match="not emitted by clients"):
            client.send(Event(producer="x"))
        assert client.stats.sent == 0


def _kill_broker(stack: Settings) -> None:
    pid = LocalStack(stack.home, stack.ports).kafka.process.running_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    while LocalStack(stack.home, stack.ports).kafka.process.running_pid() is not None:
        time.sleep(0.1)


def test_events_survive_a_dead_broker_through_the_spool(stack: Settings, tmp_path: Path) -> None:
    if not stack.uses_local_stack:
        pytest.skip("needs the local stack: the test kills its broker")
    session = f"s-{uuid.uuid4()}"
    events = [dataclasses.replace(offered(session), request_id=f"r-{i}") for i in range(400)]
    since = end_offsets(stack, ["telemetry.suggestions"])
    client = _client(stack, tmp_path, close_timeout_s=2.0)
    for event in events[:150]:
        client.send(event)
    assert client.flush(30) == 0  # nothing in flight when the broker dies
    _kill_broker(stack)
    try:
        for event in events[150:]:
            client.send(event)
        stats = client.close()
        assert (stats.acked, stats.spooled) == (150, 250)
    finally:
        LocalStack(stack.home, stack.ports).up()
    with _client(stack, tmp_path) as resender:
        assert resender.stats.resent == 250
        assert resender.flush(60) == 0
        assert resender.stats.acked == 250
    assert not list((tmp_path / "spool").glob("*.spool"))  # the spool is empty again
    found = read_events(stack, ["telemetry.suggestions"], [e.event_id for e in events], since)
    received = [str(r.record["event_id"]) for r in found]
    assert received == [e.event_id for e in events]  # each once, in send order (one partition)
