"""schemas.catalog: lookup by name, subjects, parse caching, and history-folder rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import catalog
from schemas.catalog import (
    history,
    load_schema,
    parsed_schema,
    schema_names,
    schema_text,
    subject_for,
)
from schemas.errors import SchemaError


def test_schema_names_are_sorted() -> None:
    assert list(schema_names()) == sorted(schema_names())


def test_load_schema_returns_a_fresh_dict_each_call() -> None:
    first = load_schema("Reward")
    first["fields"].clear()
    assert load_schema("Reward")["fields"]


def test_schema_text_is_the_stored_json() -> None:
    assert json.loads(schema_text("ReplicaAck")) == load_schema("ReplicaAck")


def test_parsed_schema_is_parsed_once() -> None:
    assert parsed_schema("SuggestionOffered") is parsed_schema("SuggestionOffered")
    assert parsed_schema("SuggestionOffered")["name"] == "flywheel.v1.SuggestionOffered"


@pytest.mark.parametrize("bad", ["Nope", "../catalog", "history", ""])
def test_unknown_schema_names_raise_with_the_known_names(bad: str) -> None:
    with pytest.raises(SchemaError, match="known schemas: AgentCompletion, AgentFeedback, "):
        load_schema(bad)


def test_subjects_follow_topic_name_strategy() -> None:
    assert subject_for("telemetry.suggestions") == "telemetry.suggestions-value"


@pytest.fixture
def fake_avro_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the catalog at an empty avro/ folder holding one schema, Thing."""
    (tmp_path / "Thing.avsc").write_text('{"type": "record", "name": "Thing", "fields": []}')
    monkeypatch.setattr(catalog, "_avro_dir", lambda: tmp_path)
    catalog.schema_names.cache_clear()
    yield tmp_path
    catalog.schema_names.cache_clear()


def test_history_is_ordered_numerically(fake_avro_dir: Path) -> None:
    folder = fake_avro_dir / "history" / "Thing"
    folder.mkdir(parents=True)
    for number in range(1, 12):  # v10 and v11 must sort after v9
        (folder / f"v{number}.avsc").write_text(json.dumps({"doc": str(number)}))
    assert [v["doc"] for v in history("Thing")] == [str(n) for n in range(1, 12)]


def test_history_of_a_schema_never_released_is_empty(fake_avro_dir: Path) -> None:
    assert history("Thing") == []


def test_history_rejects_gaps(fake_avro_dir: Path) -> None:
    folder = fake_avro_dir / "history" / "Thing"
    folder.mkdir(parents=True)
    (folder / "v1.avsc").write_text("{}")
    (folder / "v3.avsc").write_text("{}")
    with pytest.raises(SchemaError, match="without gaps"):
        history("Thing")


@pytest.mark.parametrize("name", ["v0.avsc", "v01.avsc", "2.avsc", "v2.json", "latest.avsc"])
def test_history_rejects_misnamed_files(fake_avro_dir: Path, name: str) -> None:
    folder = fake_avro_dir / "history" / "Thing"
    folder.mkdir(parents=True)
    (folder / name).write_text("{}")
    with pytest.raises(SchemaError, match=r"v<N>\.avsc"):
        history("Thing")


def test_invalid_json_names_the_file(fake_avro_dir: Path) -> None:
    (fake_avro_dir / "Broken.avsc").write_text("{not json")
    with pytest.raises(SchemaError, match=r"schemas/avro/Broken\.avsc is not valid JSON"):
        load_schema("Broken")


def test_invalid_avro_raises_schema_error(fake_avro_dir: Path) -> None:
    (fake_avro_dir / "Bad.avsc").write_text('{"type": "record", "name": "Bad", "fields": 3}')
    with pytest.raises(SchemaError, match="not a valid Avro schema"):
        parsed_schema("Bad")
