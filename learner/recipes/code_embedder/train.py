"""Contrastive training of the bi-encoder: symmetric InfoNCE with in-batch negatives.

Each step takes ``batch_size`` (query, code) pairs; the query and the code go through the same
encoder, and pair i's code must score highest against query i among the batch's codes (and the
other way round). AdamW, linear warm-up then linear decay to zero over the duration.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from codeindex.embedding.embedder import Embedder
from learner.recipes.code_embedder.config import ContrastiveConfig


def info_nce(queries: torch.Tensor, codes: torch.Tensor, temperature: float) -> torch.Tensor:
    """Symmetric InfoNCE of unit vectors ``queries`` and ``codes`` [batch, dim], row i of each
    a positive pair and every other row a negative."""
    logits = queries @ codes.T / temperature  # [batch, batch]
    labels = torch.arange(len(queries), device=queries.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


@dataclass
class TrainReport:
    steps: int = 0
    pairs_seen: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)  # one per step


def train_contrastive(
    embedder: Embedder,
    queries: Sequence[str],
    codes: Sequence[str],
    config: ContrastiveConfig,
    *,
    seed: int = 0,
    on_step: Callable[[TrainReport, float], None] | None = None,
) -> TrainReport:
    """Train ``embedder``'s model in place on the pairs (``queries[i]``, ``codes[i]``) for
    ``config.duration`` (batches or wall time); ``on_step(report, progress 0..1)`` after each
    step. The model is left in eval mode."""
    torch.set_num_threads(config.threads)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    tokenizer, limit = embedder.tokenizer, embedder.manifest.max_tokens
    query_ids = tokenizer(
        list(queries), truncation=True, max_length=min(config.query_tokens, limit)
    )
    code_ids = tokenizer(list(codes), truncation=True, max_length=min(config.code_tokens, limit))
    model = embedder.model
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    report = TrainReport()
    order: list[int] = []
    started = time.monotonic()
    model.train()
    while (done := _progress(config, report)) < 1.0:
        batch_size = min(config.batch_size, len(queries))
        if len(order) < batch_size:  # a new epoch: reshuffle
            order = list(range(len(queries)))
            rng.shuffle(order)
        rows, order = order[:batch_size], order[batch_size:]
        for group in optimizer.param_groups:
            group["lr"] = config.lr * _lr_factor(config, report.steps, done)
        q = embedder.forward(*embedder.pad([query_ids["input_ids"][i] for i in rows]))
        c = embedder.forward(*embedder.pad([code_ids["input_ids"][i] for i in rows]))
        loss = info_nce(q, c, config.temperature)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # untyped in torch
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        report.steps += 1
        report.pairs_seen += len(rows)
        report.losses.append(float(loss.detach()))
        report.seconds = time.monotonic() - started
        if on_step is not None:
            on_step(report, min(1.0, _progress(config, report)))
    model.eval()  # type: ignore[no-untyped-call]  # untyped in transformers
    return report


def _progress(config: ContrastiveConfig, report: TrainReport) -> float:
    """How much of the duration is done, 0..1."""
    duration = config.duration
    if duration.unit.is_time:
        return report.seconds / duration.seconds
    return report.steps / duration.value


def _lr_factor(config: ContrastiveConfig, step: int, progress: float) -> float:
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    return max(0.0, 1.0 - progress)
