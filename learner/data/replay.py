"""Replay planning: which MDS windows a training run mixes, in what proportions (DESIGN §8: the
new windows plus replay of older ones, as `streaming.Stream` proportions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from learner.data.window_manifest import WindowRecord, read_manifest
from learner.errors import LearnerError


@dataclass(frozen=True)
class StreamsConfig:
    """learner.data.replay.plan_streams options: the new windows and the replay mix."""

    replay_fraction: float = 0.3
    max_replay_windows: int = 8


@dataclass(frozen=True)
class StreamChoice:
    """One window in a training run's mix: its MDS directory and its sampling proportion."""

    window: str
    local: Path
    proportion: float
    samples: int


def plan_streams(
    mds_root: Path,
    dataset: str,
    reward_fn: str,
    *,
    new_windows: int = 1,
    replay_fraction: float = 0.3,
    max_replay_windows: int = 8,
) -> list[StreamChoice]:
    """The mix of a training run: the newest ``new_windows`` windows share
    ``1 - replay_fraction`` and up to ``max_replay_windows`` older ones share ``replay_fraction``,
    each group split in proportion to its windows' rows. Windows without samples are left out;
    with no older windows the new ones get everything. LearnerError when there is no data.
    """
    if not 0.0 <= replay_fraction < 1.0:
        raise LearnerError(f"replay_fraction={replay_fraction} must be in [0, 1).")
    manifest = read_manifest(mds_root / dataset, dataset, reward_fn)
    usable = [w for w in manifest.windows if w.samples > 0]
    if not usable:
        raise LearnerError(
            f"dataset {dataset!r} has no window with training rows; run build_window first."
        )
    new = usable[-new_windows:]
    old = usable[:-new_windows][-max_replay_windows:] if max_replay_windows > 0 else []
    share_new = 1.0 if not old else 1.0 - replay_fraction
    plan = _shares(mds_root / dataset, new, share_new)
    return plan + _shares(mds_root / dataset, old, 1.0 - share_new)


def _shares(root: Path, windows: Sequence[WindowRecord], total: float) -> list[StreamChoice]:
    rows = sum(w.rows for w in windows)
    return [StreamChoice(w.name, root / w.name, total * w.rows / rows, w.samples) for w in windows]
