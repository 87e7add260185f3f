"""Reading :class:`SimulatorConfig` from YAML and applying ``--set dotted.key=value`` overrides.

Both go through one strict builder: unknown keys and values of the wrong type raise
:class:`SimulatorError` naming the dotted key and the fix; keys a file leaves out keep their
defaults. The field annotations of the config dataclasses decide what a value may be.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from datetime import datetime
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from simulator.config import SimulatorConfig
from simulator.config_fields import config_error
from simulator.errors import SimulatorError

# The documented default configuration, shipped as package data.
DEFAULT_CONFIG_PATH = Path(str(resources.files("simulator") / "configs" / "default.yaml"))


def load_config(path: str | Path) -> SimulatorConfig:
    """The config in the YAML file ``path``; keys it leaves out keep their defaults.

    Raises :class:`SimulatorError` when the file is missing or not YAML, or when a key is
    unknown, a value has the wrong type, or a value is out of its bounds.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SimulatorError(f"cannot read simulator config {path}: {exc}; fix the path.") from exc
    except yaml.YAMLError as exc:
        raise SimulatorError(f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    return typing.cast(SimulatorConfig, _build(SimulatorConfig, data, ""))


def config_with_overrides(config: SimulatorConfig, overrides: Mapping[str, Any]) -> SimulatorConfig:
    """``config`` with each ``"dotted.key": value`` of ``overrides`` applied, validated again.

    A string value for a non-string key is parsed as YAML, so CLI text like ``"500"``,
    ``"0.3"`` or ``"[python, go]"`` works. Raises :class:`SimulatorError` naming the key when it
    is unknown or the value does not fit.
    """
    data = config_to_dict(config)
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = data
        for depth, part in enumerate(parents):
            child = node.get(part)
            if not isinstance(child, dict):
                raise _unknown(".".join(parents[: depth + 1]), node)
            node = child
        if leaf not in node:
            raise _unknown(dotted, node)
        if isinstance(value, str) and not isinstance(node[leaf], str):
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError as exc:
                raise config_error(dotted, f"{value!r} is not a YAML value ({exc})") from exc
        node[leaf] = value
    return typing.cast(SimulatorConfig, _build(SimulatorConfig, data, ""))


def config_to_dict(config: Any) -> dict[str, Any]:
    """A config section as plain YAML-ready data (dicts, lists, scalars)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = config_to_dict(value)
        elif isinstance(value, tuple):
            out[f.name] = list(value)
        elif isinstance(value, Mapping):
            out[f.name] = dict(value)
        else:
            out[f.name] = value
    return out


def _unknown(key: str, siblings: Mapping[str, Any]) -> SimulatorError:
    return config_error(key, f"is not a known key; valid keys here: {', '.join(sorted(siblings))}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, data: Any, path: str) -> Any:
    """An instance of the config dataclass ``cls`` from ``data``, checked key by key."""
    if not isinstance(data, Mapping):
        where = path or "the top level"
        raise SimulatorError(
            f"simulator config: {where} must be a mapping of keys, not {data!r}; "
            "see simulator/configs/default.yaml."
        )
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            raise _unknown(_join(path, str(key)), dict.fromkeys(names))
    hints = _hints(cls)
    values = {key: _coerce(hints[key], value, _join(path, key)) for key, value in data.items()}
    return cls(**values)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _coerce(annotation: Any, value: Any, key: str) -> Any:
    """``value`` converted to ``annotation``, or a SimulatorError naming ``key``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if dataclasses.is_dataclass(annotation):
        return _build(typing.cast(type, annotation), value, key)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise config_error(key, f"expected a list, got {value!r}")
        return tuple(_coerce(args[0], item, f"{key}[{i}]") for i, item in enumerate(value))
    if origin is Mapping:
        if not isinstance(value, Mapping):
            raise config_error(key, f"expected a mapping of {args[0].__name__} keys, got {value!r}")
        return MappingProxyType(
            {_coerce(args[0], k, key): _coerce(args[1], v, f"{key}.{k}") for k, v in value.items()}
        )
    return _coerce_scalar(annotation, value, key)


def _coerce_scalar(annotation: Any, value: Any, key: str) -> Any:
    # bool is a subclass of int in Python; a YAML `yes` must not become 1 users.
    if annotation is bool and isinstance(value, bool):
        return value
    if annotation is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if annotation is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if annotation is str and isinstance(value, str):
        return value
    if annotation is str and isinstance(value, datetime):
        return value.isoformat()  # YAML parses an unquoted timestamp; keep it as ISO text
    expected = getattr(annotation, "__name__", str(annotation))
    raise config_error(key, f"expected {expected}, got {value!r} ({type(value).__name__})")
