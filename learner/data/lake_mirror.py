"""A learner's local copy of the lake topics it reads, when the lake is in an object store.

A learner reads whole lake files, and reads them again: the gate re-reads a window's files for
its reward model and its held-out rows, point-in-time features scan their source topics for
every window, the canary baseline reads the newest windows' files. So a learner on another
machine than the sink keeps a mirror of the topics it reads, below its own directory, and its
readers work on that mirror exactly as on a lake on disk (`LearnerPaths.lake`):

- a lake file is an immutable object once visible (its name is the commit of its offset range,
  `contracts.lake_layout`), so a mirrored file of the same key, size and modification time is
  the object itself and is not fetched again;
- an object gone from the store (compaction's superseded inputs, retention) leaves the mirror;
  one rewritten in place (an erasure) has another size or time and is fetched again;
- each fetch is a local atomic write (`ground.durable`), so a learner killed mid-sync leaves
  whole files only, and the next sync finishes the job.

Learners on one machine share the mirror (the gate's and the agent's both read the Rewards): a
sync holds an exclusive `flock` on `<mirror>/.sync.lock`, so one fetch never meets another's
temporary file. Only lake files are mirrored: a writer's temporary objects never are. The mirror
holds what the lake's retention keeps of those topics; it is a cache of files the learner reads
in full anyway.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from contracts.lake_layout import parse_file_name
from ground.durable import write_durably
from ground.store import Store


@dataclass(frozen=True)
class MirrorSync:
    """What one `sync_mirror` changed: files fetched (and their bytes), files removed."""

    fetched: int = 0
    bytes: int = 0
    removed: int = 0


def sync_mirror(store: Store, directory: Path, topics: Iterable[str]) -> MirrorSync:
    """Make `directory/<topic>/` hold exactly the lake files of each of `topics` in `store`
    (module docstring). OSError from the store propagates; what was fetched before it stays."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".sync.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another learner's sync: a few files, then ours
        try:
            return _sync(store, directory, topics)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sync(store: Store, directory: Path, topics: Iterable[str]) -> MirrorSync:
    fetched = size = removed = 0
    for topic in dict.fromkeys(topics):
        wanted = {
            f.key: f
            for f in store.files(topic)
            if (found := parse_file_name(f.key)) is not None and found.topic == topic
        }
        have: dict[str, Path] = {}
        if (directory / topic).is_dir():
            for orphan in (directory / topic).rglob(".*.tmp"):  # a fetch killed mid-write
                orphan.unlink(missing_ok=True)
            have = {
                p.relative_to(directory).as_posix(): p
                for p in (directory / topic).rglob("*.parquet")
            }
        for key, stored in sorted(wanted.items()):
            local = have.get(key)
            if local is not None and _same(local, stored.size, stored.mtime_ns):
                continue
            data = store.read_bytes(key)
            target = directory / key
            write_durably(target, data)
            if stored.mtime_ns is not None:
                os.utime(target, ns=(stored.mtime_ns, stored.mtime_ns))
            fetched += 1
            size += len(data)
        for key, local in have.items():
            if key not in wanted:
                local.unlink(missing_ok=True)
                removed += 1
    return MirrorSync(fetched, size, removed)


def _same(local: Path, size: int, mtime_ns: int | None) -> bool:
    stat = local.stat()
    return stat.st_size == size and (mtime_ns is None or stat.st_mtime_ns == mtime_ns)
