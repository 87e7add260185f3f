"""Sampling completions from the agent LM, with the log-probability of every generated token.

:func:`sample` runs `transformers`' ``generate`` once for a whole batch: every prompt repeated
``n`` times (a group of parallel trials), left-padded, with the KV cache. The behaviour
log-probability of a token is taken under the distribution it was drawn from: the logits
divided by the temperature, after top-p filtering (``top_p=1``, the default, filters nothing);
greedy decoding (``temperature=0``) reports the plain softmax. :func:`nucleus_filter` is that
top-p filter, row by row, so that a learner recomputes the same distribution. A completion ends
at the first end-of-sequence token (kept, with its log-prob: the learner trains the decision to
stop) or at ``max_new_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from policies.errors import PolicyError


@dataclass(frozen=True)
class SamplingParams:
    """How completions are drawn, for trials, the eval suite and served requests alike.

    ``temperature=0`` is greedy (the eval suite's pass@1). ``stop`` strings and ``n`` (choices per
    request) are read by the serving engine (``fleet.agent_engine``); :func:`sample` takes its
    group size as an argument and ignores both. The OpenAI API's ``max_tokens`` maps to
    ``max_new_tokens``. Positional calls rely on the order of the first three fields.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 32
    stop: tuple[str, ...] = ()
    n: int = 1

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_new_tokens < 1 or self.n < 1:
            raise PolicyError(
                f"sampling needs temperature >= 0, top_p in (0, 1], max_new_tokens >= 1 and "
                f"n >= 1, got {self}"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Completion:
    """One trial's tokens: ``token_ids[i]`` was drawn with log-probability ``logprobs[i]``."""

    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str  # decoded, without the end-of-sequence token
    finished: bool  # ended with end-of-sequence (not cut at max_new_tokens)


@torch.inference_mode()
def sample(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    n: int,
    params: SamplingParams,
    *,
    seed: int | None = None,
) -> list[list[Completion]]:
    """``n`` completions of each prompt, as one list per prompt (in order)."""
    if not prompts or n < 1:
        return [[] for _ in prompts]
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    batch = tokenizer(list(prompts), padding=True, return_tensors="pt", add_special_tokens=False)
    input_ids = batch["input_ids"].repeat_interleave(n, dim=0).to(device)
    attention = batch["attention_mask"].repeat_interleave(n, dim=0).to(device)
    greedy = params.temperature == 0
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention,
        do_sample=not greedy,
        temperature=None if greedy else params.temperature,
        top_p=None if greedy else params.top_p,
        top_k=None,  # transformers' default top_k=50 would change the distribution
        max_new_tokens=params.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        return_dict_in_generate=True,
        output_scores=True,
    )
    generated = out.sequences[:, input_ids.shape[1] :]  # (batch, steps)
    logprobs = token_logprobs(out.scores, generated)
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    ids = batch["input_ids"].tolist()
    results: list[list[Completion]] = []
    for p in range(len(prompts)):
        prompt_ids = tuple(ids[p][len(ids[p]) - lengths[p] :])  # drop the left padding
        group = []
        for row in range(p * n, (p + 1) * n):
            tokens, lps = _until_eos(generated[row].tolist(), logprobs[row].tolist(), tokenizer)
            finished = bool(tokens) and tokens[-1] == tokenizer.eos_token_id
            body = tokens[:-1] if finished else tokens
            text = tokenizer.decode(body, skip_special_tokens=True)
            group.append(Completion(prompt_ids, tuple(tokens), tuple(lps), text, finished))
        results.append(group)
    return results


def token_logprobs(scores: Sequence[torch.Tensor], generated: torch.Tensor) -> torch.Tensor:
    """(batch, steps) log-probability of each generated token under the distribution it was
    drawn from: ``scores[t]`` is generate's (batch, vocab) processed logits of step t (divided
    by the temperature, -inf where top-p filtered), ``generated`` the (batch, steps) tokens."""
    stacked = torch.stack(tuple(scores), dim=1).float()  # (batch, steps, vocab)
    return torch.log_softmax(stacked, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)


def nucleus_filter(
    logits: torch.Tensor, top_p: torch.Tensor, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """``logits`` (..., vocab), already divided by the temperature, with -inf where top-p
    sampling at ``top_p`` (broadcast to (..., 1); float64 for the exact threshold) leaves a
    token out, as `transformers`' ``TopPLogitsWarper`` does: tokens sorted by logit, those whose
    cumulative probability from the bottom stays <= 1 - top_p removed, the most likely kept.
    Entries with ``top_p`` >= 1 are untouched (generate adds no filter then; the rule would drop
    tokens whose probability underflows to 0). ``keep`` (...) int64: a token never removed
    (the one that was drawn: it was inside the sampler's nucleus, and float noise must not give
    it probability 0 and an infinite log-ratio)."""
    # transformers compares float32 cumulative sums with the Python double 1 - top_p; the same
    # threshold here is (1 - top_p) in float64, then rounded to the logits' dtype.
    threshold = (1.0 - top_p.double()).to(logits.dtype)
    ascending, order = torch.sort(logits, descending=False)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = (cumulative <= threshold) & (top_p < 1)
    drop_sorted[..., -1:] = False  # min_tokens_to_keep=1: the most likely token stays
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    if keep is not None:
        drop = drop.scatter(-1, keep.unsqueeze(-1), False)
    return logits.masked_fill(drop, float("-inf"))


def _until_eos(
    tokens: list[int], logprobs: list[float], tokenizer: Any
) -> tuple[list[int], list[float]]:
    """The tokens up to and including the first end-of-sequence (the rest is padding)."""
    eos = tokenizer.eos_token_id
    if eos in tokens:
        end = tokens.index(eos) + 1
        return tokens[:end], logprobs[:end]
    return tokens, logprobs
