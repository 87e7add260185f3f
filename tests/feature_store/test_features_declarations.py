"""Feature declarations: the shipped file loads, and each malformed field is named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from feature_store.declarations import load_features, parse_duration_ms, parse_features
from feature_store.errors import DeclarationError, UnknownEntityError, UnknownFeatureError

BASE: dict[str, Any] = {
    "name": "accept_rate_1h", "entity": "user", "source": "rewards", "aggregation": "rate",
    "where": [["decision", "==", "SHOWN"]], "predicate": ["reward_components.accepted", ">", 0.5],
    "window": "1h",
}  # fmt: skip


def test_the_shipped_declarations_load_with_the_default_set() -> None:
    features = load_features()
    for name in [
        "user.show_rate_24h", "user.accept_rate_24h", "user.reward_mean_24h",
        "user_language.accept_rate_24h", "model_version.reward_mean_1h", "repo.requests_24h",
    ]:  # fmt: skip
        assert features.get(name).qualified_name == name
    accept = features.get("user.accept_rate_24h")
    assert accept.window_ms == 24 * 3_600_000 and accept.ttl_ms == accept.window_ms
    assert features.sources() == ("rewards",)


def test_a_valid_declaration_parses_into_a_frozen_rule() -> None:
    (feature,) = parse_features([BASE])
    assert feature.rule.predicate is not None
    assert str(feature.rule.predicate) == "reward_components.accepted > 0.5"
    with pytest.raises(AttributeError):
        feature.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"entity": "team"}, "'entity'"),
        ({"source": "nowhere"}, "'source'"),
        ({"aggregation": "median"}, "'aggregation'"),
        ({"window": "soon"}, "'window'"),
        ({"window": "all"}, "'ttl' is required"),
        ({"ttl": "10m"}, "'ttl'"),
        ({"name": "Bad-Name"}, "'name'"),
        ({"where": [["nope", "==", "x"]]}, "column 'nope'"),
        ({"where": [["decision", "~", "SHOWN"]]}, "op '~'"),
        ({"where": [["decision", "==", 1]]}, "must be text"),
        ({"where": [["reward", "==", "high"]]}, "must be a finite number"),
        ({"where": [["reward_components", ">", 1]]}, "field.key"),
        ({"predicate": None}, "field 'predicate'"),
        ({"value": "reward"}, "field 'value' is only for aggregation: mean"),
        ({"colour": "red"}, "unknown field"),
    ],
)
def test_each_malformed_field_is_named(change: dict[str, Any], field: str) -> None:
    item = {**BASE, **change}
    if change.get("predicate", 1) is None:
        del item["predicate"]
    with pytest.raises(DeclarationError, match=field) as raised:
        parse_features([item], where="test.yaml")
    assert "test.yaml: feature #1" in str(raised.value)


def test_duplicates_unknown_names_and_wrong_entity_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match="declared twice"):
        parse_features([BASE, BASE])
    features = load_features()
    with pytest.raises(UnknownFeatureError, match="declared: "):
        features.get("user.nope")
    with pytest.raises(UnknownEntityError, match="unknown entity type 'team'"):
        features.for_entity("team")
    with pytest.raises(UnknownFeatureError, match="belongs to entity type repo"):
        features.for_entity("user", ["repo.requests_24h"])
    assert [f.name for f in features.for_entity("user", ["accept_rate_24h"])] == ["accept_rate_24h"]
    bad = tmp_path / "f.yaml"
    bad.write_text("features: {}\n")
    with pytest.raises(DeclarationError, match="list under 'features'"):
        load_features(bad)


def test_durations() -> None:
    assert parse_duration_ms("90s") == 90_000
    assert parse_duration_ms("7d") == 7 * 86_400_000
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_ms("1.5h")
