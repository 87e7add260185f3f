"""Benchmark: the codebase index's sync, query latency and embedding throughput (issue 34,
"How it is checked"; docs/index.md, "Figures").

    .venv/bin/python -m bench.index                 # 10,000 files, 200,000 chunks, 500 queries
    .venv/bin/python -m bench.index --quick         # tiny sizes: a smoke run (tests/bench)
    .venv/bin/python -m bench.index --skip-query    # sync and embedding only

The server is the real app (`codeindex.server.app.create_app` over `IndexService`) served by
uvicorn in a thread of this process; its events are Avro-encoded as in production but go to a
sink that discards them (no broker: the bench times the index, not Kafka). The embedder is the
shipped one (`codeindex.embedding`) when that package imports, else the test embedder with a
warning (`--embedder test` asks for it): figures of the test embedder say nothing about the
model's cost.

* **sync**: a deterministic tree of `--files` Python-like modules (varied sizes, nested
  packages); a first sync with the real client (`codeindex.client.sync`) over HTTP; an edit of
  one definition in `--change` of the files; a re-sync; an unchanged re-sync. Bytes are request
  bodies (the client's count). Targets: the 1% re-sync <= 3% of the first's bytes and <= 0.1x
  its time; the unchanged one a single request carrying the root hash.
* **query latency**: `--chunks` chunks in one workspace (files of 10 chunks) whose vectors are
  random unit vectors of the embedder's dimension, inserted through the state's API
  (`apply_file`, `add_embedding`: what a sync or a replica's rebuild does) instead of embedding
  that many texts; then `--queries` searches (top 10) through the HTTP app, the query's
  embedding included, one at a time on a keep-alive connection. Target: p99 <= 50 ms on 2 cores.
* **embedding throughput**: `--embed-texts` chunk texts embedded the way `POST .../chunks`
  does it (`embedder.encode(texts, batch_size)`: tokenise, sort by length, pad, forward)
  against the bare model forward over the same batches tokenised and padded beforehand.
  Alternating rounds, medians. Target: >= 0.8x. Needs the real embedder.

Prints a table and writes `$FLYWHEEL_HOME/bench/index.json` (or `--out`).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from codeindex.client.api import IndexClient
from codeindex.client.chunking import chunk_file
from codeindex.client.sync import sync
from codeindex.protocol import ChunkRef, FileEntry
from codeindex.server.app import create_app
from codeindex.server.embedder import ChunkEmbedder
from codeindex.server.events import IndexEventLog
from codeindex.server.service import IndexService
from codeindex.server.state import IndexState
from flywheel.settings import Settings
from streams.serde import AvroCodec
from tests.codeindex.served import served
from tests.codeindex.server.index_doubles import BagOfWordsEmbedder
from tests.codeindex.synthetic_tree import WORDS, edit_one_definition, python_module, write_tree
from tests.registry_double import FakeRegistry

console = Console()
EMBED_BATCH = inspect.signature(IndexService.__init__).parameters["embed_batch"].default
FULL = {"files": 10_000, "chunks": 200_000, "queries": 500, "embed_texts": 2048, "rounds": 3}
QUICK = {"files": 200, "chunks": 3_000, "queries": 40, "embed_texts": 64, "rounds": 1}


class DiscardingSink:
    """A record sink that counts and drops (the bench measures the index, not the broker)."""

    def __init__(self) -> None:
        self.records = 0

    def send(self, topic: str, key: str | bytes | None, value: bytes | None,
             headers: Sequence[tuple[str, bytes]] | None = None) -> None:  # fmt: skip
        self.records += 1

    def flush(self) -> None:
        return None


def load_embedder(kind: str) -> tuple[ChunkEmbedder, bool]:
    """(the embedder, whether it is the real one): `auto` takes the shipped model when
    `codeindex.embedding` imports, else warns and takes the test embedder."""
    if kind == "auto":
        try:
            from codeindex.embedding.embedder import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
                load_default_embedder,
            )

            embedder: ChunkEmbedder = load_default_embedder()
            return embedder, True
        except ModuleNotFoundError as exc:
            console.print(f"[yellow]warning[/]: no real embedder ({exc}); using the test "
                          "embedder (a hashed bag of words): no model cost measured")  # fmt: skip
    return BagOfWordsEmbedder(dim=128, name="bench-bow"), False


def make_service(embedder: ChunkEmbedder) -> IndexService:
    """An index service over a fresh state, publishing Avro records to a discarding sink."""
    events = IndexEventLog(
        DiscardingSink(), AvroCodec(FakeRegistry()),  # type: ignore[arg-type]  # a registry double
        embedder_name=embedder.name, embedder_version=embedder.version, dim=embedder.dim,
        producer="bench/index", origin="bench",
    )  # fmt: skip
    return IndexService(IndexState(embedder.dim), embedder, events)


# Sync --------------------------------------------------------------------------------------


def bench_sync(embedder: ChunkEmbedder, files: int, change: float, seed: int) -> dict[str, Any]:
    service = make_service(embedder)
    with tempfile.TemporaryDirectory() as tmp, served(create_app(service, keys=None)) as url:
        ws, state = Path(tmp) / "ws", Path(tmp) / "state"
        past = int((time.time() - 3600) * 1e9)  # outside the chunk cache's racy window
        started = time.perf_counter()
        paths = write_tree(ws, files, seed=seed, mtime_ns=past)
        console.print(f"  wrote {files:,} files ({sum(p.stat().st_size for p in paths) / 1e6:.1f} "
                      f"MB) in {time.perf_counter() - started:.1f} s; first sync ...")  # fmt: skip
        first = sync(ws, url, None, state_root=state)
        rng = random.Random(seed + 1)
        edited = rng.sample(paths, max(1, round(files * change)))
        for path in edited:
            edit_one_definition(path, rng)
        second = sync(ws, url, None, state_root=state)
        unchanged = sync(ws, url, None, state_root=state)
    root_body = len(IndexClient.encode({"root": first.root}))
    return {
        "files": first.files, "chunks": first.chunks, "changed_files": len(edited),
        "first": _sync_figures(first), "after_change": _sync_figures(second),
        "unchanged": _sync_figures(unchanged), "root_request_bytes": root_body,
        "bytes_ratio": second.bytes_sent / first.bytes_sent,
        "time_ratio": second.seconds / first.seconds,
    }  # fmt: skip


def _sync_figures(report: Any) -> dict[str, Any]:
    return {"seconds": report.seconds, "bytes": report.bytes_sent, "requests": report.requests,
            "files_sent": report.files_sent, "chunks_uploaded": report.chunks_uploaded,
            "files_read": report.files_read}  # fmt: skip


# Query latency -----------------------------------------------------------------------------


def fill(service: IndexService, ws: str, chunks: int, seed: int) -> float:
    """`chunks` chunks with random unit vectors in workspace `ws` (files of 10 chunks, two
    folder levels); the seconds it took."""
    rng = np.random.default_rng(seed)
    state, dim, per_file = service.state, service.embedder.dim, 10
    started = time.perf_counter()
    for start in range(0, chunks, per_file):
        hashes = [
            hashlib.sha256(b"bench%d" % i).hexdigest() for i in range(start, start + per_file)
        ]
        refs = [ChunkRef(h, 1 + 5 * j, 5 + 5 * j) for j, h in enumerate(hashes)]
        f = start // per_file
        path = "/".join(hashlib.sha256(s.encode()).hexdigest()[:20]
                        for s in (f"d{f % 50}", f"d{f % 50}/{f % 37}", f"file{f}"))  # fmt: skip
        state.apply_file(ws, path, FileEntry.of(path, refs))
        vectors = rng.standard_normal((per_file, dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for h, v in zip(hashes, vectors, strict=True):
            state.add_embedding(h, v)
    return time.perf_counter() - started


def queries(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(WORDS, rng.randint(2, 6))) for _ in range(n)]


def bench_query(embedder: ChunkEmbedder, chunks: int, n: int, seed: int) -> dict[str, Any]:
    service = make_service(embedder)
    ws = "00000000-0000-4000-8000-00000000be4c"
    console.print(f"  inserting {chunks:,} chunks (random vectors, dim {embedder.dim}) ...")
    fill_s = fill(service, ws, chunks, seed)
    latencies_ms = []
    with served(create_app(service, keys=None)) as url, httpx.Client(base_url=url) as http:
        asked = queries(n + 20, seed)
        for i, query in enumerate(asked):
            started = time.perf_counter()
            answer = http.post(f"/v1/index/{ws}/search", json={"query": query, "top_k": 10})
            elapsed = time.perf_counter() - started
            answer.raise_for_status()
            if len(answer.json()["results"]) != 10:
                raise RuntimeError(f"search answered {answer.text[:200]}")
            if i >= 20:  # the first 20 warm up the connection and the model
                latencies_ms.append(elapsed * 1000)
    return {
        "chunks": service.state.status(ws)["chunks_embedded"], "queries": n,
        "insert_seconds": fill_s, "p50_ms": _percentile(latencies_ms, 50),
        "p99_ms": _percentile(latencies_ms, 99), "mean_ms": statistics.fmean(latencies_ms),
    }  # fmt: skip


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


# Embedding throughput ----------------------------------------------------------------------


def chunk_texts(count: int, seed: int) -> list[str]:
    """`count` chunk texts as the client cuts them from synthetic modules."""
    rng, texts = random.Random(seed), list[str]()
    while len(texts) < count:
        texts.extend(c.text for c in chunk_file("m.py", python_module(rng)))
    return texts[:count]


def bench_embedding(embedder: Any, count: int, rounds: int, seed: int) -> dict[str, Any]:
    """Texts/s of `encode` (the /chunks path) vs the bare forward over the same pre-padded
    batches. Needs an embedder with `tokenize`, `pad` and `forward` (the real one's API)."""
    if not all(hasattr(embedder, a) for a in ("tokenize", "pad", "forward")):
        return {"skipped": "the embedder has no tokenize/pad/forward (the test embedder)"}
    import torch

    texts = chunk_texts(count, seed)
    ids = embedder.tokenize(texts)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)  # as encode sorts
    batches = [embedder.pad([ids[i] for i in order[s : s + EMBED_BATCH]])
               for s in range(0, len(order), EMBED_BATCH)]  # fmt: skip

    def served_path() -> float:
        started = time.perf_counter()
        embedder.encode(texts, batch_size=EMBED_BATCH)
        return len(texts) / (time.perf_counter() - started)

    def bare() -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            for input_ids, mask in batches:
                embedder.forward(input_ids, mask).cpu()
        return len(texts) / (time.perf_counter() - started)

    bare_rate, served_rate = _median_pair(rounds, bare, served_path)
    tokens = sum(len(i) for i in ids)
    return {"texts": len(texts), "tokens": tokens, "batch_size": EMBED_BATCH,
            "bare_texts_per_s": bare_rate, "encode_texts_per_s": served_rate,
            "ratio": served_rate / bare_rate}  # fmt: skip


