"""Feature declarations, written once in ``features.yaml`` and read into typed, frozen objects.

A feature is ``<entity>.<name>`` (``user.accept_rate_24h``): an aggregation (``count``, ``mean``
of a column, ``rate`` of a predicate) of the rows of a source topic that pass ``where``, per
entity, over a window (``1h``, ``24h``, ``7d``, or ``all``), forgotten ``ttl`` after the
entity's latest row. ``semantics.py`` says exactly what the value is; both the online and the
offline path compute it from the :class:`FeatureDeclaration` alone.

YAML form (see ``feature_store/features.yaml``)::

    features:
      - name: accept_rate_24h
        entity: user
        source: rewards
        where: [[source, "==", SUGGESTION], [decision, "==", SHOWN]]
        aggregation: rate
        predicate: [reward_components.accepted, ">", 0.5]
        window: 24h
        ttl: 24h          # optional: default the window (required for window: all)
        description: ...  # optional
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import yaml

from feature_store.errors import DeclarationError, UnknownEntityError, UnknownFeatureError
from feature_store.semantics import (
    AGGREGATIONS,
    EVENT_TIME,
    OPS,
    Aggregation,
    Column,
    ColumnKind,
    Condition,
    Literal_,
    Op,
    RowRule,
)
from schemas.catalog import load_schema
from streams.topics import TOPIC_VALUE_SCHEMAS

_NAME = re.compile(r"[a-z][a-z0-9_]*")
_DURATION = re.compile(r"([1-9][0-9]*)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
ALL = "all"
_KINDS: dict[Any, ColumnKind] = {
    "string": "string", "int": "integer", "long": "integer", "float": "float", "double": "float",
}  # fmt: skip


@dataclass(frozen=True)
class EntityType:
    """A kind of entity and the source columns whose values identify one, in id order."""

    name: str
    keys: tuple[str, ...]


# The registry of entity types (STYLE 5): name -> its key columns.
ENTITY_TYPES: Mapping[str, EntityType] = MappingProxyType(
    {
        e.name: e
        for e in (
            EntityType("user", ("user_id",)),
            EntityType("repo", ("repo_id",)),
            EntityType("user_language", ("user_id", "language")),
            EntityType("model_version", ("model_name", "model_version")),
        )
    }
)


@dataclass(frozen=True)
class FeatureDeclaration:
    """One declared feature. ``window_ms`` is None for ``all``; times are in milliseconds."""

    name: str
    entity: EntityType
    source: str  # the platform topic (streams.topics.TOPIC_VALUE_SCHEMAS) of the rows
    aggregation: Aggregation
    window: str  # as written: "24h" or "all" (FeatureUpdate.window)
    window_ms: int | None
    ttl_ms: int
    rule: RowRule
    description: str = ""

    @property
    def qualified_name(self) -> str:
        return f"{self.entity.name}.{self.name}"


class FeatureSet:
    """The declared features by qualified name, in declaration order."""

    def __init__(self, features: Sequence[FeatureDeclaration]) -> None:
        self._by_name: dict[str, FeatureDeclaration] = {}
        for feature in features:
            if feature.qualified_name in self._by_name:
                raise DeclarationError(
                    f"feature {feature.qualified_name} is declared twice; rename one"
                )
            self._by_name[feature.qualified_name] = feature

    def __iter__(self) -> Iterator[FeatureDeclaration]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def sources(self) -> tuple[str, ...]:
        """The source topics the features read, each once."""
        return tuple(dict.fromkeys(f.source for f in self))

    def get(self, name: str) -> FeatureDeclaration:
        """The feature named ``<entity>.<name>``; UnknownFeatureError listing the known ones."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownFeatureError(
                f"unknown feature {name!r}; declared: {', '.join(self._by_name)} "
                "(see `flywheel features list`)"
            ) from None

    def resolve(self, names: Sequence[str]) -> tuple[FeatureDeclaration, ...]:
        """The features named (qualified), in the order given."""
        return tuple(self.get(n) for n in names)

    def for_entity(
        self, entity_type: str, names: Sequence[str] | None = None
    ) -> tuple[FeatureDeclaration, ...]:
        """Features of ``entity_type``: all of them, or ``names`` (qualified or short).

        Raises UnknownEntityError for an undeclared type, UnknownFeatureError for a name that is
        not a feature of this type.
        """
        if entity_type not in ENTITY_TYPES:
            raise UnknownEntityError(
                f"unknown entity type {entity_type!r}; declared: {', '.join(ENTITY_TYPES)}"
            )
        own = [f for f in self if f.entity.name == entity_type]
        if names is None:
            return tuple(own)
        out = []
        for name in names:
            qualified = name if "." in name else f"{entity_type}.{name}"
            feature = self.get(qualified)
            if feature.entity.name != entity_type:
                raise UnknownFeatureError(
                    f"feature {qualified} belongs to entity type {feature.entity.name}, not "
                    f"{entity_type}; ask for one of {', '.join(f.qualified_name for f in own)}"
                )
            out.append(feature)
        return tuple(out)


