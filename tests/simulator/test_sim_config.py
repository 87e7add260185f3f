"""simulator.config / config_loading: defaults, the example file, strict loading, overrides."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest
import yaml

from simulator import (
    DEFAULT_CONFIG_PATH,
    SimulatorConfig,
    SimulatorError,
    config_to_dict,
    config_with_overrides,
    load_config,
)
from simulator.config import HiddenModelConfig, UsersConfig

DEFAULT_YAML = DEFAULT_CONFIG_PATH


def _keys(data: dict[str, object], prefix: str = "") -> set[str]:
    out = set()
    for key, value in data.items():
        out.add(prefix + key)
        if isinstance(value, dict):
            out |= _keys(value, f"{prefix}{key}.")
    return out


def test_default_yaml_loads_to_the_defaults() -> None:
    assert load_config(DEFAULT_YAML) == SimulatorConfig()


def test_default_yaml_lists_every_parameter() -> None:
    in_file = _keys(yaml.safe_load(DEFAULT_YAML.read_text(encoding="utf-8")))
    assert in_file == _keys(config_to_dict(SimulatorConfig()))


def test_partial_file_keeps_other_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("seed: 3\nusers:\n  n_users: 50\n", encoding="utf-8")
    config = load_config(path)
    assert (config.seed, config.users.n_users) == (3, 50)
    assert config.hidden_model == HiddenModelConfig()


def test_empty_file_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("", encoding="utf-8")
    assert load_config(path) == SimulatorConfig()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("sed: 1\n", "'sed'"),
        ("users:\n  n_user: 5\n", "'users.n_user'"),
        ("hidden_model:\n  weights:\n    invokd: 1.0\n", "'hidden_model.weights.invokd'"),
    ],
)
def test_unknown_keys_are_named(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SimulatorError, match=f"{key}: is not a known key; valid keys here") as e:
        load_config(path)
    assert "--set" in str(e.value)


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("seed: seven\n", "'seed'", "expected int"),
        ("seed: 1.5\n", "'seed'", "expected int"),
        ("users:\n  n_users: true\n", "'users.n_users'", "expected int"),
        ("users:\n  languages: python\n", "'users.languages'", "expected a list"),
        (
            "users:\n  language_weights: [1, x]\n",
            r"'users.language_weights\[1\]'",
            "expected float",
        ),
        ("hidden_model:\n  base_logit: '-1'\n", "'hidden_model.base_logit'", "expected float"),
        (
            "hidden_model:\n  language_bias: 3\n",
            "'hidden_model.language_bias'",
            "expected a mapping",
        ),
        ("policy:\n  name: 3\n", "'policy.name'", "expected str"),
    ],
)
def test_wrong_types_are_named(tmp_path: Path, text: str, key: str, expected: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SimulatorError, match=f"{key}: {expected}"):
        load_config(path)


def test_section_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("users: 3\n", encoding="utf-8")
    with pytest.raises(SimulatorError, match="users must be a mapping"):
        load_config(path)


def test_ints_are_accepted_for_floats(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("hidden_model:\n  base_logit: -1\n", encoding="utf-8")
    value = load_config(path).hidden_model.base_logit
    assert value == -1.0
    assert isinstance(value, float)


def test_unquoted_yaml_timestamp_becomes_iso_text(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("sessions:\n  start_time: 2025-03-01T10:00:00Z\n", encoding="utf-8")
    assert load_config(path).sessions.start_time == "2025-03-01T10:00:00+00:00"


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(SimulatorError, match="cannot read simulator config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("users: [\n", encoding="utf-8")
    with pytest.raises(SimulatorError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize(
    ("overrides", "key", "problem"),
    [
        ({"policy.exploration_floor": 0.5}, "policy.exploration_floor", "must be < 0.5"),
        ({"users.privacy_mode_fraction": 1.5}, "users.privacy_mode_fraction", "must be ≤ 1"),
        ({"users.language_weights": [1.0]}, "users.language_weights", "one weight"),
        ({"users.languages": ["go", "go"]}, "users.languages", "distinct"),
        ({"seed": -1}, "seed", "must be ≥ 0"),
        ({"fleet_id": "a/b"}, "fleet_id", "without '/'"),
        ({"sessions.start_time": "yesterday"}, "sessions.start_time", "ISO 8601"),
        ({"sessions.start_time": "2025-01-01T00:00:00"}, "sessions.start_time", "UTC offset"),
    ],
)
def test_bounds_are_checked(overrides: dict[str, object], key: str, problem: str) -> None:
    with pytest.raises(SimulatorError, match=f"'{key}': .*{problem}"):
        config_with_overrides(SimulatorConfig(), overrides)


def test_every_language_needs_a_bias() -> None:
    with pytest.raises(SimulatorError, match=r"'hidden_model\.language_bias': has no bias for"):
        config_with_overrides(
            SimulatorConfig(),
            {"users.languages": ["python", "zig"], "users.language_weights": [1, 1]},
        )


def test_overrides_parse_cli_text() -> None:
    config = config_with_overrides(
        SimulatorConfig(),
        {
            "seed": "11",
            "users.n_users": "200",
            "users.ides": "[vscode, zed]",
            "users.ide_weights": "[0.5, 0.5]",
            "hidden_model.weights.invoked": "2",
            "hidden_model.language_bias.go": "-1.5",
            "policy.model_name": "123",  # a str field keeps the text as is
            "sessions.start_time": "now",
        },
    )
    assert config.seed == 11
    assert config.users.n_users == 200
    assert config.users.ides == ("vscode", "zed")
    assert config.hidden_model.weights.invoked == 2.0
    assert config.hidden_model.language_bias["go"] == -1.5
    assert config.policy.model_name == "123"
    assert config.sessions.start_time == "now"
    assert isinstance(config.hidden_model.language_bias, MappingProxyType)


def test_overrides_leave_the_original_alone() -> None:
    base = SimulatorConfig()
    assert config_with_overrides(base, {}) == base
    assert config_with_overrides(base, {"seed": 1}) != base
    assert base.seed == 7


@pytest.mark.parametrize("key", ["sed", "users.nusers", "users.n_users.x", "nope.n_users"])
def test_override_of_unknown_key_is_named(key: str) -> None:
    with pytest.raises(SimulatorError, match="is not a known key"):
        config_with_overrides(SimulatorConfig(), {key: 1})


def test_override_with_bad_text_names_key() -> None:
    with pytest.raises(SimulatorError, match=r"'users\.n_users': expected int, got 'many'"):
        config_with_overrides(SimulatorConfig(), {"users.n_users": "many"})
    with pytest.raises(SimulatorError, match=r"'users\.ides': .*YAML"):
        config_with_overrides(SimulatorConfig(), {"users.ides": "[unclosed"})


def test_sections_can_be_built_directly() -> None:
    with pytest.raises(SimulatorError, match=r"'users\.n_users': 0 must be ≥ 1"):
        UsersConfig(n_users=0)


@pytest.mark.parametrize(
    "path", sorted(DEFAULT_CONFIG_PATH.parent.glob("*.yaml")), ids=lambda p: p.name
)
def test_every_shipped_config_loads(path: Path) -> None:
    config = load_config(path)
    assert config.users.n_users > 0
