"""Click option types for quantities with units: durations (`90s`, `5m`, `2h`, `30d`) and byte
sizes (`128MiB`, `1GB`). Values come back in base units: seconds and bytes."""

from __future__ import annotations

import re
from typing import Any

import click

_NUMBER = r"(\d+(?:\.\d+)?)"
SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
BYTES = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
    "kib": 2**10, "mib": 2**20, "gib": 2**30,
}  # fmt: skip


def parse_duration_s(text: str) -> float:
    """`"90s"`, `"5m"`, `"2h"`, `"30d"`, `"250ms"`, `"1.5h"` -> seconds; ValueError otherwise
    (a bare number is refused: its unit would be a guess)."""
    match = re.fullmatch(rf"{_NUMBER}\s*(ms|s|m|h|d)", text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration; write a number and a unit: 90s, 5m, 2h, 30d")
    return float(match[1]) * SECONDS[match[2]]


def parse_bytes(text: str) -> int:
    """`"128MiB"`, `"1GB"`, `"500kb"`, `"4096"` (bytes) -> bytes; ValueError otherwise."""
    match = re.fullmatch(rf"{_NUMBER}\s*([a-z]*)", text.strip().lower())
    if match is None or match[2] not in BYTES:
        raise ValueError(f"{text!r} is not a size; write e.g. 128MiB, 1GiB, 64MB or bytes")
    return int(float(match[1]) * BYTES[match[2]])


class Duration(click.ParamType):
    """A duration option (`parse_duration_s`): the command gets seconds as a float."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration_s(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ByteSize(click.ParamType):
    """A size option (`parse_bytes`): the command gets bytes as an int."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_bytes(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
