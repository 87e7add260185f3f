"""Config fields with declared numeric bounds, and the errors that name a config key.

A section declares ``x: float = param(0.3, ge=0, le=1)`` and calls :func:`check_bounds` in its
``__post_init__``; the section's ``PATH`` (e.g. ``"users"``) makes the dotted key in messages.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, TypeVar

from simulator.errors import SimulatorError

_T = TypeVar("_T")


def param(
    default: _T,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> _T:
    """A field with a default and numeric bounds (checked by :func:`check_bounds`)."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    return field(default=default, metadata=bounds)


_BOUND_TEXT = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
_BOUND_OK = {
    "ge": lambda v, b: v >= b,
    "gt": lambda v, b: v > b,
    "le": lambda v, b: v <= b,
    "lt": lambda v, b: v < b,
}


def config_error(key: str, problem: str) -> SimulatorError:
    """An error naming a config key, what is wrong with it, and the two ways to fix it."""
    return SimulatorError(
        f"simulator config key {key!r}: {problem}; fix it in the YAML file or with "
        f"--set {key}=VALUE (see simulator/configs/default.yaml)."
    )


def check_bounds(section: Any) -> None:
    """Raise :class:`SimulatorError` for the first field of ``section`` outside its bounds."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        values = value if isinstance(value, tuple) else (value,)
        for kind, bound in f.metadata.items():
            for v in values:
                if not _BOUND_OK[kind](v, bound):
                    key = f"{section.PATH}.{f.name}"
                    raise config_error(key, f"{v!r} must be {_BOUND_TEXT[kind]} {bound}")
