"""The sequences decoding together in the agent engine's continuous batch: one KV cache whose
rows join at a token boundary and leave when they finish (:mod:`fleet.agent_engine`).

Every row gets one token per step, so a row's cached tokens always end at the batch's right
edge and padding is only ever on the left: a joining row is prefilled alone (reusing a cached
prefix when one is given), then its KV cache and the batch's are left-padded to the wider of the
two and concatenated; a leaving row is dropped by index and the columns that only padding fills
any more are cut off. Positions are explicit (a row's next position is its count of tokens),
so the padding never shifts a row's rotary positions: a row decodes the tokens it would alone.

Each row carries its own temperature and top-p: :func:`draw` divides the logits, applies
``policies.agent_sampling.nucleus_filter`` (top-p as `transformers`' warper does) and samples,
greedy rows (temperature 0) take the argmax; the log-prob reported is that of the distribution
the token was drawn from (greedy: the plain softmax), as ``token_logprobs`` reports for
``generate``.

A model whose ``generation_config`` sets ``sequence_bias`` gets it applied before sampling, as
``generate`` applies it (tests script a tiny model's output with it); the engine honours no
other generation-config processor (the checkpoints trained here set none).

Shapes: B rows, W cached columns (padding included), V vocabulary; ``mask`` (B, W) is 1 where a
column holds a row's token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache, SequenceBiasLogitsProcessor

from policies.agent_sampling import nucleus_filter


def draw(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B,), log-probs (B,)) from ``logits`` (B, V) with each row's ``temperature`` and
    ``top_p`` (B,): sampled where the temperature is positive, the argmax where it is 0."""
    logits = logits.float()
    greedy = temperature == 0
    scaled = logits / torch.where(greedy, 1.0, temperature).unsqueeze(-1)
    filtered = nucleus_filter(scaled, torch.where(greedy, 1.0, top_p).unsqueeze(-1))
    logp = torch.log_softmax(filtered, dim=-1)
    tokens = logits.argmax(dim=-1)
    if not bool(greedy.all()):
        sampled = torch.multinomial(logp.exp(), num_samples=1).squeeze(-1)
        tokens = torch.where(greedy, tokens, sampled)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


