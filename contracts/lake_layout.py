"""Where lake files live (DESIGN §6): pure path logic, no Parquet and no Kafka.

    <lake>/<topic>/dt=YYYY-MM-DD/hour=HH/<topic>+<partition>+<first>+<last>.parquet

`dt` and `hour` are the UTC event time of the file's rows; `first` and `last` are inclusive
Kafka offsets in plain decimal. A file covers *every* offset of [first, last]: each one is a row,
a dead letter or nothing at all (compacted away, a transaction marker, a tombstone), so per
partition the files' ranges tile the log without gaps or overlaps.

A file whose range lies strictly inside another file's range of the same partition is
*superseded*: compaction (`processors.lake.compaction`) renames a merged file into place before
it deletes the files it merged, and a crash between the two leaves both. `scan_topic` lists
superseded files apart from the visible ones, so every reader of the layout sees each offset
once at any moment; whoever holds the partition (the sink) or the lake's maintenance lock
deletes them.

The lake is a `ground.store.Store`: a local directory or an S3 prefix. On local disk files are
written under a temporary name, `.<final name>.<token>.tmp`, in the same directory: it starts
with a dot and does not end in `.parquet`, so no `*.parquet` glob (DuckDB, pyarrow) ever matches
a file being written. In an object store a file appears with its upload's completion, whole.
Either way a file, once visible, is the commit of its range: a partition resumes at the largest
`last` + 1 (`TopicScan.resume_offsets`). docs/object-storage.md compares this protocol with the
Iceberg Kafka Connect sink's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from contracts.errors import LakeLayoutError
from ground.store import Store

SUFFIX = ".parquet"
TEMP_SUFFIX = ".tmp"
SECONDS_PER_HOUR = 3600
_TOPIC = r"[A-Za-z0-9._-]+"  # Kafka's legal topic characters: never '+', so '+' separates
_FILE = re.compile(
    rf"(?P<topic>{_TOPIC})\+(?P<partition>\d+)\+(?P<first>\d+)\+(?P<last>\d+)\.parquet"
)
_TEMP = re.compile(rf"\.(?P<final>{_FILE.pattern})\.[0-9a-f]+\.tmp")


@dataclass(frozen=True, order=True)
class LakeFile:
    """One visible lake file: the inclusive Kafka offset range [first, last] of a partition."""

    topic: str
    partition: int
    first: int
    last: int
    path: str = field(compare=False)  # in the store's filesystem (`Store.fs`)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass
class TopicScan:
    """What a topic's directory holds: visible files per partition (sorted by `first`),
    superseded files (a range inside a visible file's: compaction's inputs not yet deleted),
    temporary files left behind by a writer that died, and other Parquet files (a table that
    is not a topic, written whole under names of its own: `flywheel demo`'s results)."""

    files: dict[int, list[LakeFile]] = field(default_factory=dict)
    temps: dict[int, list[str]] = field(default_factory=dict)  # keys in the store
    superseded: dict[int, list[LakeFile]] = field(default_factory=dict)
    others: list[str] = field(default_factory=list)  # filesystem paths, as LakeFile.path

    def resume_offsets(self) -> dict[int, int]:
        """Partition -> offset to consume next: the largest `last` on disk + 1."""
        return {p: max(f.last for f in files) + 1 for p, files in self.files.items() if files}


def file_name(topic: str, partition: int, first: int, last: int) -> str:
    """`<topic>+<partition>+<first>+<last>.parquet`; LakeLayoutError for an impossible range."""
    if not re.fullmatch(_TOPIC, topic):
        raise LakeLayoutError(f"topic {topic!r} has characters Kafka topic names cannot have")
    if partition < 0 or first < 0 or last < first:
        raise LakeLayoutError(
            f"partition {partition}, offsets [{first}, {last}] is not a file range: "
            "partition and offsets must be >= 0 and first <= last"
        )
    return f"{topic}+{partition}+{first}+{last}{SUFFIX}"


def parse_file_name(path: str | Path) -> LakeFile | None:
    """The range a lake file name encodes, or None for any other name (temp files included)."""
    text = str(path)
    match = _FILE.fullmatch(text.rsplit("/", 1)[-1])
    if match is None:
        return None
    return LakeFile(
        match["topic"], int(match["partition"]), int(match["first"]), int(match["last"]), text
    )


def temp_partition(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a temporary lake file name, or None if `name` is not one."""
    match = _TEMP.fullmatch(name)
    return None if match is None else (match["topic"], int(match["partition"]))


def hour_of(event_time: datetime) -> int:
    """Hours since the Unix epoch of a timezone-aware time (floor, so also right before 1970)."""
    return math.floor(event_time.timestamp() / SECONDS_PER_HOUR)


def hour_of_ms(epoch_ms: int) -> int:
    """Hours since the Unix epoch of a time in epoch milliseconds."""
    return epoch_ms // (SECONDS_PER_HOUR * 1000)


def hour_key(topic: str, hour: int) -> str:
    """`<topic>/dt=YYYY-MM-DD/hour=HH` of an hour since the epoch (UTC), below the lake root."""
    start = datetime.fromtimestamp(hour * SECONDS_PER_HOUR, UTC)
    return f"{topic}/dt={start:%Y-%m-%d}/hour={start:%H}"


def hour_dir(lake: Path, topic: str, hour: int) -> Path:
    """`<lake>/<topic>/dt=YYYY-MM-DD/hour=HH` of a local lake."""
    return lake / hour_key(topic, hour)


def parse_hour_dir(directory: Path) -> int | None:
    """The hour since the epoch of a `dt=YYYY-MM-DD/hour=HH` directory, or None for another
    path (the inverse of `hour_dir`)."""
    match = re.fullmatch(r"dt=(\d{4}-\d{2}-\d{2})", directory.parent.name)
    hour = re.fullmatch(r"hour=(\d{2})", directory.name)
    if match is None or hour is None or int(hour[1]) > 23:
        return None
    try:
        start = datetime.fromisoformat(match[1]).replace(hour=int(hour[1]), tzinfo=UTC)
    except ValueError:
        return None
    return hour_of(start)


def file_key(topic: str, partition: int, first: int, last: int, hour: int) -> str:
    """The key, below the lake root, of a file of `topic`/`partition` covering [first, last]
    in `hour`."""
    return f"{hour_key(topic, hour)}/{file_name(topic, partition, first, last)}"


def file_path(lake: Path, topic: str, partition: int, first: int, last: int, hour: int) -> Path:
    """`file_key` below a local lake directory."""
    return lake / file_key(topic, partition, first, last, hour)


def topic_dirs(lake: Path | Store) -> list[str]:
    """The topic directories of `lake` (names not starting with '.'), sorted; [] without one.
    In an object store: the prefixes directly under the lake (one delimiter listing). OSError
    (an unreachable store) propagates."""
    if isinstance(lake, Store):
        if lake.local_dir is None:
            from pyarrow import fs

            selector = fs.FileSelector(lake.root, allow_not_found=True)
            infos = lake.fs.get_file_info(selector)
            names = (i.base_name for i in infos if i.type == fs.FileType.Directory)
            return sorted(n for n in names if not n.startswith("."))
        lake = lake.local_dir
    if not lake.is_dir():
        return []
    return sorted(p.name for p in lake.iterdir() if p.is_dir() and not p.name.startswith("."))


def scan_topic(lake: Store | Path, topic: str) -> TopicScan:
    """Every lake file and temporary file under `<lake>/<topic>/` (missing directory: empty);
    superseded files go to `superseded`, not `files` (module docstring). A Path is a local
    lake."""
    lake = Store.at(lake)
    scan = TopicScan()
    for stored in lake.files(topic):
        found = parse_file_name(stored.key)
        if found is not None and found.topic == topic:
            located = LakeFile(found.topic, found.partition, found.first, found.last,
                               lake.path(stored.key))  # fmt: skip
            scan.files.setdefault(found.partition, []).append(located)
            continue
        temp = temp_partition(stored.name)
        if temp is not None and temp[0] == topic:
            scan.temps.setdefault(temp[1], []).append(stored.key)
        elif stored.name.endswith(SUFFIX) and not stored.name.startswith("."):
            scan.others.append(lake.path(stored.key))
    for partition, files in scan.files.items():
        visible, superseded = split_superseded(files)
        scan.files[partition] = visible
        if superseded:
            scan.superseded[partition] = superseded
    return scan


def split_superseded(files: Iterable[LakeFile]) -> tuple[list[LakeFile], list[LakeFile]]:
    """One partition's files as (visible, superseded), each sorted: a file is superseded when
    another file's range contains its range and is larger. Two files of one range (in two
    hour directories) are both visible: `range_problems` reports that overlap."""
    visible: list[LakeFile] = []
    superseded: list[LakeFile] = []
    cover: LakeFile | None = None  # the file reaching furthest so far; its first <= f.first
    for f in sorted(files, key=lambda f: (f.first, -f.last)):
        inside = cover is not None and f.last <= cover.last
        if inside and cover is not None and (cover.first, cover.last) != (f.first, f.last):
            superseded.append(f)
            continue
        visible.append(f)
        if cover is None or f.last > cover.last:
            cover = f
    return sorted(visible), sorted(superseded)


def range_problems(files: Iterable[LakeFile], start: int | None = None) -> list[str]:
    """Gaps and overlaps between one partition's files, in offset order; [] when they tile
    [start or the first file's first, the last file's last] exactly.

    This is the exactly-once check on the lake side: every offset is covered by one file.
    """
    problems: list[str] = []
    expected = start
    for f in sorted(files):
        if expected is not None and f.first != expected:
            kind = "gap" if f.first > expected else "overlap"
            problems.append(f"{kind} before {f.name}: expected first offset {expected}")
        expected = f.last + 1
    return problems
