"""MDS windows in an object store: publish a window built on local disk, train on it anywhere.

    <windows>/<dataset>/manifest.json
    <windows>/<dataset>/<window>/index.json, shard.00000.mds[.zstd], ..., window.json

A learner builds each window on its own disk (`learner.data.windows`: temp directory, fsync,
rename) and then publishes it. There is no rename in an object store, so publishing uses a
commit record written last:

1. upload every file of the window but `window.json` (immutable objects with deterministic
   names: the window's name hashes the lake files it holds);
2. upload `window.json`: from then on the window is complete;
3. replace `manifest.json` (one PUT, atomic) with the manifest that lists it.

A reader trusts the manifest only. A crash before step 2 leaves a prefix without `window.json`,
which `recover_published` deletes. A crash between 2 and 3 leaves a complete window outside the
manifest, which it adopts, as `learner.data.windows.recover` does on disk. Republishing the same
window uploads the same objects again, so a retry is harmless. One writer per dataset, as on disk:
the continuous learner that builds the windows (on the store that is a rule, not a lock:
`sync_published` refuses a published window whose lake files a local one holds too).

A learner keeps its local windows and the published ones in one manifest (`sync_published`, under
the dataset's lock, before its first build and after each build): it adopts published windows it
lacks (a learner on a new machine: their files stay in the store and training streams them), and
publishes the ones it built. The store is the authority for what was published: a window the
learner once published or adopted (named in its local `published.json`) that the store's manifest
no longer lists was dropped there (`drop_published`, a privacy erasure run on another machine), so
the learner drops it too instead of publishing it again.

Training from the store: `remote_streams` gives `WindowStream`s with a remote URI and a directory
in a local cache. StreamingDataset then downloads `index.json` and the shards it needs into that
cache, and `cache_limit` bounds it (`learner.engine.loader.build_loader`). streaming reaches S3
through boto3, which reads the variables of `StorageLocation.environment` (endpoint, key pair,
the checksum settings S3Proxy needs): `streaming_from` sets them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence, Set
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from contracts.lake_layout import topic_dirs
from ground.durable import write_durably
from ground.storage import StorageLocation
from ground.store import Store
from learner.data.window_erasure import FileKey
from learner.data.window_manifest import (
    MANIFEST_NAME,
    WINDOW_RECORD_NAME,
    Manifest,
    WindowRecord,
    manifest_json,
    parse_manifest,
    read_manifest,
    write_manifest,
)
from learner.engine.loader import WindowStream


@dataclass(frozen=True)
class Published:
    """What `publish_window` uploaded: files and bytes."""

    files: int
    bytes: int


def publish_window(store: Store, dataset: str, directory: Path) -> Published:
    """Upload the window at `directory` (built on disk, complete) under `<dataset>/<name>/`,
    `window.json` last (module docstring). OSError from the store propagates; a retry
    uploads the same objects again."""
    record = directory / WINDOW_RECORD_NAME
    if not record.is_file():
        raise FileNotFoundError(f"{directory} has no {WINDOW_RECORD_NAME}: not a finished window")
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p != record)
    size = 0
    for path in [*files, record]:
        key = f"{dataset}/{directory.name}/{path.relative_to(directory).as_posix()}"
        size += store.write_bytes(key, path.read_bytes())
    return Published(len(files) + 1, size)


def publish_manifest(store: Store, manifest: Manifest) -> None:
    """Replace `<dataset>/manifest.json` in the store with `manifest` (one atomic PUT)."""
    store.write_bytes(f"{manifest.dataset}/{MANIFEST_NAME}", manifest_json(manifest).encode())


def read_published_manifest(store: Store, dataset: str, reward_fn: str) -> Manifest:
    """The dataset's manifest in the store (empty when there is none yet); LearnerError for a
    manifest of another dataset or reward function, or an unreadable one."""
    key = f"{dataset}/{MANIFEST_NAME}"
    try:
        text = store.read_bytes(key).decode()
    except FileNotFoundError:
        return Manifest(dataset, reward_fn)
    return parse_manifest(text, f"{store}/{key}", dataset, reward_fn)


def recover_published(store: Store, dataset: str, reward_fn: str) -> Manifest:
    """Finish what a crashed publish or drop left: delete the objects of windows without
    `window.json` that the manifest does not list, adopt complete windows missing from the
    manifest (module docstring)."""
    manifest = read_published_manifest(store, dataset, reward_fn)
    by_window: dict[str, list[str]] = {}
    for stored in store.files(dataset):
        parts = stored.key.split("/")
        if len(parts) >= 3:
            by_window.setdefault(parts[1], []).append(stored.key)
    known = {w.name for w in manifest.windows}
    adopted = manifest
    for name, keys in sorted(by_window.items()):
        record_key = f"{dataset}/{name}/{WINDOW_RECORD_NAME}"
        if record_key not in keys and name not in known:
            for key in keys:
                store.delete(key)
        elif name not in known:
            record = WindowRecord.from_json(json.loads(store.read_bytes(record_key)))
            adopted = adopted.with_window(record)
    if adopted is not manifest:
        publish_manifest(store, adopted)
    return adopted


PUBLISHED_NAME = "published.json"  # local: the windows this learner knows are in the store


@dataclass(frozen=True)
class WindowSync:
    """What one `sync_published` did: windows adopted, published, and dropped locally."""

    adopted: tuple[str, ...] = ()
    published: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


def sync_published(
    store: Store, root: Path, dataset: str, reward_fn: str, *, recover: bool = True
) -> WindowSync:
    """Bring the windows of `dataset` on disk (`root`) and in `store` to one manifest (module
    docstring); call it under `learner.data.windows.dataset_lock(root)`. `recover`: first
    finish what a crashed publish left (`recover_published`, a listing of every object of the
    dataset): once per learner start is enough, as only this learner publishes the dataset;
    later syncs read the manifest only. LearnerError when a published window holds lake files
    a local one holds too (two learners built windows of one dataset: run one per dataset)."""
    if recover:
        published = recover_published(store, dataset, reward_fn)
    else:
        published = read_published_manifest(store, dataset, reward_fn)
    local = read_manifest(root, dataset, reward_fn)
    on_store = {w.name for w in published.windows}
    known = _published_names(root)
    # Gone from the store: dropped there if this learner saw it published, or if it never had
    # its files (adopted, then the store lost it); else built here and not published yet.
    dropped = [
        w.name
        for w in local.windows
        if w.name not in on_store
        and (w.name in known or not (root / w.name / WINDOW_RECORD_NAME).exists())
    ]
    merged = replace(local, windows=tuple(w for w in local.windows if w.name not in dropped))
    held = {w.name for w in merged.windows}
    adopted = [w for w in published.windows if w.name not in held]
    for window in adopted:
        merged = merged.with_window(window)
    fresh = [w.name for w in merged.windows if w.name not in on_store]
    for name in fresh:
        publish_window(store, dataset, root / name)
    if fresh:
        publish_manifest(store, merged)
    names = {w.name for w in merged.windows}
    if names != known:  # before the local manifest: a crash in between adopts them again
        root.mkdir(parents=True, exist_ok=True)
        write_durably(root / PUBLISHED_NAME, json.dumps(sorted(names)).encode())
    if merged != local:
        write_manifest(root, merged)
    for name in dropped:  # once the manifest no longer lists them, as `drop_windows` does
        shutil.rmtree(root / name, ignore_errors=True)
    return WindowSync(tuple(w.name for w in adopted), tuple(fresh), tuple(dropped))


def _published_names(root: Path) -> set[str]:
    path = root / PUBLISHED_NAME
    return set(json.loads(path.read_text())) if path.exists() else set()


def drop_published(store: Store, files: Set[FileKey]) -> list[str]:
    """Drop every published window (of any dataset in `store`) holding one of the lake
    `files`: the manifest without it first (readers stop seeing it), then its objects. Returns
    `<dataset>/<window>` of each. Crash safe: `window.json` goes first (a window without it
    is never adopted again), then the manifest without the window, then its other objects
    (which `recover_published` deletes too, once the manifest no longer lists them); an
    erasure run again before the manifest changed finds the window and finishes."""
    dropped: list[str] = []
    for dataset in topic_dirs(store):  # one delimiter listing: the datasets, not their shards
        key = f"{dataset}/{MANIFEST_NAME}"
        try:
            text = store.read_bytes(key).decode()
        except FileNotFoundError:
            continue
        manifest = parse_manifest(text, f"{store}/{key}", dataset, json.loads(text)["reward_fn"])
        gone = [w.name for w in manifest.windows if any(f.key in files for f in w.files)]
        if not gone:
            continue
        for name in gone:
            store.delete(f"{dataset}/{name}/{WINDOW_RECORD_NAME}")
        kept = tuple(w for w in manifest.windows if w.name not in gone)
        publish_manifest(store, replace(manifest, windows=kept))
        for name in gone:
            for stored_file in store.files(f"{dataset}/{name}"):
                store.delete(stored_file.key)
            dropped.append(f"{dataset}/{name}")
    return dropped


def remote_streams(
    store: Store,
    dataset: str,
    windows: Sequence[str],
    cache: Path,
    proportions: Sequence[float | None] | None = None,
) -> list[WindowStream]:
    """One `WindowStream` per window name: remote `<store>/<dataset>/<name>`, local
    `<cache>/<dataset>/<name>` (created on demand by streaming)."""
    shares = list(proportions) if proportions is not None else [None] * len(windows)
    return [
        WindowStream(
            local=cache / dataset / name,
            proportion=share,
            remote=store.location.child(dataset, name).uri,
        )
        for name, share in zip(windows, shares, strict=True)
    ]


def download_window(store: Store, dataset: str, name: str, directory: Path) -> Path:
    """Every file of the published window `name` in `directory` (those missing or of another
    size are fetched, each an atomic local write); returns `directory`. For readers that need
    the whole window on disk (`streaming.LocalDataset`); training streams instead."""
    prefix = f"{dataset}/{name}/"
    for stored in store.files(prefix):
        target = directory / stored.key[len(prefix) :]
        if not target.exists() or target.stat().st_size != stored.size:
            data = store.read_bytes(stored.key)
            write_durably(target, data)
    return directory


def link_into_cache(window: Path, cache: Path) -> None:
    """Hard-link the files of a window on disk into its cache directory (those missing there):
    streaming finds them and downloads nothing, and evicting them deletes the links only. A
    cache on another filesystem gets copies."""
    for path in window.rglob("*"):
        if path.is_file():
            target = cache / path.relative_to(window)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(path, target)
                except OSError:  # another filesystem (EXDEV), or no hard links there
                    shutil.copy2(path, target)


@contextmanager
def streaming_from(location: StorageLocation) -> Iterator[None]:
    """Set `location.environment()` in this process while the block runs (streaming reads it
    when a dataset starts downloading), then restore the previous values."""
    env = location.environment()
    before: Mapping[str, str | None] = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
