"""The learner's recipe configuration: one YAML file, one typed section per stage.

``learner/recipes/gate/configs/default.yaml`` holds every key with its default; a file passed with
``flywheel learn --config`` may set any subset. Unknown keys and wrong values are errors that
name the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from learner.engine.trainer import TrainerConfig
from learner.errors import LearnerError
from learner.gate import GateConfig
from learner.recipes.gate.holdout import HoldoutSplit
from learner.recipes.gate.objective import ObjectiveConfig
from model_registry.canary import CanaryConfig
from policies.gate_net import GateNetConfig
from streams.topics import REWARDS_TOPIC

DEFAULT_CONFIG_PATH = Path(__file__).parent / "recipes" / "gate" / "configs" / "default.yaml"
T = TypeVar("T")


@dataclass(frozen=True)
class WindowsConfig:
    """learner.recipes.gate.windows.build_window options."""

    topic: str = REWARDS_TOPIC
    rows_per_sample: int = 64
    compression: str | None = None


@dataclass(frozen=True)
class StreamsConfig:
    """learner.data.replay.plan_streams options: the new windows and the replay mix."""

    replay_fraction: float = 0.3
    max_replay_windows: int = 8


@dataclass(frozen=True)
class LoopConfig:
    """When a new version is trained."""

    min_new_rows: int = 4000  # training rows (held-out excluded) in windows not yet trained on
    heldout_windows: int = 4  # the gate evaluates on held-out rows of this many newest windows
    poll_s: float = 2.0


@dataclass(frozen=True)
class LearnerConfig:
    """Every section of a learner config file."""

    reward_fn: str = "tab@1"
    windows: WindowsConfig = field(default_factory=WindowsConfig)
    holdout: HoldoutSplit = field(default_factory=HoldoutSplit)
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    policy: GateNetConfig = field(default_factory=GateNetConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    train: TrainerConfig = field(default_factory=TrainerConfig)  # save_dir, init_from: per run
    gate: GateConfig = field(default_factory=GateConfig)
    canary: CanaryConfig = field(default_factory=CanaryConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    # Declared feature-store features (docs/features.md) appended to the policy input, offline point
    # in time and online at serving (learner.recipes.gate.features); empty: the context vector only.
    features: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.features, str) or not isinstance(self.features, (list, tuple)):
            raise LearnerError(f"features must be a list of feature names, got {self.features!r}.")
        if self.features:
            # loads the declarations
            from learner.recipes.gate.features import validate_feature_names

            object.__setattr__(self, "features", validate_feature_names(self.features))
        else:
            object.__setattr__(self, "features", ())

    @classmethod
    def load(cls, path: Path = DEFAULT_CONFIG_PATH) -> LearnerConfig:
        """Read ``path``; LearnerError naming the file and key for anything it cannot use."""
        return load_config(cls, path)


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


def _is_section(value: object) -> bool:
    """A section is a dataclass whose keys all have defaults (a Duration value is not one)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return False
    return all(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in dataclasses.fields(value)
    )
