"""A thread-safe LRU bounded by the total size of what it holds (tokens, bytes), not by count.

The agent replica keeps two: the KV caches of recent prompts (`fleet.prefix_cache`) and the
tokens of served tool-call turns (`fleet.served_turns`), both bounded in tokens held.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SizedLRU(Generic[K, V]):
    """At most `max_size` in all, each value weighing `size(value)`; putting past the budget
    evicts least recently used entries first. `get` and `touch` make an entry the most recent."""

    def __init__(self, max_size: int, size: Callable[[V], int]) -> None:
        if max_size < 1:
            raise ValueError("max_size must be positive")
        self.max_size = max_size
        self.evictions = 0
        self._size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """The size of everything held."""
        return self._held

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: K, value: V) -> bool:
        """Hold `value` under `key` (replacing what was there); False, and nothing held, when
        `value` alone is over the budget."""
        weight = self._size(value)
        if weight > self.max_size:
            return False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._held -= self._size(old)
            self._entries[key] = value
            self._held += weight
            while self._held > self.max_size:
                _, dropped = self._entries.popitem(last=False)
                self._held -= self._size(dropped)
                self.evictions += 1
        return True

    def get(self, key: K) -> V | None:
        """The value under `key` (now the most recent), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def items(self) -> list[tuple[K, V]]:
        """A snapshot of the entries, least recent first (no entry becomes more recent)."""
        with self._lock:
            return list(self._entries.items())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._held = 0
