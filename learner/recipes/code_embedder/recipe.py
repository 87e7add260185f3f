"""The code embedder's recipe, top to bottom: mine (query, code) pairs from this machine's
Python sources (held-out packages excluded) → train a BPE tokenizer on them → a fresh encoder
from the config → contrastive training → measure retrieval on the held-out packages → save the
HF layout with ``embedder.json`` → (with ``flywheel learn``) publish, register and promote it.

Also ``python -m learner.recipes.code_embedder.recipe --out DIR`` (no broker: writes the
directory only; how ``codeindex/embedding/artifact/`` is built).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from codeindex.client.ranking import LEXICAL_WEIGHT
from codeindex.embedding.embedder import Embedder, EmbedderManifest
from codeindex.embedding.model import build_encoder
from codeindex.embedding.tokenizer import train_code_tokenizer
from learner.recipes import RecipeRun, overridden
from learner.recipes.code_embedder import quality
from learner.recipes.code_embedder.config import DEFAULT_CONFIG, CodeEmbedderConfig, PairsConfig
from learner.recipes.code_embedder.pairs import (
    HELD_OUT,
    CodePair,
    mine_functions,
    source_roots,
    training_pairs,
)
from learner.recipes.code_embedder.train import TrainReport, train_contrastive
from model_registry.artifacts import publish_artifact
from model_registry.registry import ModelRegistry
from policies.agent_lm import parameter_count

REWARD_FN = "contrastive@1"  # trained on mined pairs, not on a reward
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class TrainedEmbedder:
    embedder: Embedder
    report: TrainReport
    metrics: dict[str, float]


def mined_pairs(run_dir: Path, config: PairsConfig, log: Callable[[str], None]) -> list[CodePair]:
    """The training pairs (cached in ``run_dir/pairs.jsonl``: mining every source parses
    every file, ~1 min; ``config.packages`` restricts the sources)."""
    cache = run_dir / "pairs.jsonl"
    if cache.is_file():
        return [CodePair(**json.loads(line)) for line in cache.read_text().splitlines()]
    started = time.monotonic()
    training, held_out = mine_functions(source_roots(), config.packages)
    pairs = training_pairs(training, held_out, max_per_package=config.max_per_package)
    random.Random(config.seed).shuffle(pairs)
    pairs = pairs[: config.max_pairs]
    run_dir.mkdir(parents=True, exist_ok=True)
    cache.write_text("".join(json.dumps(dataclasses.asdict(p)) + "\n" for p in pairs))
    log(
        f"mined {len(training):,} functions ({len(held_out):,} held out) in "
        f"{time.monotonic() - started:.0f}s: {len(pairs):,} pairs"
    )
    return pairs


def train_embedder(
    config: CodeEmbedderConfig,
    run_dir: Path,
    *,
    version: str = "0",
    pairs: list[CodePair] | None = None,
    evaluate: bool = True,
    log: Callable[[str], None] = print,
) -> TrainedEmbedder:
    """Train the embedder of ``config`` (pairs mined into ``run_dir`` unless given) and, with
    ``evaluate``, measure it on the held-out packages (its manifest carries the metrics)."""
    pairs = pairs if pairs is not None else mined_pairs(run_dir, config.pairs, log)
    rng = random.Random(config.pairs.seed)
    queries = [
        p.name_query if rng.random() < config.pairs.name_query_share else p.query for p in pairs
    ]
    codes = [p.code for p in pairs]
    texts = [p.query for p in pairs] + codes
    tokenizer_texts = rng.sample(texts, min(len(texts), config.pairs.tokenizer_texts))
    tokenizer = train_code_tokenizer(tokenizer_texts, config.model.vocab_size)
    torch.manual_seed(config.seed)
    model = build_encoder(config.model, tokenizer.pad_token_id)
    packages = Counter(p.package for p in pairs)
    manifest = EmbedderManifest(
        name=config.model_name,
        version=version,
        dim=config.model.hidden_size,
        max_tokens=config.model.max_tokens,
        recipe_commit=_commit(),
        training={
            "sources": _sources(config.pairs),
            "held_out": list(HELD_OUT),
            "pairs": len(pairs),
            "packages": len(packages),
            "top_packages": dict(packages.most_common(10)),
            "config_digest": config.digest(),
        },
    )
    embedder = Embedder(model, tokenizer, manifest, device="cpu")
    log(f"{parameter_count(model):,} parameters, vocabulary {len(tokenizer)}, {len(pairs):,} pairs")
    report = _train(embedder, queries, codes, config)
    log(
        f"trained {report.steps} steps ({report.pairs_seen:,} pairs) in {report.seconds:.0f}s, "
        f"loss {report.losses[0]:.3f} → {sum(report.losses[-20:]) / len(report.losses[-20:]):.3f}"
    )
    metrics: dict[str, float] = {"train_loss": report.losses[-1], "train_steps": report.steps}
    if evaluate:
        metrics |= held_out_metrics(embedder)
        log("held out: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(metrics.items())))
    embedder.manifest = dataclasses.replace(manifest, metrics=metrics)
    return TrainedEmbedder(embedder, report, metrics)


def held_out_metrics(embedder: Embedder) -> dict[str, float]:
    """MRR@10 and recall@10 of BM25, the embedder, and the index's hybrid of them (the
    search's own hybrid, as bench/index_quality.py measures it)."""
    bench = quality.held_out_set()
    dense = quality.dense_scores(embedder, bench.corpus, bench.queries)
    bm25 = quality.bm25_scores(bench.corpus, bench.queries)
    fused = quality.index_hybrid(dense, quality.client_bm25_scores(bench.corpus, bench.queries),
                                 LEXICAL_WEIGHT)  # fmt: skip
    out: dict[str, float] = {"heldout_queries": float(len(bench.queries))}
    for ranker, scores in (("bm25", bm25), ("dense", dense), ("hybrid", fused)):
        for metric, value in quality.metrics(quality.ranks_of(scores, bench.relevant)).items():
            out[f"heldout_{ranker}_{metric}"] = value
    return out


