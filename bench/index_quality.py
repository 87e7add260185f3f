"""The codebase index's retrieval quality (issue 34): natural-language queries → functions, on
packages the embedder never saw in training.

    .venv/bin/python -m bench.index_quality [--embedder DIR] [--batch 64]

The set (``learner.recipes.code_embedder.quality``): every function and method of the held-out
packages (rich, click, httpx, starlette, pyyaml, jinja2; excluded from the training pairs by
construction), docstring removed; each function whose docstring's first sentence is unique is
a query for it. Rankers over the same queries and corpus:

* BM25: bm25s (Lucene variant, k1 1.5, b 0.75) over ``code_terms`` (identifiers split), the
  reference; and "client BM25", the index client's own (``codeindex.client.lexical``, stdlib),
  which should agree with it.
* dense: the embedder's cosine similarity (default: the shipped artifact).
* hybrid RRF: reciprocal-rank fusion of bm25s and dense (1 / (60 + rank), summed).
* hybrid 0.5, the index: what ``flywheel index search`` does (``codeindex.client.search``): the
  dense top 50 and the client BM25's top 50 as candidates, fused by
  ``codeindex.client.ranking.weighted_fusion`` (0.5 x cosine + 0.5 x BM25 / the query's best
  BM25 score). The weight is fixed a priori, not tuned on this set; a sweep of it is printed
  for reference.

Target: the index's MRR@10 ≥ 1.1 x BM25's. Prints a table and writes
``$FLYWHEEL_HOME/bench/index_quality.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from codeindex.client.ranking import LEXICAL_WEIGHT
from codeindex.embedding.embedder import load_default_embedder, load_embedder
from flywheel.settings import Settings
from learner.recipes.code_embedder import quality

HYBRID_WEIGHT = LEXICAL_WEIGHT
INDEX = f"hybrid {HYBRID_WEIGHT} (the index)"
TARGET = 1.1


def run(embedder_dir: Path | None, batch: int) -> dict[str, Any]:
    embedder = load_embedder(embedder_dir) if embedder_dir else load_default_embedder()
    bench = quality.held_out_set()
    started = time.perf_counter()
    dense = quality.dense_scores(embedder, bench.corpus, bench.queries, batch)
    encode_s = time.perf_counter() - started
    lexical = quality.bm25_scores(bench.corpus, bench.queries)
    client = quality.client_bm25_scores(bench.corpus, bench.queries)
    rankers = {
        "bm25": lexical,
        "client bm25": client,
        "dense": dense,
        "hybrid rrf": quality.reciprocal_rank_fusion(dense, lexical),
        INDEX: quality.index_hybrid(dense, client, HYBRID_WEIGHT),
    }
    results = {
        name: quality.metrics(quality.ranks_of(scores, bench.relevant))
        for name, scores in rankers.items()
    }
    sweep = {
        f"{w:.1f}": quality.metrics(
            quality.ranks_of(quality.index_hybrid(dense, client, w), bench.relevant)
        )["mrr@10"]
        for w in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    }
    index = results[INDEX]["mrr@10"]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "embedder": {
            "name": embedder.name,
            "version": embedder.version,
            "dim": embedder.dim,
            "device": str(embedder.device),
        },
        "corpus_functions": len(bench.corpus),
        "queries": len(bench.queries),
        "packages": bench.packages,
        "results": results,
        "lexical_weight_sweep_mrr@10": sweep,
        "index_over_bm25": index / results["bm25"]["mrr@10"],
        "target": TARGET,
        "encode_s": encode_s,
    }


def _commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"{report['queries']} queries over {report['corpus_functions']} functions")
    for column in ("ranker", "MRR@10", "recall@10", "MRR vs BM25"):
        table.add_column(column, justify="left" if column == "ranker" else "right")
    base = report["results"]["bm25"]["mrr@10"]
    for name, m in report["results"].items():
        table.add_row(name, f"{m['mrr@10']:.3f}", f"{m['recall@10']:.3f}",
                      f"{m['mrr@10'] / base:.2f}x")  # fmt: skip
    console = Console()
    console.print(table)
    ratio = report["index_over_bm25"]
    verdict = "meets" if ratio >= report["target"] else "misses"
    console.print(
        f"index (hybrid {HYBRID_WEIGHT}) = {ratio:.2f}x BM25: {verdict} the {report['target']}x "
        f"target; lexical weight sweep (for reference) {report['lexical_weight_sweep_mrr@10']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--embedder",
        type=Path,
        default=None,
        help="an embedder directory; default: the shipped one",
    )
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    report = run(args.embedder, args.batch)
    _print(report)
    out = Settings.from_env().home / "bench" / "index_quality.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
