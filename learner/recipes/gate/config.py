"""The gate recipe's configuration: one YAML file, one typed section per stage.

``configs/default.yaml`` holds every key with its default; a file passed with
``flywheel learn --config`` may set any subset (learner.config.load_config). Unknown keys and
wrong values are errors that name the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from learner.config import load_config
from learner.data.replay import StreamsConfig
from learner.engine.trainer import TrainerConfig
from learner.errors import LearnerError
from learner.recipes.gate.holdout import HoldoutSplit
from learner.recipes.gate.objective import ObjectiveConfig
from learner.recipes.gate.off_policy_check import OffPolicyCheckConfig
from model_registry.canary import CanaryConfig
from policies.gate_net import GateNetConfig
from streams.topics import REWARDS_TOPIC

DEFAULT_CONFIG_PATH = Path(__file__).parent / "configs" / "default.yaml"


@dataclass(frozen=True)
class WindowsConfig:
    """learner.recipes.gate.windows.build_window options."""

    topic: str = REWARDS_TOPIC
    rows_per_sample: int = 64
    compression: str | None = None


@dataclass(frozen=True)
class LoopConfig:
    """When a new version is trained."""

    min_new_rows: int = 4000  # training rows (held-out excluded) in windows not yet trained on
    heldout_windows: int = 4  # the release check uses the held-out rows of this many newest windows
    poll_s: float = 2.0


@dataclass(frozen=True)
class LearnerConfig:
    """Every section of a gate recipe config file (``configs/default.yaml``)."""

    # ``gate:`` was the release check's section before "gate" meant the model only; still read.
    KEY_ALIASES: ClassVar[Mapping[str, str]] = {"gate": "release_check"}

    reward_fn: str = "tab@1"
    windows: WindowsConfig = field(default_factory=WindowsConfig)
    holdout: HoldoutSplit = field(default_factory=HoldoutSplit)
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    policy: GateNetConfig = field(default_factory=GateNetConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    train: TrainerConfig = field(default_factory=TrainerConfig)  # save_dir, init_from: per run
    release_check: OffPolicyCheckConfig = field(default_factory=OffPolicyCheckConfig)
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