class RunningBatch:
    """The KV cache and per-row decoding state of one model's running rows (see the module
    docstring). Rows are numbered 0..rows-1 in the order they joined and survive :meth:`keep`."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self._clear()

    def _clear(self) -> None:
        self.cache: Any = None  # a DynamicCache of (B, heads, W, dim) per layer
        self.mask = torch.zeros(0, 0, dtype=torch.long, device=self.device)  # (B, W)
        self.positions = torch.zeros(0, dtype=torch.long, device=self.device)  # (B,) tokens held
        self.last = torch.zeros(0, dtype=torch.long, device=self.device)  # (B,) next input
        self.temperature = torch.zeros(0, device=self.device)
        self.top_p = torch.ones(0, device=self.device)
        self.history: list[list[int]] = []  # each row's tokens (for a sequence bias)

    @property
    def rows(self) -> int:
        return int(self.last.shape[0])

    @torch.inference_mode()
    def join(
        self,
        prompt_ids: Sequence[int],
        n: int,
        temperature: float,
        top_p: float,
        prefix: tuple[int, DynamicCache | None] = (0, None),
    ) -> tuple[list[int], list[float]]:
        """Prefill ``prompt_ids`` (from ``prefix``: (k, the KV of its first k tokens) on) and
        add ``n`` rows that continue it; their first tokens and log-probs."""
        done, cache = prefix
        cache = cache if cache is not None else DynamicCache(config=self.model.config)
        length = len(prompt_ids)
        ids = torch.tensor([list(prompt_ids[done:])], device=self.device)
        positions = torch.arange(done, length, device=self.device).unsqueeze(0)
        out = self.model(input_ids=ids, position_ids=positions, past_key_values=cache,
                         use_cache=True)  # fmt: skip
        temps = torch.full((n,), float(temperature), device=self.device)
        tops = torch.full((n,), float(top_p), device=self.device)
        histories = [list(prompt_ids) for _ in range(n)]
        logits = self._biased(out.logits[:, -1].expand(n, -1), histories)
        tokens, logprobs = draw(logits, temps, tops)
        self._append(out.past_key_values, n, length, tokens, temps, tops)
        self.history += [[*h, t] for h, t in zip(histories, tokens.tolist(), strict=True)]
        return tokens.tolist(), logprobs.tolist()

    @torch.inference_mode()
    def step(self) -> tuple[list[int], list[float]]:
        """Feed every row its last token; each row's next token and log-prob."""
        if self.cache is None or not self.rows:
            return [], []
        ones = torch.ones(self.rows, 1, dtype=torch.long, device=self.device)
        self.mask = torch.cat([self.mask, ones], dim=1)
        out = self.model(
            input_ids=self.last.unsqueeze(1),
            attention_mask=self.mask,
            position_ids=self.positions.unsqueeze(1),
            past_key_values=self.cache,
            use_cache=True,
        )
        self.positions = self.positions + 1
        logits = self._biased(out.logits[:, -1], self.history)
        tokens, logprobs = draw(logits, self.temperature, self.top_p)
        self.last = tokens
        for history, token in zip(self.history, tokens.tolist(), strict=True):
            history.append(token)
        return tokens.tolist(), logprobs.tolist()

    def _biased(self, logits: torch.Tensor, histories: Sequence[Sequence[int]]) -> torch.Tensor:
        """``logits`` (B, V) with the model's ``sequence_bias`` applied to each row's tokens."""
        config = getattr(self.model, "generation_config", None)
        bias = getattr(config, "sequence_bias", None)
        if not bias:
            return logits
        width = max(len(h) for h in histories)
        ids = torch.tensor([[0] * (width - len(h)) + list(h) for h in histories],
                           device=self.device)  # fmt: skip
        biased: torch.Tensor = SequenceBiasLogitsProcessor(bias)(ids, logits.float())
        return biased

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (in that order; the others left the batch)."""
        if self.cache is None:
            return
        if not rows:
            self._clear()
            return
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        self.mask, self.positions = self.mask[index], self.positions[index]
        self.last, self.temperature, self.top_p = (
            self.last[index], self.temperature[index], self.top_p[index]
        )  # fmt: skip
        self.history = [self.history[r] for r in rows]
        held = self.mask.any(dim=0).nonzero()
        start = int(held[0]) if len(held) else self.mask.shape[1]  # columns of padding only
        self.mask = self.mask[:, start:]
        layer: Any
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, start:]
            layer.values = layer.values[index, :, start:]

    def row_cache(self, row: int) -> tuple[int, DynamicCache]:
        """(k, a DynamicCache of row ``row``'s k cached tokens): what the prefix cache keeps."""
        if self.cache is None:
            raise IndexError("the batch is empty")
        held = int(self.positions[row])
        copy = DynamicCache(config=self.model.config)
        layers: list[Any] = list(self.cache.layers)
        for i, layer in enumerate(layers):
            copy.update(layer.keys[row : row + 1, :, -held:].clone(),
                        layer.values[row : row + 1, :, -held:].clone(), i)  # fmt: skip
        return held, copy

    def _append(
        self,
        cache: Any,
        n: int,
        length: int,
        tokens: torch.Tensor,
        temps: torch.Tensor,
        tops: torch.Tensor,
    ) -> None:
        """Left-pad the batch and the new rows' cache (1, heads, length, dim) to a common width
        and stack them."""
        width = max(length, self.mask.shape[1])
        new_mask = torch.ones(n, length, dtype=torch.long, device=self.device)
        self.mask = torch.cat([_left_pad(self.mask, width), _left_pad(new_mask, width)])
        fresh = self.cache is None
        if fresh:
            self.cache = DynamicCache(config=self.model.config)
        layers: list[Any] = list(cache.layers)  # DynamicLayer: keys, values (1, heads, T, dim)
        for i, layer in enumerate(layers):
            keys = _left_pad(layer.keys, width, dim=-2).expand(n, -1, -1, -1)
            values = _left_pad(layer.values, width, dim=-2).expand(n, -1, -1, -1)
            if fresh:
                self.cache.update(keys.contiguous(), values.contiguous(), i)
                continue
            mine: Any = self.cache.layers[i]
            mine.keys = torch.cat([_left_pad(mine.keys, width, dim=-2), keys])
            mine.values = torch.cat([_left_pad(mine.values, width, dim=-2), values])
        added = torch.full((n,), length, dtype=torch.long, device=self.device)
        self.positions = torch.cat([self.positions, added])
        self.last = torch.cat([self.last, tokens])
        self.temperature = torch.cat([self.temperature, temps])
        self.top_p = torch.cat([self.top_p, tops])


def _left_pad(tensor: torch.Tensor, width: int, dim: int = -1) -> torch.Tensor:
    """``tensor`` with zeros prepended along ``dim`` (-1 or -2) up to ``width``."""
    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    return F.pad(tensor, (missing, 0) if dim == -1 else (0, 0, missing, 0))
