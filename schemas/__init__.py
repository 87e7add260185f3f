"""Flywheel's event contracts: Avro schemas, their history, typed events, compatibility checks.

* ``schemas/avro/<Name>.avsc`` — the current value schema of each event (namespace
  ``flywheel.v1``), ``schemas/avro/history/<Name>/v<N>.avsc`` — every released version;
* :mod:`schemas.catalog` — look schemas up by name (``parsed_schema`` for fastavro); which topic
  carries which schema is declared with the topics (``streams.topics.TOPIC_VALUE_SCHEMAS``);
* :mod:`schemas.events` — frozen dataclasses mirroring the schemas (``to_record``/``from_record``);
* :mod:`schemas.compatibility` — Avro schema-resolution checks (BACKWARD_TRANSITIVE evolution).
"""

from schemas.catalog import (
    history,
    load_schema,
    parsed_schema,
    schema_names,
    schema_text,
    subject_for,
)
from schemas.errors import SchemaError

__all__ = [
    "SchemaError",
    "history",
    "load_schema",
    "parsed_schema",
    "schema_names",
    "schema_text",
    "subject_for",
]
