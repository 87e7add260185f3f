"""A schema-registry double for unit tests of codec logic (integration tests use the stack's)."""

from __future__ import annotations

from typing import Any


class FakeRegistry:
    """Just enough of SchemaRegistryClient for AvroCodec to encode and decode its own records."""

    def __init__(self) -> None:
        self.subjects: dict[str, int] = {}

    def set_compatibility(self, _subject: str, _level: str) -> None:
        return None

    def register_schema(self, subject: str, _schema: Any) -> int:
        return self.subjects.setdefault(subject, len(self.subjects) + 1)
