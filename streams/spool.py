"""A local disk spool for events the broker has not acknowledged.

Segments are written whole (temporary name, fsync, rename), so a crash leaves either a complete
segment or none. A segment is deleted only after every event in it was acknowledged or written
into a newer segment, so an event is never lost between the two. Segment names sort in write
order, and events keep their send order inside a segment: re-sending in name order preserves
the original order. One client owns a spool directory at a time (an flock on `.lock`).
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ground.durable import fsync_dir
from streams.errors import SpoolError

_LENGTH = struct.Struct(">I")
_SUFFIX = ".spool"
_MAGIC = b"FWSPOOL1"  # then per event: topic, key, value, each length-prefixed


@dataclass(frozen=True)
class SpooledEvent:
    """One unacknowledged event, already encoded in the wire format."""

    topic: str
    key: bytes
    value: bytes


class Spool:
    """The spool directory of one client. `close()` releases it for the next client."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock: IO[bytes] | None = (self.dir / ".lock").open("ab")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise SpoolError(
                f"spool {self.dir} is in use by another running client: give each client its "
                "own spool directory (TelemetryClient(spool_dir=...))"
            ) from None
        self._next = max((int(p.stem) for p in self._segments()), default=0) + 1

    def _segments(self) -> list[Path]:
        return sorted(self.dir.glob(f"*{_SUFFIX}"), key=lambda p: int(p.stem))

    def segments(self) -> list[Path]:
        """The complete segments, oldest first."""
        return self._segments()

    def read(self, segment: Path) -> Iterator[SpooledEvent]:
        """The events of one segment, in their send order."""
        data = segment.read_bytes()
        if not data.startswith(_MAGIC):
            raise SpoolError(f"{segment} is not a spool segment; move it away and retry")
        pos = len(_MAGIC)
        while pos < len(data):
            fields = []
            for _ in range(3):
                (size,) = _LENGTH.unpack_from(data, pos)
                pos += _LENGTH.size
                fields.append(data[pos : pos + size])
                pos += size
            yield SpooledEvent(fields[0].decode(), fields[1], fields[2])

    def write(self, events: Iterable[SpooledEvent]) -> Path | None:
        """Persist `events` (in order) as a new segment; None when there are none."""
        chunks = [_MAGIC]
        count = 0
        for e in events:
            for field in (e.topic.encode(), e.key, e.value):
                chunks += [_LENGTH.pack(len(field)), field]
            count += 1
        if count == 0:
            return None
        segment = self.dir / f"{self._next:012d}{_SUFFIX}"
        tmp = segment.with_suffix(".tmp")
        with tmp.open("wb") as f:
            f.write(b"".join(chunks))
            f.flush()
            os.fsync(f.fileno())
        tmp.rename(segment)
        fsync_dir(self.dir)
        self._next += 1
        return segment

    def remove(self, segment: Path) -> None:
        segment.unlink(missing_ok=True)
        fsync_dir(self.dir)

    def close(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
