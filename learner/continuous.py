"""The continuous learner's shared pieces: where a recipe's data, versions and runs live, and the
metric every version carries for its data → live time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# ModelVersionEvent.metrics key: the newest attributed Reward (ms) in the version's new windows.
WINDOW_LAST_EVENT_METRIC = "window_last_attributed_ms"


@dataclass(frozen=True)
class LearnerPaths:
    lake: Path
    mds_root: Path  # mds/<dataset>/ per model
    models_root: Path  # models/<model>/<version>/ artifacts
    runs_root: Path  # training checkpoints, runs/<model>/<last new window>/
