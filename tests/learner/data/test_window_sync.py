"""A learner's windows and the published ones kept as one manifest (`sync_published`), and
published windows dropped by an erasure (`drop_published`): on a store on local disk, which
keeps the same keys and guarantees as the S3 store (tests/learner/data/
test_window_store_integration.py runs publishing against the stack's S3 server)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ground.store import Store
from learner.data.window_manifest import Manifest, read_manifest, write_manifest
from learner.data.window_store import (
    download_window,
    drop_published,
    link_into_cache,
    publish_manifest,
    publish_window,
    read_published_manifest,
    recover_published,
    sync_published,
)
from learner.errors import LearnerError
from tests.learner.data.test_window_store_integration import DATASET, _window


def _built(root: Path, seq: int) -> Manifest:
    """Window `seq` built under `root` (a learner's dataset directory) and in its manifest."""
    _, record = _window(root, seq)
    manifest = read_manifest(root, DATASET, "tab@1").with_window(record)
    write_manifest(root, manifest)
    return manifest


def _names(manifest: Manifest) -> list[str]:
    return [w.name for w in manifest.windows]


def test_a_new_learner_adopts_the_published_windows_and_publishes_its_own(tmp_path: Path) -> None:
    store = Store.at(tmp_path / "store")
    first = tmp_path / "first" / DATASET
    _built(first, 0)
    done = sync_published(store, first, DATASET, "tab@1")
    assert done.published == ("w000000-000000000000",) and not done.adopted
    published = read_published_manifest(store, DATASET, "tab@1")
    assert _names(published) == ["w000000-000000000000"]

    # A learner on another machine: nothing on its disk, the window by URI only.
    second = tmp_path / "second" / DATASET
    done = sync_published(store, second, DATASET, "tab@1")
    assert done.adopted == ("w000000-000000000000",) and not done.published
    assert read_manifest(second, DATASET, "tab@1") == published
    assert not (second / "w000000-000000000000").exists()
    # It builds the next window (seq after the adopted one) and publishes it.
    _built(second, 1)
    done = sync_published(store, second, DATASET, "tab@1")
    assert done.published == ("w000001-000000000001",)
    assert _names(read_published_manifest(store, DATASET, "tab@1")) == [
        "w000000-000000000000",
        "w000001-000000000001",
    ]
    again = sync_published(store, second, DATASET, "tab@1")
    assert again.adopted == again.published == again.dropped == ()


def test_a_window_dropped_from_the_store_is_dropped_by_every_learner(tmp_path: Path) -> None:
    store = Store.at(tmp_path / "store")
    builder, other = tmp_path / "builder" / DATASET, tmp_path / "other" / DATASET
    manifest = _built(builder, 0)
    _built(builder, 1)
    sync_published(store, builder, DATASET, "tab@1")
    sync_published(store, other, DATASET, "tab@1")
    erased = manifest.windows[0].files[0].key
    assert drop_published(store, {erased}) == [f"{DATASET}/w000000-000000000000"]
    assert store.files(f"{DATASET}/w000000-000000000000") == []
    # The builder has the window on disk and once published it: it drops it, never re-publishes.
    for root in (builder, other):
        done = sync_published(store, root, DATASET, "tab@1")
        assert done.dropped == ("w000000-000000000000",) and not done.published
        assert _names(read_manifest(root, DATASET, "tab@1")) == ["w000001-000000000001"]
    assert not (builder / "w000000-000000000000").exists()
    assert _names(read_published_manifest(store, DATASET, "tab@1")) == ["w000001-000000000001"]


def test_a_drop_cut_short_after_window_json_is_never_adopted_back(tmp_path: Path) -> None:
    store = Store.at(tmp_path / "store")
    root = tmp_path / "learner" / DATASET
    manifest = _built(root, 0)
    sync_published(store, root, DATASET, "tab@1")
    name = manifest.windows[0].name
    # Killed after deleting window.json, before the manifest: still listed, objects kept.
    store.delete(f"{DATASET}/{name}/window.json")
    assert _names(recover_published(store, DATASET, "tab@1")) == [name]
    assert store.files(f"{DATASET}/{name}")
    # The erasure run again finishes; then the leftovers are gone and nothing comes back.
    assert drop_published(store, {manifest.windows[0].files[0].key}) == [f"{DATASET}/{name}"]
    assert _names(recover_published(store, DATASET, "tab@1")) == []
    assert store.files(f"{DATASET}/{name}") == []


def test_windows_of_two_builders_of_one_dataset_are_refused(tmp_path: Path) -> None:
    store = Store.at(tmp_path / "store")
    one, two = tmp_path / "one" / DATASET, tmp_path / "two" / DATASET
    _built(one, 0)
    sync_published(store, one, DATASET, "tab@1")
    # Another learner built a window of the same lake files without seeing the store's.
    directory, record = _window(two / "elsewhere", 0)
    renamed = replace(record, name="w000000-ffffffffffff")
    (two / renamed.name).parent.mkdir(parents=True, exist_ok=True)
    directory.rename(two / renamed.name)
    write_manifest(two, Manifest(DATASET, "tab@1").with_window(renamed))
    with pytest.raises(LearnerError, match="already converted"):
        sync_published(store, two, DATASET, "tab@1")


def test_a_published_window_downloads_whole_and_a_built_one_links_into_the_cache(
    tmp_path: Path,
) -> None:
    store = Store.at(tmp_path / "store")
    directory, record = _window(tmp_path / "built", 0)
    publish_window(store, DATASET, directory)
    publish_manifest(store, Manifest(DATASET, "tab@1").with_window(record))
    fetched = download_window(store, DATASET, record.name, tmp_path / "fetched")
    built = sorted(p.relative_to(directory) for p in directory.rglob("*") if p.is_file())
    assert sorted(p.relative_to(fetched) for p in fetched.rglob("*") if p.is_file()) == built
    cache = tmp_path / "cache" / record.name
    link_into_cache(directory, cache)
    for relative in built:
        assert (cache / relative).stat().st_ino == (directory / relative).stat().st_ino
    (cache / built[0]).unlink()  # evicted from the cache: the window keeps its file
    assert (directory / built[0]).exists()
