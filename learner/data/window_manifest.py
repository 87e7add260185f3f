"""The manifest of an MDS dataset: which lake files are in which window (DESIGN §8).

``mds/<dataset>/manifest.json`` is rewritten whole on every change: temp file, fsync, atomic
rename, fsync of the directory, so a reader sees the old or the new manifest, never a torn one.
Every window directory also holds its own record (``window.json``, written before the window is
renamed into place), so a window renamed just before a crash can be adopted on the next start.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ground.durable import fsync_dir, write_durably
from learner.errors import LearnerError

MANIFEST_NAME = "manifest.json"
WINDOW_RECORD_NAME = "window.json"
FORMAT = "flywheel-mds-manifest@1"


@dataclass(frozen=True, order=True)
class LakeFileRef:
    """One converted lake file: its Kafka range and its path relative to the lake root."""

    topic: str
    partition: int
    first: int
    last: int
    path: str = field(compare=False)

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.topic, self.partition, self.first, self.last)


@dataclass(frozen=True)
class WindowRecord:
    """One immutable window: its lake files, row counts and time range.

    ``rows`` went into MDS (training rows); ``heldout_rows`` stayed out (the release check's data);
    ``skipped_rows`` were other sources or reward functions. Times are epoch milliseconds of the
    rows' event times (None for a window without suggestion rows).
    """

    name: str
    seq: int
    reward_fn: str
    context_spec: str
    files: tuple[LakeFileRef, ...]
    rows: int
    heldout_rows: int
    skipped_rows: int
    samples: int
    rows_per_sample: int
    context_dim: int
    extra_columns: tuple[str, ...] = ()
    compression: str | None = None
    min_event_time_ms: int | None = None
    max_event_time_ms: int | None = None
    created_at: str = ""
    max_attributed_ms: int | None = None  # newest reward in the window (processor clock)
    # Token windows (learner.recipes.agent_rl.windows): Rewards whose tokens never reached the lake,
    # rows without signal (advantage 0), completion tokens the window trains, and its rows that are
    # completions served to users (the rest are sandbox trials).
    expired_rows: int = 0
    zero_advantage_rows: int = 0
    trained_tokens: int = 0
    served_rows: int = 0
    # learner.recipes.agent_rl.row_admission: rows trained with the start of their prompt cut to
    # fit; rows left out because the completion alone does not fit, or because they were decoded
    # greedily; malformed rows, by cause (each in the window's dead_letters.jsonl).
    cut_rows: int = 0
    overlong_rows: int = 0
    greedy_rows: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict, hash=False)

    @property
    def dead_letter_rows(self) -> int:
        return sum(self.dead_letters.values())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> WindowRecord:
        try:
            files = tuple(LakeFileRef(**f) for f in data["files"])
            values = {**data, "files": files, "extra_columns": tuple(data["extra_columns"]),
                      "dead_letters": dict(data.get("dead_letters", {}))}  # fmt: skip
            return WindowRecord(**values)
        except (KeyError, TypeError, ValueError) as error:
            raise LearnerError(
                f"window record {data.get('name')!r} is malformed ({error}); "
                "delete the window directory and its manifest entry to rebuild it."
            ) from error


@dataclass(frozen=True)
class Manifest:
    """All windows of one dataset, in sequence order."""

    dataset: str
    reward_fn: str
    windows: tuple[WindowRecord, ...] = ()

    def converted(self) -> set[tuple[str, int, int, int]]:
        """(topic, partition, first, last) of every lake file already in a window."""
        return {f.key for w in self.windows for f in w.files}

    def next_seq(self) -> int:
        return max((w.seq for w in self.windows), default=-1) + 1

    def with_window(self, window: WindowRecord) -> Manifest:
        """This manifest plus ``window``; LearnerError if one of its files is already in one."""
        overlap = self.converted() & {f.key for f in window.files}
        if overlap:
            raise LearnerError(
                f"window {window.name} holds lake files already converted: {sorted(overlap)[:3]}"
                "; each lake file goes into exactly one window."
            )
        windows = sorted([*self.windows, window], key=lambda w: w.seq)
        return replace(self, windows=tuple(windows))

    def window(self, name: str) -> WindowRecord:
        for w in self.windows:
            if w.name == name:
                return w
        raise LearnerError(
            f"dataset {self.dataset!r} has no window {name!r}; known: "
            f"{[w.name for w in self.windows]}."
        )


def read_manifest(root: Path, dataset: str, reward_fn: str) -> Manifest:
    """The manifest under ``root`` (an empty one when missing); LearnerError when it belongs to
    another dataset or reward function, or is not a manifest."""
    path = root / MANIFEST_NAME
    if not path.exists():
        return Manifest(dataset, reward_fn)
    return parse_manifest(path.read_text(), str(path), dataset, reward_fn)


def parse_manifest(text: str, where: str, dataset: str, reward_fn: str) -> Manifest:
    """The manifest in ``text`` (read from ``where``, named in errors); LearnerError as
    `read_manifest`."""
    try:
        data = json.loads(text)
        manifest = Manifest(
            data["dataset"],
            data["reward_fn"],
            tuple(WindowRecord.from_json(w) for w in data["windows"]),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise LearnerError(f"{where} is not a readable manifest ({error}); restore it.") from error
    if (manifest.dataset, manifest.reward_fn) != (dataset, reward_fn):
        raise LearnerError(
            f"{where} is dataset {manifest.dataset!r} with reward_fn {manifest.reward_fn!r}, not "
            f"{dataset!r} with {reward_fn!r}; use one dataset name per reward function."
        )
    return manifest


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Replace ``root/manifest.json`` atomically and durably."""
    write_durably(root / MANIFEST_NAME, manifest_json(manifest).encode())


def manifest_json(manifest: Manifest) -> str:
    """The text of ``manifest.json``."""
    data = {
        "format": FORMAT,
        "dataset": manifest.dataset,
        "reward_fn": manifest.reward_fn,
        "windows": [w.to_json() for w in manifest.windows],
    }
    return _dumps(data)


def write_json_atomically(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``data`` as JSON, atomically and durably."""
    write_durably(path, _dumps(data).encode())


def record_json(record: WindowRecord) -> str:
    """The text of a window's ``window.json`` (the same JSON as its manifest entry)."""
    return _dumps(record.to_json())


def _dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True)


TEMP_PREFIX = ".tmp-"  # a window being written; recovery deletes leftovers


def write_window_atomically(
    directory: Path,
    columns: Mapping[str, str],
    samples: Iterable[dict[str, Any]],
    *,
    compression: str | None = None,
    files: Mapping[str, str] | None = None,
) -> None:
    """Write ``samples`` as an MDS directory at ``directory``, whole or not at all: into
    ``<parent>/.tmp-<name>-<token>/`` (plus ``files``, name → text), every file fsynced, renamed
    into place, the parent fsynced. The temporary directory is removed if anything fails."""
    from streaming import MDSWriter  # imported late: importing streaming pulls in torchvision

    temp = directory.with_name(f"{TEMP_PREFIX}{directory.name}-{uuid.uuid4().hex[:8]}")
    try:
        with MDSWriter(out=str(temp), columns=dict(columns), compression=compression) as writer:
            for sample in samples:
                writer.write(sample)
        # Plain writes: fsync_tree makes every file durable, once, before the rename that makes
        # the window visible.
        for name, text in (files or {}).items():
            (temp / name).write_text(text)
        fsync_tree(temp)
        temp.rename(directory)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    fsync_dir(directory.parent)


def fsync_tree(directory: Path) -> None:
    """fsync every file under ``directory`` and the directory itself (before renaming it)."""
    for path in _files(directory):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(directory)


def _files(directory: Path) -> Iterable[Path]:
    for parent, _, names in os.walk(directory):
        for name in names:
            yield Path(parent) / name
