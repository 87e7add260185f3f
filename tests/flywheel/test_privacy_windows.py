"""Erasure in the training data: the MDS windows built from Reward files holding a user's rows
are dropped, those files rewritten, and the next build converts them again without the user."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from flywheel.privacy import erase_training_data
from ground.store import Store
from learner.data.window_manifest import read_manifest
from learner.data.window_store import read_published_manifest, sync_published
from learner.recipes.gate.windows import build_window
from processors.lake.erasure import ErasureReport, UserKeys
from tests.learner.recipes.gate.gate_offline import write_reward_lake
from tests.learner.recipes.gate.test_learner_windows import FN, _rows

VICTIM, OTHER = "user:" + "a" * 32, "user:" + "b" * 32


def test_windows_with_the_users_rows_are_dropped_and_rebuilt_without_them(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    mixed = write_reward_lake(lake, _rows(100, 1), user_ids=[VICTIM, OTHER] * 50)
    write_reward_lake(lake, _rows(100, 2), first_offset=100, user_ids=[OTHER] * 100)
    first = build_window(lake, mds, "gate", FN)
    write_reward_lake(lake, _rows(100, 3), first_offset=200, user_ids=[OTHER] * 100)
    second = build_window(lake, mds, "gate", FN)
    assert first is not None and second is not None

    report = ErasureReport("e1", VICTIM)
    erase_training_data(lake, mds, UserKeys(VICTIM, frozenset(), frozenset()), report)

    assert report.windows_dropped == [f"gate/{first.name}"]
    assert report.rows_removed == {"rewards": 50}
    assert not (mds / "gate" / first.name).exists() and (mds / "gate" / second.name).is_dir()
    assert [w.name for w in read_manifest(mds / "gate", "gate", FN).windows] == [second.name]
    assert VICTIM not in pq.read_table(mixed).column("user_id").to_pylist()
    rebuilt = build_window(lake, mds, "gate", FN)  # the dropped window's files, without the user
    assert rebuilt is not None and rebuilt.files == first.files
    assert rebuilt.rows + rebuilt.heldout_rows == 150
    again = ErasureReport("e2", VICTIM)
    erase_training_data(lake, mds, UserKeys(VICTIM, frozenset(), frozenset()), again)
    assert again.windows_dropped == [] and again.rows_removed == {"rewards": 0}


def test_published_windows_with_the_users_rows_are_dropped_from_the_store_too(
    tmp_path: Path,
) -> None:
    lake, mds, store = tmp_path / "lake", tmp_path / "mds", Store.at(tmp_path / "windows")
    write_reward_lake(lake, _rows(100, 1), user_ids=[VICTIM, OTHER] * 50)
    first = build_window(lake, mds, "gate", FN)
    write_reward_lake(lake, _rows(100, 2), first_offset=100, user_ids=[OTHER] * 100)
    second = build_window(lake, mds, "gate", FN)
    assert first is not None and second is not None
    sync_published(store, mds / "gate", "gate", FN)
    elsewhere = tmp_path / "other-learner" / "gate"  # adopted both, on another machine
    sync_published(store, elsewhere, "gate", FN)

    report = ErasureReport("e1", VICTIM)
    erase_training_data(lake, mds, UserKeys(VICTIM, frozenset(), frozenset()), report, store)

    assert report.windows_dropped == [f"{store}/gate/{first.name}", f"gate/{first.name}"]
    assert [w.name for w in read_published_manifest(store, "gate", FN).windows] == [second.name]
    assert store.files(f"gate/{first.name}") == []
    # The other learner drops it at its next sync; neither publishes it again.
    assert sync_published(store, elsewhere, "gate", FN).dropped == (first.name,)
    assert sync_published(store, mds / "gate", "gate", FN).published == ()
