"""The simulator through the real SDK: every event it emits is read back as it was sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from flywheel.clients import telemetry_client
from flywheel.settings import Settings
from schemas.events import Event, SuggestionOffered
from simulator import Fleet, SimulatorConfig, build_policy, config_with_overrides, run_fleet
from streams.client import CLIENT_TOPICS, ROUTES
from tests.readback import end_offsets, read_events

pytestmark = pytest.mark.integration


class Recording:
    """Passes events to the SDK and keeps what was sent."""

    def __init__(self, sink: object) -> None:
        self.sink = sink
        self.sent: list[Event] = []

    def send(self, event: Event) -> None:
        self.sent.append(event)
        self.sink.send(event)  # type: ignore[attr-defined]


def test_simulated_events_arrive_as_sent(stack: Settings, tmp_path: Path, unique: str) -> None:
    config = config_with_overrides(SimulatorConfig(), {"fleet_id": unique, "seed": 11})
    fleet = Fleet(config, build_policy(config.policy))
    topics = list(CLIENT_TOPICS)
    since = end_offsets(stack, topics)
    with telemetry_client(stack, name="sim", spool_dir=tmp_path / "spool") as client:
        recording = Recording(client)
        report = run_fleet(fleet, recording, n_requests=300)
        assert client.flush(30) == 0
    assert report.events == len(recording.sent)
    kinds = {type(e) for e in recording.sent}
    assert SuggestionOffered in kinds
    assert len(kinds) >= 4
    found = read_events(stack, topics, [e.event_id for e in recording.sent], since)
    assert len(found) == len(recording.sent)
    for kind in kinds:
        topic = ROUTES[kind][0]
        sent = {e.event_id: e for e in recording.sent if type(e) is kind}
        for read in (r for r in found if r.topic == topic):
            back = kind.from_record(read.record)
            original = sent[back.event_id]
            if isinstance(back, SuggestionOffered):
                assert isinstance(original, SuggestionOffered)
                assert back.user_id.startswith("user:")  # pseudonymised at the source
                assert back.suggestion_id == original.suggestion_id
                assert back.propensity == original.propensity
                assert back.decision == original.decision
            else:
                assert back == original
