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
the continuous learner that builds the windows (the store has no lock; S3Proxy 2.6.0 ignores
conditional PUTs).

Training from the store: `remote_streams` gives `WindowStream`s with a remote URI and a directory
in a local cache. StreamingDataset then downloads `index.json` and the shards it needs into that
cache, and `cache_limit` bounds it (`learner.engine.loader.build_loader`). streaming reaches S3
through boto3, which reads the variables of `StorageLocation.environment` (endpoint, key pair,
the checksum settings S3Proxy needs): `streaming_from` sets them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ground.storage import StorageLocation
from ground.store import Store
from learner.data.window_manifest import (
    MANIFEST_NAME,
    WINDOW_RECORD_NAME,
    Manifest,
    WindowRecord,
    manifest_json,
    parse_manifest,
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
    """Finish what a crashed publish left: delete the objects of windows without
    `window.json`, adopt complete windows missing from the manifest (module docstring)."""
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
        if record_key not in keys:
            for key in keys:
                store.delete(key)
        elif name not in known:
            record = WindowRecord.from_json(json.loads(store.read_bytes(record_key)))
            adopted = adopted.with_window(record)
    if adopted is not manifest:
        publish_manifest(store, adopted)
    return adopted


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
