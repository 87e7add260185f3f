"""Recipe configs from YAML: one file per run, one typed section (a frozen dataclass) per stage.

Each recipe declares its config dataclass and default file in its folder (``learner/recipes/<name>/
config.py`` or ``recipe.py``, ``configs/*.yaml``); a file passed with ``flywheel learn --config``
may set any subset of its keys. Unknown keys and wrong values are errors that name the key, so a
typo never silently falls back to a default.

A renamed key keeps loading under its old name: a config dataclass may declare
``KEY_ALIASES: ClassVar[Mapping[str, str]] = {"old": "new"}`` (e.g. the recipes' ``gate:``
section, now ``release_check:``), and :func:`build_section` reads ``old`` as ``new``; a file that
sets both is an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from learner.errors import LearnerError

T = TypeVar("T")


def load_config(cls: type[T], path: Path) -> T:
    """A recipe's config (``cls``, a dataclass of sections) from the YAML file ``path``;
    LearnerError naming the file and key for anything it cannot use."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise LearnerError(f"cannot read learner config {path}: {exc}") from exc
    if not isinstance(raw, Mapping):
        raise LearnerError(f"{path}: expected a mapping of sections at the top level.")
    return build_section(cls, raw, f"{path}")


def build_section(cls: type[T], raw: Mapping[str, Any], where: str) -> T:
    """``cls`` (a dataclass of config keys) from ``raw``; LearnerError naming ``where`` and the
    key for anything unknown or invalid. Nested sections are built the same way."""
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # cls is a dataclass
    raw = _resolve_aliases(cls, raw, where)
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise LearnerError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}.")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        default = getattr(cls(), name)
        if _is_section(default):
            if not isinstance(value, Mapping):
                raise LearnerError(f"{where}: {name} must be a mapping of its keys.")
            values[name] = build_section(type(default), value, f"{where}: {name}")
        else:
            values[name] = value
    try:
        return cls(**values)
    except (TypeError, ValueError, LearnerError) as exc:
        raise LearnerError(f"{where}: {exc}") from exc


def _resolve_aliases(cls: type, raw: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """``raw`` with the old names in ``cls.KEY_ALIASES`` (old → new) read as their new names."""
    aliases: Mapping[str, str] = getattr(cls, "KEY_ALIASES", {})
    if not any(old in raw for old in aliases):
        return raw
    resolved = dict(raw)
    for old, new in aliases.items():
        if old in resolved:
            if new in resolved:
                raise LearnerError(
                    f"{where}: {old} is the old name of {new}; set one of them, not both."
                )
            resolved[new] = resolved.pop(old)
    return resolved


def _is_section(value: object) -> bool:
    """A section is a dataclass whose keys all have defaults (a Duration value is not one)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return False
    return all(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in dataclasses.fields(value)
    )
