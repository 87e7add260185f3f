"""Objectives of the agent LM over token windows (`learner.token_windows`): supervised
next-token cross-entropy on the target tokens (the warm-up before RL).

Each implements `learner.microbatch.TrainingTask`: ``loss`` returns (summed loss over the
microbatch's target tokens, number of target tokens), so the trainer's step divides by the
global batch's *tokens*: its ``tok`` durations count real trained tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


def attention_mask(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(B, L) long: 1 for the first ``lengths[b]`` positions of each right-padded row."""
    positions = torch.arange(seq_len, device=lengths.device)
    return (positions.unsqueeze(0) < lengths.unsqueeze(1)).long()


def next_token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    lengths: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """(B, L-1): log-prob of token t+1 given tokens <= t under logits / ``temperature`` (one,
    or (B,): each row's own), for right-padded rows of ``lengths`` tokens; index t scores the
    windows' position t+1."""
    attention = attention_mask(lengths, input_ids.shape[1])
    logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float()
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.reshape(-1, 1, 1)
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


class CausalLMTask:
    """Supervised fine-tuning: cross-entropy of every target token given what precedes it."""

    def loss(
        self, model: nn.Module, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        target = batch["target"][:, 1:].bool()  # (B, L-1): is token t + 1 trained
        logprobs = next_token_logprobs(model, batch["input_ids"].long(), batch["lengths"])
        return -(logprobs * target).sum(), target.sum()
