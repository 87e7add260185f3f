"""KV-cache reuse across requests: a bounded LRU of prompt KV caches, looked up by token prefix.

`transformers` keeps a KV cache within one ``generate`` call; across calls it has nothing, so a
request whose prompt starts with a long prefix an earlier request already read (a system prompt,
a file, the conversation so far) pays that prefill again. :class:`PrefixCache` keeps the KV cache
of recent prompts (``DynamicCache``, cropped to the prompt) and hands a request a copy of the
longest cached prefix of its prompt, cropped to that prefix: ``generate`` then prefills only
the rest. Entries belong to one loaded model (a hot swap makes the old ones unreachable; LRU
drops them). Memory is bounded by tokens held in all (bytes = tokens x KV bytes per token).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ground.sized_lru import SizedLRU


@dataclass
class PrefixCacheStats:
    lookups: int = 0
    hits: int = 0
    reused_tokens: int = 0
    evictions: int = 0


@dataclass
class _Entry:
    model: Any  # held so that id(model) cannot be reused while the entry lives
    tokens: np.ndarray
    cache: Any  # a DynamicCache of exactly len(tokens) positions


class PrefixCache:
    """The KV caches of up to ``max_tokens`` prompt tokens in all, reused from ``min_tokens``
    shared tokens on (a shorter match saves less than the copy costs)."""

    def __init__(self, max_tokens: int = 65_536, min_tokens: int = 32) -> None:
        if max_tokens < 1 or min_tokens < 1:
            raise ValueError("max_tokens and min_tokens must be positive")
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self._stats = PrefixCacheStats()
        self._entries: SizedLRU[tuple[int, bytes], _Entry] = SizedLRU(
            max_tokens, lambda entry: len(entry.tokens)
        )
        self._lock = threading.Lock()  # the stats' counters

    @property
    def held_tokens(self) -> int:
        return self._entries.held

    @property
    def stats(self) -> PrefixCacheStats:
        return replace(self._stats, evictions=self._entries.evictions)

    def lookup(self, model: Any, prompt: Sequence[int]) -> tuple[int, Any | None]:
        """(n, cache): a private copy of the KV cache of the prompt's first ``n`` tokens, the
        longest prefix held, or (0, None). ``n`` < len(prompt): generate needs one new token."""
        ids = np.asarray(prompt, dtype=np.int64)
        best: tuple[int, tuple[int, bytes] | None] = (0, None)
        for key, entry in self._entries.items():
            if key[0] != id(model):
                continue
            shared = _common_prefix(entry.tokens, ids)
            if shared > best[0]:
                best = (shared, key)
        usable = min(best[0], len(ids) - 1)
        found = None if best[1] is None or usable < self.min_tokens else self._entries.get(best[1])
        with self._lock:
            self._stats.lookups += 1
            if found is not None:
                self._stats.hits += 1
                self._stats.reused_tokens += usable
        if found is None:
            return 0, None
        cache = copy.deepcopy(found.cache)  # entries are never changed once stored
        surplus = cache.get_seq_length() - usable
        if surplus > 0:
            cache.crop(-surplus)
        return usable, cache

    def store(self, model: Any, prompt: Sequence[int], cache: Any) -> None:
        """Keep ``cache`` (owned by the caller no more) as the KV of ``prompt``; it may hold
        more positions (generated tokens): they are cropped off."""
        if len(prompt) < self.min_tokens or len(prompt) > self.max_tokens:
            return
        surplus = cache.get_seq_length() - len(prompt)
        if surplus < 0:
            return  # not the cache of this prompt
        if surplus > 0:
            cache.crop(-surplus)
        ids = np.asarray(prompt, dtype=np.int64)
        self._entries.put((id(model), ids.tobytes()), _Entry(model, ids, cache))

    def clear(self) -> None:
        self._entries.clear()


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n
