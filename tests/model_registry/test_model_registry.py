"""Registry folding without a broker: channel keys and the latest state per version."""

from __future__ import annotations

from datetime import UTC, datetime

from model_registry.registry import NO_WINDOW, channel_key, fold_versions
from schemas.enums import Channel, ModelEventType
from schemas.events import ModelVersionEvent


def _event(
    version: int, event_type: ModelEventType, minute: int, **changes: object
) -> ModelVersionEvent:
    fields: dict[str, object] = {
        "producer": "test/1",
        "event_time": datetime(2026, 1, 1, 12, minute, tzinfo=UTC),
        "model_name": "gate",
        "version": version,
        "parent_version": version - 1 or None,
        "event_type": event_type,
        "artifact_uri": f"file:///models/gate/{version}",
        "artifact_sha256": f"{version:064x}",
        "training_window": NO_WINDOW,
        "reward_fn": "tab@1",
        "metrics": {},
        **changes,
    }
    return ModelVersionEvent(**fields)  # type: ignore[arg-type]  # fields checked by the class


def test_channel_key_spells_the_channel_in_lower_case() -> None:
    assert channel_key("suggestion-gate", Channel.PRODUCTION) == "suggestion-gate:production"
    assert channel_key("g", Channel.CANARY) == "g:canary"


def test_fold_keeps_first_facts_and_latest_state_per_version() -> None:
    events = [
        _event(1, ModelEventType.REGISTERED, 0),
        _event(2, ModelEventType.REGISTERED, 1),
        _event(1, ModelEventType.PROMOTED, 2, reason="ok"),
        _event(2, ModelEventType.GATE_FAILED, 3, reason="no lift", ope_dr_lower=-0.1),
    ]
    versions = fold_versions(events)
    assert list(versions) == [1, 2]
    one, two = versions[1], versions[2]
    assert one.status is ModelEventType.PROMOTED and one.parent_version is None
    assert one.registered_at.minute == 0 and one.updated_at.minute == 2
    assert two.status is ModelEventType.GATE_FAILED and two.latest.ope_dr_lower == -0.1
    assert two.parent_version == 1 and two.artifact.sha256 == f"{2:064x}"
    assert [e.event_type for e in two.events] == [
        ModelEventType.REGISTERED, ModelEventType.GATE_FAILED,
    ]  # fmt: skip
    assert fold_versions([]) == {}
