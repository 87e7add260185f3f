"""The in-memory loader: the streaming loader's mixing, world-size-independent order and resume
position, on real MDS windows."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import tiny_training

from learner.engine.loader import WindowStream, build_loader
from learner.engine.memory_loader import MemoryLoader, epoch_order
from learner.errors import TrainingDataError


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("memory-loader")
    return [
        tiny_training.write_window(root / "w0", 0, 48, seed=1),
        tiny_training.write_window(root / "w1", 1000, 16, seed=2),
    ]


def _ids(loader: MemoryLoader) -> list[list[int]]:
    return [[int(i) for i in batch["id"]] for batch in loader]


def test_an_epoch_sees_every_sample_once_in_a_seeded_order(windows: list[Path]) -> None:
    streams = [WindowStream(w) for w in windows]
    first = _ids(MemoryLoader(streams, 8, seed=3))
    assert len(first) == 8  # 64 samples, batches of 8
    assert sorted(i for batch in first for i in batch) == list(range(48)) + list(range(1000, 1016))
    assert first == _ids(MemoryLoader(streams, 8, seed=3))
    assert first != _ids(MemoryLoader(streams, 8, seed=4))

    loader = MemoryLoader(streams, 8, seed=3)
    _ids(loader)
    assert loader.epoch == 1 and _ids(loader) != first  # the next epoch: a new shuffle


def test_ranks_split_each_global_batch_of_the_single_process_order(windows: list[Path]) -> None:
    streams = [WindowStream(w) for w in windows]
    single = _ids(MemoryLoader(streams, 8, seed=0))
    ranks = [_ids(MemoryLoader(streams, 4, seed=0, rank=r, world_size=2)) for r in (0, 1)]
    assert [a + b for a, b in zip(*ranks, strict=True)] == single


def test_a_saved_position_resumes_at_another_world_size(windows: list[Path]) -> None:
    streams = [WindowStream(w) for w in windows]
    single = _ids(MemoryLoader(streams, 8, seed=0))
    two = MemoryLoader(streams, 4, seed=0, rank=1, world_size=2)
    batches = iter(two)
    next(batches), next(batches), next(batches)
    state = two.state_dict()
    assert state["sample_in_epoch"] == 24

    resumed = MemoryLoader(streams, 8, seed=0)
    resumed.load_state_dict(state)
    assert _ids(resumed) == single[3:]


def test_proportions_and_repeats_shape_the_epoch() -> None:
    sizes = [48, 16]
    order = epoch_order(sizes, [(0.25, None), (0.75, None)], seed=0, epoch=0)
    counts = Counter(int(w) for w in order[:, 0])
    assert counts == {0: 16, 1: 48}  # 64 samples in the epoch, 3 copies of the small window
    assert sorted(Counter(int(s) for w, s in order if w == 1).values()) == [3] * 16

    order = epoch_order(sizes, [(None, None), (None, 0.25)], seed=0, epoch=0)
    assert Counter(int(w) for w in order[:, 0]) == {0: 48, 1: 4}
    assert len({int(s) for w, s in order if w == 1}) == 4  # a subset, without repeats


def test_mixed_windows_batch_per_sample_columns(windows: list[Path]) -> None:
    """Samples pack 1-3 rows: columns of varying shape stay one array per sample."""
    batch = next(iter(MemoryLoader([WindowStream(w) for w in windows], 8, seed=0)))
    assert isinstance(batch["id"], np.ndarray) and batch["id"].shape == (8,)
    assert isinstance(batch["x"], list) and len(batch["x"]) == 8
    assert all(x.shape[0] == 1 + int(i) % 3 for x, i in zip(batch["x"], batch["id"], strict=True))


def test_auto_picks_memory_for_small_windows_and_errors_name_the_fix(
    windows: list[Path], tmp_path: Path
) -> None:
    assert isinstance(build_loader([WindowStream(windows[0])], 8, 0, kind="auto"), MemoryLoader)
    with pytest.raises(TrainingDataError, match=r"index\.json"):
        build_loader([WindowStream(tmp_path)], 8, 0, kind="memory")
    with pytest.raises(TrainingDataError, match="proportion on every window"):
        MemoryLoader([WindowStream(windows[0], proportion=0.5), WindowStream(windows[1])], 8, 0)
