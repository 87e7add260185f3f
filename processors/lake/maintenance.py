"""The lake's maintenance lock: compaction, erasure and retention never interleave.

Each of them reads files and then replaces or deletes them; interleaved, an erasure could
rewrite a file that a compaction already read, and the merged file would bring the erased rows
back. On local disk they all hold an exclusive `flock` on `<lake>/.maintenance.lock` (a dot
name: no view or scan ever reads it). In an object store, which has no flock, they hold a lease
on the object of that name instead (`ground.lease`: conditional PUTs, renewed while held), and
check it is still theirs before each file they replace (`still_held`). The sink does not take
it: it only adds files above every existing range.

Taking the lock first finishes what a crashed compaction left: it deletes superseded files
(`contracts.lake_layout`), so the holder sees each offset in exactly one file.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import wraps
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from contracts.lake_layout import scan_topic, topic_dirs
from ground.lease import LeaseError, StoreLease
from ground.store import Store
from processors.lake.errors import MaintenanceLockError
from processors.lake.resume import delete_superseded

LOCK_NAME = ".maintenance.lock"
DEFAULT_WAIT_S = 3600.0
_POLL_S = 0.2
log = logging.getLogger(__name__)
# Locks held per thread ((lake directory or store URI, thread) -> [fd or lease, depth]):
# compaction runs retention under its own lock, and a second flock on another descriptor of the
# same file would wait for itself. Another thread opens its own descriptor (or lease), so it
# waits like another process.
_held: dict[tuple[Path | str, int], list[Any]] = {}
_guard = threading.Lock()
P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def maintenance_lock(lake: Path | Store, *, wait_s: float = DEFAULT_WAIT_S) -> Iterator[None]:
    """Hold `<lake>/.maintenance.lock` (re-entrant within a thread), after deleting the
    superseded files a crashed compaction left. Waits up to `wait_s` for another holder, then
    raises MaintenanceLockError. A missing local `lake` holds nothing to protect: no lock then.
    A lake in an object store holds a lease (module docstring)."""
    store = Store.at(lake)
    root = store.local_dir
    if root is None:
        with _reentrant(store.location.uri, lambda: _leased(store, wait_s)):
            yield
        return
    if not root.is_dir():
        yield
        return
    with _reentrant(root.absolute(), lambda: _flocked(root.absolute(), wait_s)):
        yield


@contextmanager
def _reentrant(lock: Path | str, take: Callable[[], AbstractContextManager[Any]]) -> Iterator[None]:
    """Hold `take()` once per thread and `lock`: a nested hold only counts, as one flock on two
    descriptors of one file would wait for itself."""
    key = (lock, threading.get_ident())
    with _guard:
        held = _held.get(key)
        if held is not None:
            held[1] += 1
    if held is not None:
        try:
            yield
        finally:
            with _guard:
                held[1] -= 1
        return
    with take() as handle:
        with _guard:
            _held[key] = [handle, 1]
        try:
            yield
        finally:
            with _guard:
                del _held[key]


@contextmanager
def _flocked(root: Path, wait_s: float) -> Iterator[int]:
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, root, wait_s)
        try:
            recover_superseded(root)
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def _leased(store: Store, wait_s: float) -> Iterator[StoreLease]:
    lease = StoreLease(store, LOCK_NAME)
    try:
        lease.acquire(wait_s)
    except LeaseError as exc:
        raise MaintenanceLockError(str(exc)) from exc
    try:
        recover_superseded(store)
        yield lease
    finally:
        lease.release()


def still_held(lake: Path | Store) -> None:
    """Before replacing or deleting a file under the lock: MaintenanceLockError when this
    thread's lease on an object-store `lake` was taken over (it stalled past its time to live;
    a flock cannot be lost)."""
    store = Store.at(lake)
    if store.local_dir is None:
        held = _held.get((store.location.uri, threading.get_ident()))
        if held is not None:
            try:
                held[0].check()
            except LeaseError as exc:
                raise MaintenanceLockError(str(exc)) from exc


def holds_maintenance_lock(
    function: Callable[Concatenate[Path | Store, P], R],
) -> Callable[Concatenate[Path | Store, P], R]:
    """Decorate a function whose first argument is the lake: it runs holding the lock."""

    @wraps(function)
    def locked(lake: Path | Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with maintenance_lock(lake):
            return function(lake, *args, **kwargs)

    return locked


def _acquire(fd: int, lake: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    warned = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise MaintenanceLockError(
                    f"{lake / LOCK_NAME} stayed locked for {wait_s:.0f}s by another compaction, "
                    "erasure or retention; wait for it to finish and run this again"
                ) from None
            if not warned:
                log.warning("waiting for %s: another lake maintenance is running", lake / LOCK_NAME)
                warned = True
            time.sleep(_POLL_S)


def recover_superseded(lake: Path | Store) -> int:
    """Delete every superseded file of every topic in `lake`; returns how many. Call it with
    the maintenance lock held (the sink deletes its own partitions' on assignment)."""
    deleted = 0
    store = Store.at(lake)
    for topic in topic_dirs(store):
        scan = scan_topic(store, topic)
        deleted += delete_superseded(
            store, (f for files in scan.superseded.values() for f in files)
        )
    if deleted:
        log.warning("deleted %d superseded files a crashed compaction left in %s", deleted, lake)
    return deleted
