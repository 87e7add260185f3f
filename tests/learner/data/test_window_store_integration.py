"""MDS windows in the local stack's object store: published with a commit record written last,
recovered after a crash, and read by a fresh process that knows them only by URI, through
StreamingDataset's remote and bounded local cache."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ground.store import Store
from learner.data.window_manifest import (
    WINDOW_RECORD_NAME,
    LakeFileRef,
    Manifest,
    WindowRecord,
    record_json,
)
from learner.data.window_store import (
    publish_manifest,
    publish_window,
    read_published_manifest,
    recover_published,
)

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]
DATASET = "d"
SAMPLES = 400
SHARD_BYTES = 16_384  # ~12 shards a window, so the cache limit below evicts


def _window(root: Path, seq: int) -> tuple[Path, WindowRecord]:
    """A window of SAMPLES samples (`id`, a 256-float vector) in several shards, on disk."""
    from streaming import MDSWriter

    name = f"w{seq:06d}-{seq:012x}"
    directory = root / name
    record = WindowRecord(
        name=name, seq=seq, reward_fn="tab@1", context_spec="test",
        files=(LakeFileRef("rewards", 0, seq * 10, seq * 10 + 9, f"rewards/{seq}.parquet"),),
        rows=SAMPLES, heldout_rows=0, skipped_rows=0, samples=SAMPLES, rows_per_sample=1,
        context_dim=256,
    )  # fmt: skip
    columns = {"id": "int", "x": "ndarray:float32:256"}
    with MDSWriter(out=str(directory), columns=columns, size_limit=SHARD_BYTES) as writer:
        for i in range(SAMPLES):
            writer.write({"id": seq * 100_000 + i, "x": np.full(256, i, np.float32)})
    (directory / WINDOW_RECORD_NAME).write_text(record_json(record))
    return directory, record


@pytest.fixture
def store(stack_store: Callable[[str], Store]) -> Store:
    return stack_store("mds")


def test_a_crashed_publish_is_recovered_from_the_store(store: Store, tmp_path: Path) -> None:
    one, first = _window(tmp_path, 0)
    two, second = _window(tmp_path, 1)
    three, _ = _window(tmp_path, 2)
    publish_window(store, DATASET, one)
    publish_manifest(store, Manifest(DATASET, "tab@1").with_window(first))
    # Killed after window.json, before the manifest: complete, adopted.
    publish_window(store, DATASET, two)
    # Killed mid-upload: shards without window.json, deleted.
    for shard in sorted(three.glob("shard.*"))[:3]:
        data = shard.read_bytes()
        store.write_bytes(f"{DATASET}/{three.name}/{shard.name}", data)
    manifest = recover_published(store, DATASET, "tab@1")
    assert [w.name for w in manifest.windows] == [one.name, two.name]
    assert read_published_manifest(store, DATASET, "tab@1") == manifest
    assert store.files(f"{DATASET}/{three.name}") == []
    assert manifest.window(two.name) == second


STREAM_SCRIPT = """
import json, sys
from pathlib import Path
from flywheel.settings import Settings
from ground.store import Store
from learner.data.window_store import read_published_manifest, remote_streams, streaming_from
from learner.engine.loader import build_loader, release_loader

def cached(cache):  # whole shards only: a download in flight has a temporary name
    total = 0
    for f in cache.rglob("shard.*.mds"):
        try:
            total += f.stat().st_size
        except FileNotFoundError:
            pass  # evicted meanwhile
    return total

uri, cache, limit = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
store = Store.at(Settings.from_env().storage(uri))
manifest = read_published_manifest(store, "d", "tab@1")
streams = remote_streams(store, "d", [w.name for w in manifest.windows], cache)
with streaming_from(store.location):
    loader = build_loader(streams, 20, seed=3, kind="auto", cache_limit=limit)
    ids, peak = [], 0
    for batch in loader:
        ids += [int(i) for i in batch["id"]]
        peak = max(peak, cached(cache))
    release_loader(loader, True)