def _train(
    embedder: Embedder, queries: list[str], codes: list[str], config: CodeEmbedderConfig
) -> TrainReport:
    columns = (TextColumn("training"), BarColumn(), TextColumn("{task.description}"))
    with Progress(*columns, TimeElapsedColumn(), transient=True) as progress:
        task = progress.add_task("", total=1.0)

        def on_step(report: TrainReport, done: float) -> None:
            recent = report.losses[-20:]
            description = f"step {report.steps} loss {sum(recent) / len(recent):.3f}"
            progress.update(task, completed=done, description=description)

        return train_contrastive(
            embedder, queries, codes, config.train, seed=config.seed, on_step=on_step
        )


def _sources(config: PairsConfig) -> str:
    everything = "the standard library and site-packages (sysconfig paths)"
    if not config.packages:
        return everything
    return f"{', '.join(config.packages)} in {everything}"


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def main(run: RecipeRun) -> None:
    """`flywheel learn --recipe code-embedder`: train, measure, publish, register and promote a
    version of the config's model (a killed run re-mines nothing: pairs are cached)."""
    config = overridden(CodeEmbedderConfig.load(run.config_path or DEFAULT_CONFIG), run)
    registry = ModelRegistry(run.kafka_config, run.codec)
    run_dir = run.paths.runs_root / "code-embedder" / config.digest()
    version = registry.next_version(config.model_name)
    run.log(f"code-embedder: {config.model_name} v{version}, run {run_dir}")
    trained = train_embedder(config, run_dir, version=str(version), log=run.log)
    out = run_dir / f"v{version}"
    trained.embedder.save(out)
    artifact = publish_artifact(run.paths.models_root, config.model_name, version, out)
    mrr = trained.metrics.get("heldout_hybrid_mrr@10", float("nan"))
    registry.register(
        config.model_name, artifact, parent_version=None, reward_fn=REWARD_FN,
        metrics=trained.metrics, version=version,
        reason=f"contrastive training on mined pairs: held-out hybrid MRR@10 {mrr:.3f}",
    )  # fmt: skip
    registry.promote(config.model_name, version, reason="a freshly trained code embedder")
    run.log(f"{config.model_name} v{version} registered and promoted: {artifact.uri}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Train the code embedder into a directory.")
    parser.add_argument("--out", type=Path, required=True, help="where to save it (HF layout)")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--run-dir", type=Path, default=Path(".flywheel/runs/code-embedder"))
    parser.add_argument("--version", default="1")
    args = parser.parse_args()
    config = CodeEmbedderConfig.load(args.config)
    trained = train_embedder(config, args.run_dir / config.digest(), version=args.version)
    trained.embedder.save(args.out)
    print(f"saved to {args.out}")
