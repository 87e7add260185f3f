"""Value rules a decoded record must meet besides its Avro schema (cause `invalid_value`).

Avro checks types; these check what the schemas' docs promise and the Avro type cannot say.
A rule applies to every schema that has its fields, so new schemas get it for free.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Record = Mapping[str, Any]


@dataclass(frozen=True)
class ValueRule:
    """A check over `fields` of a record; `problem` returns what is wrong, or None."""

    fields: tuple[str, ...]
    problem: Callable[[Record], str | None]


def _privacy(record: Record) -> str | None:
    # The SDK drops code text in privacy mode (DESIGN §4): text here means a client bypassed it.
    if record["privacy_mode"] and record["suggestion_text"] is not None:
        return "privacy_mode is true but suggestion_text carries code text; it must be null"
    return None


def _probability(name: str, *, zero_allowed: bool) -> ValueRule:
    low = "[0" if zero_allowed else "(0"

    def problem(record: Record) -> str | None:
        value = record[name]
        if value is None:
            return None
        inside = (value >= 0 if zero_allowed else value > 0) and value <= 1
        if not inside or math.isnan(value):
            return f"{name} is {value!r}, outside {low}, 1]"
        return None

    return ValueRule((name,), problem)


RULES: tuple[ValueRule, ...] = (
    ValueRule(("privacy_mode", "suggestion_text"), _privacy),
    _probability("propensity", zero_allowed=False),  # importance weights divide by it
    _probability("traffic_fraction", zero_allowed=True),
)


class RecordValidator:
    """The rules that apply to one schema, by its field names."""

    def __init__(self, field_names: tuple[str, ...], rules: tuple[ValueRule, ...] = RULES) -> None:
        present = set(field_names)
        self.rules = tuple(r for r in rules if set(r.fields) <= present)

    def problem(self, record: Record) -> str | None:
        """The first rule `record` breaks, as a message naming the field; None if none."""
        for rule in self.rules:
            found = rule.problem(record)
            if found is not None:
                return found
        return None