print(json.dumps({"ids": ids, "peak": peak, "windows": len(streams)}))
"""


def test_a_fresh_process_streams_the_windows_by_uri_with_a_bounded_cache(
    store: Store, tmp_path: Path
) -> None:
    manifest = Manifest(DATASET, "tab@1")
    expected: list[int] = []
    shard_bytes = 0
    for seq in range(2):
        directory, record = _window(tmp_path / "built", seq)
        publish_window(store, DATASET, directory)
        manifest = manifest.with_window(record)
        expected += [seq * 100_000 + i for i in range(SAMPLES)]
        shard_bytes += sum(f.stat().st_size for f in directory.glob("shard.*"))
    publish_manifest(store, manifest)
    cache = tmp_path / "fresh-cache"  # empty: this process has nothing but the URI
    limit = shard_bytes // 3
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name, None)  # the child finds the store through its settings only
    result = subprocess.run(
        [sys.executable, "-c", STREAM_SCRIPT, store.location.uri, str(cache), str(limit)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["windows"] == 2
    # Every sample once (the loader drops a partial last batch: 800 is 40 batches of 20).
    assert sorted(out["ids"]) == expected
    # streaming evicts once a shard is in: the cache may pass the limit by one shard meanwhile.
    assert out["peak"] <= limit + SHARD_BYTES, (out["peak"], limit)
    assert 0 < sum(f.stat().st_size for f in cache.rglob("shard.*.mds")) <= limit


PUBLISH_SCRIPT = """
import sys
from pathlib import Path
from flywheel.settings import Settings
from ground.store import Store
from learner.data.window_manifest import WindowRecord, read_manifest
from learner.data.window_store import publish_manifest, publish_window, recover_published
import json

uri, built = sys.argv[1], Path(sys.argv[2])
store = Store.at(Settings.from_env().storage(uri))
manifest = recover_published(store, "d", "tab@1")
for directory in sorted(built.iterdir()):
    if directory.name in {w.name for w in manifest.windows}:
        continue
    record = WindowRecord.from_json(json.loads((directory / "window.json").read_text()))
    publish_window(store, "d", directory)
    manifest = manifest.with_window(record)
    publish_manifest(store, manifest)
    print("published", directory.name, flush=True)
"""


def test_windows_published_under_sigkill_are_whole_once_recovered(
    store: Store, tmp_path: Path
) -> None:
    """The window crash test on the store: a publisher killed at a random moment after each
    window it completes (so mid-upload of the next, or between its `window.json` and the
    manifest); after each kill `recover_published` leaves only whole windows, each listed
    once, and the next run publishes the rest."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    built = tmp_path / "built"
    expected = {}
    for seq in range(4):
        directory, record = _window(built, seq)
        expected[record.name] = sorted(
            p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()
        )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for round_ in range(len(expected)):
        process = subprocess.Popen(
            [sys.executable, "-c", PUBLISH_SCRIPT, store.location.uri, str(built)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        process.stdout.readline()  # one window published (or none left): kill mid-way on
        time.sleep(rng.uniform(0.0, 0.3))  # one window's ~14 uploads take about that
        process.send_signal(signal.SIGKILL)
        process.wait()
        manifest = recover_published(store, DATASET, "tab@1")
        names = [w.name for w in manifest.windows]
        assert len(names) == len(set(names)), (seed, round_, names)
        for name in names:  # listed: whole
            keys = sorted(f.key.split("/", 2)[2] for f in store.files(f"{DATASET}/{name}"))
            assert keys == expected[name], (seed, round_, name)
        for stored in store.files(DATASET):  # nothing else but the manifest
            assert stored.key == f"{DATASET}/manifest.json" or stored.key.split("/")[1] in names
    done = subprocess.run(
        [sys.executable, "-c", PUBLISH_SCRIPT, store.location.uri, str(built)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = read_published_manifest(store, DATASET, "tab@1")
    assert [w.name for w in manifest.windows] == sorted(expected), seed