def parse_duration_ms(text: str) -> int:
    """``"90s"``, ``"15m"``, ``"24h"``, ``"7d"``, ``"250ms"`` → milliseconds; else ValueError."""
    match = _DURATION.fullmatch(str(text).strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration; write e.g. 90s, 15m, 24h or 7d")
    return int(match[1]) * _UNIT_MS[match[2]]


def default_features_path() -> Path:
    """The ``features.yaml`` shipped in the package."""
    return Path(str(files("feature_store").joinpath("features.yaml")))


def load_features(path: Path | None = None) -> FeatureSet:
    """Read and validate declarations (default: the shipped ``features.yaml``).

    Raises DeclarationError naming the file, the feature and the field that is wrong.
    """
    path = path or default_features_path()
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise DeclarationError(f"cannot read feature declarations from {path}: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("features"), list):
        raise DeclarationError(f"{path}: expected a mapping with a list under 'features'")
    return parse_features(document["features"], where=str(path))


def parse_features(items: Sequence[Any], where: str = "features") -> FeatureSet:
    """Declarations from parsed YAML items (module doc); DeclarationError naming the field."""
    out = []
    for index, item in enumerate(items):
        label = f"{where}: feature #{index + 1}"
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            label += f" ({item.get('entity')}.{item['name']})"
        out.append(_parse_feature(item, label))
    return FeatureSet(out)


_FIELDS = {"name", "entity", "source", "where", "aggregation", "value", "predicate", "window"}
_FIELDS |= {"ttl", "description"}


def _parse_feature(item: Any, label: str) -> FeatureDeclaration:
    if not isinstance(item, dict):
        raise DeclarationError(f"{label}: expected a mapping of fields, got {item!r}")
    unknown = set(item) - _FIELDS
    if unknown:
        raise DeclarationError(
            f"{label}: unknown field(s) {sorted(unknown)}; known: {sorted(_FIELDS)}"
        )
    name = _required(item, "name", label)
    if not _NAME.fullmatch(name):
        raise DeclarationError(f"{label}: field 'name' {name!r} must match [a-z][a-z0-9_]*")
    entity_name = _required(item, "entity", label)
    if entity_name not in ENTITY_TYPES:
        raise DeclarationError(
            f"{label}: field 'entity' {entity_name!r} is not one of {', '.join(ENTITY_TYPES)}"
        )
    entity = ENTITY_TYPES[entity_name]
    source = _required(item, "source", label)
    columns = _source_columns(source, label)
    aggregation = cast(Aggregation, _required(item, "aggregation", label))
    if aggregation not in AGGREGATIONS:
        raise DeclarationError(
            f"{label}: field 'aggregation' {aggregation!r} is not one of {', '.join(AGGREGATIONS)}"
        )
    window, window_ms, ttl_ms = _window_and_ttl(item, label)
    rule = RowRule(
        keys=tuple(_column(k, columns, f"{label}: entity key") for k in entity.keys),
        where=_conditions(item.get("where"), columns, label),
        aggregation=aggregation,
        value=_value_column(item, aggregation, columns, label),
        predicate=_predicate(item, aggregation, columns, label),
    )
    description = item.get("description", "")
    return FeatureDeclaration(
        name, entity, source, rule.aggregation, window, window_ms, ttl_ms, rule, str(description)
    )


def _required(item: dict[str, Any], field: str, label: str) -> str:
    value = item.get(field)
    if not isinstance(value, str) or not value:
        raise DeclarationError(f"{label}: field {field!r} is required and must be text")
    return value


def _window_and_ttl(item: dict[str, Any], label: str) -> tuple[str, int | None, int]:
    window = str(item.get("window", ""))
    window_ms = None
    if window != ALL:
        try:
            window_ms = parse_duration_ms(window)
        except ValueError as exc:
            raise DeclarationError(f"{label}: field 'window': {exc}, or all") from None
    if "ttl" not in item:
        if window_ms is None:
            raise DeclarationError(f"{label}: field 'ttl' is required for window: all")
        return window, window_ms, window_ms
    try:
        ttl_ms = parse_duration_ms(str(item["ttl"]))
    except ValueError as exc:
        raise DeclarationError(f"{label}: field 'ttl': {exc}") from None
    if window_ms is not None and ttl_ms < window_ms:
        raise DeclarationError(
            f"{label}: field 'ttl' ({item['ttl']}) is shorter than the window ({window}); "
            "make it at least the window, or omit it"
        )
    return window, window_ms, ttl_ms


def _source_columns(source: str, label: str) -> dict[str, Any]:
    """Field name -> Avro type of the source topic's schema."""
    schema_name = TOPIC_VALUE_SCHEMAS.get(source)
    if schema_name is None:
        raise DeclarationError(
            f"{label}: field 'source' {source!r} is not a platform topic; one of "
            f"{', '.join(TOPIC_VALUE_SCHEMAS)}"
        )
    fields = {f["name"]: f["type"] for f in load_schema(schema_name)["fields"]}
    if EVENT_TIME not in fields:
        raise DeclarationError(f"{label}: source {source} has no {EVENT_TIME} to window by")
    return fields


def _column(path: Any, columns: dict[str, Any], label: str) -> Column:
    if not isinstance(path, str) or not path:
        raise DeclarationError(f"{label}: a column must be a field name, got {path!r}")
    field, _, key = path.partition(".")
    if field not in columns:
        raise DeclarationError(
            f"{label}: column {field!r} is not a field of the source; fields: {', '.join(columns)}"
        )
    avro = _non_null(columns[field])
    is_map = isinstance(avro, dict) and avro.get("type") == "map"
    if bool(key) != is_map:
        fix = "name a key as field.key" if is_map else "only map fields take .key"
        raise DeclarationError(f"{label}: column {path!r}: {fix}")
    kind = _kind(avro["values"] if is_map else avro)
    if kind is None:
        raise DeclarationError(
            f"{label}: column {path!r} is not text or a number; filter and aggregate those only"
        )
    return Column(field, kind, key or None)


def _non_null(avro: Any) -> Any:
    if isinstance(avro, list):
        rest = [t for t in avro if t != "null"]
        return rest[0] if len(rest) == 1 else avro
    return avro


def _kind(avro: Any) -> ColumnKind | None:
    avro = _non_null(avro)
    if isinstance(avro, dict):
        if "logicalType" in avro:
            return None
        if avro.get("type") == "enum":
            return "string"
        avro = avro.get("type")
    return _KINDS.get(avro)


def _conditions(raw: Any, columns: dict[str, Any], label: str) -> tuple[Condition, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DeclarationError(f"{label}: field 'where' must be a list of [column, op, value]")
    return tuple(_condition(c, columns, f"{label}: field 'where'") for c in raw)


def _condition(raw: Any, columns: dict[str, Any], label: str) -> Condition:
    if not isinstance(raw, list) or len(raw) != 3:
        raise DeclarationError(f"{label}: {raw!r} is not [column, op, value]")
    column = _column(raw[0], columns, label)
    op, literal = raw[1], raw[2]
    if op not in OPS:
        raise DeclarationError(f"{label}: op {op!r} in {raw!r} is not one of {', '.join(OPS)}")
    numeric = column.kind != "string"
    ok = (
        isinstance(literal, (int, float)) and not isinstance(literal, bool) and literal == literal
        if numeric
        else isinstance(literal, str)
    )
    if not ok or literal in (float("inf"), float("-inf")):
        want = "a finite number" if numeric else "text (quote it)"
        raise DeclarationError(f"{label}: value {literal!r} in {raw!r} must be {want}")
    return Condition(column, cast(Op, op), cast(Literal_, literal))


def _value_column(
    item: dict[str, Any], aggregation: str, columns: dict[str, Any], label: str
) -> Column | None:
    if aggregation != "mean":
        if "value" in item:
            raise DeclarationError(f"{label}: field 'value' is only for aggregation: mean")
        return None
    column = _column(item.get("value"), columns, f"{label}: field 'value'")
    if column.kind == "string":
        raise DeclarationError(f"{label}: field 'value' {column.path!r} must be numeric")
    return column


def _predicate(
    item: dict[str, Any], aggregation: str, columns: dict[str, Any], label: str
) -> Condition | None:
    if aggregation != "rate":
        if "predicate" in item:
            raise DeclarationError(f"{label}: field 'predicate' is only for aggregation: rate")
        return None
    if "predicate" not in item:
        raise DeclarationError(f"{label}: field 'predicate' is required for aggregation: rate")
    return _condition(item["predicate"], columns, f"{label}: field 'predicate'")
