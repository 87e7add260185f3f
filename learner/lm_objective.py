"""Objectives of the agent LM over token windows (`learner.token_windows`): supervised
next-token cross-entropy on the target tokens (the warm-up before RL).

Each implements `learner.microbatch.TrainingTask`: ``loss`` returns (summed loss over the
microbatch's target tokens, number of target tokens), so the trainer's step divides by the
global batch's *tokens*: its ``tok`` durations count real trained tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn


def attention_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(B, L) long: 1 for the first ``lengths[b]`` positions of each right-padded row."""
    positions = torch.arange(seq_len, device=lengths.device)
    return (positions.unsqueeze(0) < lengths.unsqueeze(1)).long()


class CausalLMTask:
    """Supervised fine-tuning: cross-entropy of every target token given what precedes it."""

    def loss(
        self, model: nn.Module, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids = batch["input_ids"].long()
        target = batch["target"][:, 1:].bool()  # (B, L-1): is token t + 1 trained
        attention = attention_mask(batch["lengths"], input_ids.shape[1])
        logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float()
        losses = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1), reduction="none"
        ).reshape(target.shape)
        count = target.sum()
        return (losses * target).sum(), count
