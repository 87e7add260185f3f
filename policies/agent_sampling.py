"""Sampling completions from the agent LM, with the log-probability of every generated token.

:func:`sample_ids` runs `transformers`' ``generate`` once for a whole batch of token-id contexts,
left-padded, with the KV cache; :func:`sample` is it on text prompts, each repeated ``n`` times
(a group of parallel trials), and the episode runner on multi-turn contexts. The behaviour
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
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    flat = sample_ids(model, tokenizer, [ids for ids in encoded for _ in range(n)], params,
                      seed=seed)  # fmt: skip
    return [flat[p * n : (p + 1) * n] for p in range(len(prompts))]


@torch.inference_mode()
def sample_ids(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    seed: int | None = None,
) -> list[Completion]:
    """One completion of each context, given as token ids (an episode's prompt and turns so
    far: never re-tokenized), in order, in one ``generate`` call: contexts left-padded with the
    pad id and masked out. PolicyError for an empty context (nothing to condition on)."""
    if not contexts:
        return []
    if any(len(c) == 0 for c in contexts):
        raise PolicyError("sample_ids needs at least one token in every context")
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    width = max(len(c) for c in contexts)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor(
        [[pad] * (width - len(c)) + list(c) for c in contexts], dtype=torch.long, device=device
    )
    attention = torch.tensor(
        [[0] * (width - len(c)) + [1] * len(c) for c in contexts], dtype=torch.long, device=device
    )
    greedy = params.temperature == 0
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention,
        do_sample=not greedy,
        temperature=None if greedy else params.temperature,
        top_p=None if greedy else params.top_p,
        top_k=None,  # transformers' default top_k=50 would change the distribution
        max_new_tokens=params.max_new_tokens,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
        return_dict_in_generate=True,
        output_scores=True,
    )
    generated = out.sequences[:, width:]  # (batch, steps)
    logprobs = token_logprobs(out.scores, generated)
    completions = []
    for row, context in enumerate(contexts):
        tokens, lps = _until_eos(generated[row].tolist(), logprobs[row].tolist(), tokenizer)
        finished = bool(tokens) and tokens[-1] == tokenizer.eos_token_id
        body = tokens[:-1] if finished else tokens
        text = tokenizer.decode(body, skip_special_tokens=True)
        completions.append(Completion(tuple(context), tuple(tokens), tuple(lps), text, finished))
    return completions


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
