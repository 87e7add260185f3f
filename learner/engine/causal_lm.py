"""Objectives of the agent LM over token windows (`learner.data.token_windows`): supervised
next-token cross-entropy on the target tokens (the warm-up before RL).

Each implements `learner.engine.microbatch.TrainingTask`: ``loss`` returns (summed loss over the
microbatch's target tokens, number of target tokens), so the trainer's step divides by the
global batch's *tokens*: its ``tok`` durations count real trained tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from policies.agent_sampling import nucleus_filter


def attention_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(B, L) long: 1 for the first ``lengths[b]`` positions of each right-padded row."""
    positions = torch.arange(seq_len, device=lengths.device)
    return (positions.unsqueeze(0) < lengths.unsqueeze(1)).long()


LENGTH_BUCKETS = 4  # forward passes per batch, rows grouped by length (see next_token_logprobs)


def next_token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    lengths: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    *,
    top_p: torch.Tensor | None = None,
    buckets: int = LENGTH_BUCKETS,
) -> torch.Tensor:
    """(B, L-1): log-prob of token t+1 given tokens <= t under logits / ``temperature`` (one,
    or (B,): each row's own), for right-padded rows of ``lengths`` tokens; index t scores the
    windows' position t+1 (past a row's end, values mean nothing). With ``top_p`` (B,), each
    row's distribution is the one its sampler drew from: the nucleus filter of
    `policies.agent_sampling.nucleus_filter` after the temperature (rows with top_p 1 are
    unfiltered), the scored token always kept.

    Rows are sorted by length and run in ``buckets`` forward passes, each cut to its longest
    row: a window's rows are padded to ``seq_len`` (128) but half of them are under 60 tokens,
    and causal attention never lets padding reach a real position, so the values are the same
    as one pass over the padded batch at about half the work (2.0x forward + backward on a
    demo window's batch, 4 buckets on 1 thread). DDP accepts several forwards per backward."""
    rows, width = input_ids.shape
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.reshape(-1, 1, 1)
    out = torch.zeros((rows, width - 1), device=input_ids.device)
    for chunk in torch.argsort(lengths).tensor_split(buckets):
        cut = int(lengths[chunk].max()) if len(chunk) else 0
        if cut < 2:  # padding rows (length 0) and one-token rows score nothing
            continue
        ids = input_ids[chunk, :cut]
        attention = attention_mask(lengths[chunk], cut)
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        scale = temperature[chunk] if isinstance(temperature, torch.Tensor) else temperature
        scaled = logits / scale
        targets = ids[:, 1:]
        if top_p is not None and bool((top_p[chunk] < 1).any()):
            scaled = nucleus_filter(scaled, top_p[chunk].reshape(-1, 1, 1), keep=targets)
        logprobs = torch.log_softmax(scaled, dim=-1)
        out[chunk, : cut - 1] = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return out


class CausalLMTask:
    """Supervised fine-tuning: cross-entropy of every target token given what precedes it."""

    def loss(
        self, model: nn.Module, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        target = batch["target"][:, 1:].bool()  # (B, L-1): is token t + 1 trained
        logprobs = next_token_logprobs(model, batch["input_ids"].long(), batch["lengths"])
        return -(logprobs * target).sum(), target.sum()