def _median_pair(
    rounds: int, a: Callable[[], float], b: Callable[[], float]
) -> tuple[float, float]:
    """Medians of `rounds` alternating calls of each, after one warm-up call of each."""
    a(), b()
    xs, ys = [], []
    for _ in range(rounds):
        xs.append(a())
        ys.append(b())
    return statistics.median(xs), statistics.median(ys)


# Report ------------------------------------------------------------------------------------


def table(report: dict[str, Any]) -> Table:
    out = Table("measure", "value", "target", title=f"bench.index ({report['embedder']})")
    s = report.get("sync")
    if s:
        first, second, same = s["first"], s["after_change"], s["unchanged"]
        out.add_row(
            f"first sync ({s['files']:,} files, {s['chunks']:,} chunks)",
            f"{first['bytes'] / 1e6:,.2f} MB, {first['seconds']:.2f} s",
            "",
        )
        out.add_row(
            f"re-sync after {s['changed_files']:,} files changed",
            f"{second['bytes'] / 1e6:,.3f} MB, {second['seconds']:.2f} s, "
            f"{second['chunks_uploaded']:,} chunks",
            "",
        )
        out.add_row("  bytes / first", f"{s['bytes_ratio']:.2%}", "<= 3%")
        out.add_row("  time / first", f"{s['time_ratio']:.3f}x", "<= 0.1x")
        out.add_row(
            "unchanged re-sync",
            f"{same['requests']} request, {same['bytes']} B, {same['seconds']:.2f} s",
            f"1 request, {s['root_request_bytes']} B",
        )
    q = report.get("query")
    if q:
        out.add_row(
            f"query p50 / p99 ({q['chunks']:,} chunks, {q['queries']} queries)",
            f"{q['p50_ms']:.2f} / {q['p99_ms']:.2f} ms",
            "p99 <= 50 ms",
        )
    e = report.get("embedding")
    if e and "ratio" in e:
        out.add_row(
            f"embedding ({e['texts']:,} texts, batch {e['batch_size']})",
            f"encode {e['encode_texts_per_s']:,.0f}/s, bare forward "
            f"{e['bare_texts_per_s']:,.0f}/s: {e['ratio']:.3f}x",
            ">= 0.8x",
        )
    elif e:
        out.add_row("embedding throughput", f"skipped: {e['skipped']}", ">= 0.8x")
    return out  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    parser.add_argument("--files", type=int, help=f"files of the sync tree ({FULL['files']:,})")
    parser.add_argument("--change", type=float, default=0.01, help="fraction of files edited")
    parser.add_argument(
        "--chunks", type=int, help=f"chunks for the query bench ({FULL['chunks']:,})"
    )
    parser.add_argument("--queries", type=int, help=f"queries timed ({FULL['queries']})")
    parser.add_argument("--embed-texts", type=int, help=f"texts embedded ({FULL['embed_texts']})")
    parser.add_argument("--rounds", type=int, help=f"embedding rounds ({FULL['rounds']})")
    parser.add_argument("--embedder", choices=("auto", "test"), default="auto")
    parser.add_argument("--skip-sync", action="store_true")
    parser.add_argument("--skip-query", action="store_true")
    parser.add_argument("--skip-embedding", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--torch-threads", type=int, help="torch intra-op threads")
    parser.add_argument("--out", type=Path, help="JSON report ($FLYWHEEL_HOME/bench/index.json)")
    args = parser.parse_args(argv)
    sizes = {k: getattr(args, k) or v for k, v in (QUICK if args.quick else FULL).items()}
    if args.torch_threads:
        import torch  # only asked for with the real embedder

        torch.set_num_threads(args.torch_threads)
    embedder, real = load_embedder(args.embedder)
    report: dict[str, Any] = {
        "embedder": f"{embedder.name}:{embedder.version} dim {embedder.dim}"
        + ("" if real else " (TEST embedder)"),
        "real_embedder": real, "cpus": len(os.sched_getaffinity(0)), "sizes": sizes,
        "torch_threads": args.torch_threads,
    }  # fmt: skip
    if not args.skip_sync:
        console.print("sync ...")
        report["sync"] = bench_sync(embedder, sizes["files"], args.change, args.seed)
    if not args.skip_query:
        console.print("query latency ...")
        report["query"] = bench_query(embedder, sizes["chunks"], sizes["queries"], args.seed)
    if not args.skip_embedding:
        console.print("embedding throughput ...")
        report["embedding"] = bench_embedding(
            embedder, sizes["embed_texts"], sizes["rounds"], args.seed
        )
    out = args.out or Settings.from_env().home / "bench" / "index.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    console.print(table(report))
    console.print(f"written to {out}")
    return report


if __name__ == "__main__":
    main()
