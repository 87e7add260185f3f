"""The joiner's state over a changelog-backed table: the `ChangelogState` protocol, the stored
form of a pending suggestion and the per-batch write-back view (`Batch`)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, MutableMapping
from typing import Any, Protocol, runtime_checkable

MARK = "\x00"  # prefix of bookkeeping keys; no session id starts with NUL


@runtime_checkable
class ChangelogState(Protocol):
    """Table-like state whose writes name their changelog partition (the source partition of
    the records they derive from), so they can be made outside faust's per-event context."""

    def get(self, key: str) -> Any: ...

    def put(self, partition: int, key: str, value: Any) -> None: ...

    def delete(self, partition: int, key: str) -> None: ...

    def items(self) -> Iterable[tuple[str, Any]]: ...


class DictState:
    """`ChangelogState` over a plain mapping (tests, tools): no changelog."""

    def __init__(self, data: MutableMapping[str, Any]) -> None:
        self.data = data

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def put(self, partition: int, key: str, value: Any) -> None:
        self.data[key] = value

    def delete(self, partition: int, key: str) -> None:
        self.data.pop(key, None)

    def items(self) -> Iterable[tuple[str, Any]]:
        return list(self.data.items())


class StoredSuggestion:
    """A suggestion's (or another join's anchor's: a served completion) state as written to the
    table: JSON `{"p": partition, "k": session_id,
    "e": [[platform_topic, base64 Avro value], ...]}`, the source records folded into it; once
    attributed, while a re-sent offer could still arrive on time, `{"p", "k", "d": the offer's
    event time}` (a done marker: events for it are duplicates).
    Keeping the records' own bytes makes a write cheap (no re-encoding of offers with code text
    and context vectors); they are decoded again only after a restart or rebalance. Documents
    of the previous layout (`"s"`: `PendingSuggestion.to_json()`) are still read, and written
    back in that layout, since their source records are unknown."""

    __slots__ = ("_items", "_json", "done_ms", "events", "partition", "pending", "session")

    def __init__(
        self,
        partition: int,
        session: str,
        pending: Any,  # the join's pending state (PendingSuggestion, ...); None when done
        events: tuple[tuple[str, bytes], ...] | None,
        done_ms: int | None = None,
    ) -> None:
        self.partition, self.session, self.pending, self.events = (
            partition,
            session,
            pending,
            events,
        )
        self._json: str | None = None
        self._items: str | None = None  # the JSON of `events`' items, once encoded
        self.done_ms = done_ms  # attributed: the offer's event time (a small marker, no events)

    def adding(
        self, partition: int, session: str, pending: Any, source: tuple[str, bytes]
    ) -> StoredSuggestion:
        """The next state: `pending`, with the `source` record held after this one's. The held
        records' JSON is extended, not encoded again (an offer's code text is most of it, and a
        suggestion is written once per batch that touches it)."""
        if self.events is None:  # the previous layout: no held records
            return StoredSuggestion(partition, session, pending, None)
        new = StoredSuggestion(partition, session, pending, (*self.events, source))
        if self._items is not None:
            item = _held_item(*source)
            new._items = f"{self._items},{item}" if self._items else item
        return new

    @classmethod
    def read(cls, raw: str, parsed: StoredSuggestion) -> StoredSuggestion:
        """`parsed` (the document `raw` decoded), remembering `raw` as its stored form."""
        parsed._json = raw
        return parsed

    def to_json(self) -> str:
        """The document as compact JSON (`json.dumps(doc, separators=(",", ":"))`, built from
        parts: this runs once per written suggestion per batch)."""
        if self._json is None:
            head = f'{{"p":{self.partition},"k":{json.dumps(self.session)}'
            if self.done_ms is not None:
                self._json = f'{head},"d":{self.done_ms}}}'
            elif self.events is None:
                self._json = f'{head},"s":{json.dumps(self.pending.to_json())}}}'
            else:
                if self._items is None:
                    self._items = ",".join(_held_item(t, v) for t, v in self.events)
                self._json = f'{head},"e":[{self._items}]}}'
        return self._json

    def stored_as(self, raw: Any) -> bool:
        """Whether the table's value `raw` is this very document (the object written, or an
        equal string read back by a recovery), so a decoded copy of it may stand in for it."""
        return self._json is not None and (raw is self._json or raw == self._json)


def _held_item(topic: str, value: bytes) -> str:
    """A held record in the document's JSON: `["topic","base64 of the value"]`."""
    return f'[{json.dumps(topic)},"{base64.b64encode(value).decode("ascii")}"]'


class Batch:
    """Write-back view of the state for one batch of records: reads see the batch's own writes
    (documents as the objects put: a `StoredSuggestion`, a dict); `flush` then writes each
    changed key once, documents as JSON (one changelog record per key per batch instead
    of one per event). Suggestion keys are flushed before the bookkeeping keys (offset markers,
    watermarks), so a marker never covers state that was not written."""

    def __init__(self, state: ChangelogState) -> None:
        self._state = state
        self._dirty: dict[str, tuple[int, Any]] = {}  # key -> (changelog partition, value|None)

    def get(self, key: str) -> Any:
        hit = self._dirty.get(key)
        return self._state.get(key) if hit is None else hit[1]

    def put(self, partition: int, key: str, value: Any) -> None:
        self._dirty[key] = (partition, value)

    def delete(self, partition: int, key: str) -> None:
        self._dirty[key] = (partition, None)

    def flush(self) -> None:
        marks = []
        for key, (partition, value) in self._dirty.items():
            if key.startswith(MARK):
                marks.append((key, partition, value))
            else:
                self._write(partition, key, value)
        for key, partition, value in marks:
            self._write(partition, key, value)
        self._dirty.clear()

    def _write(self, partition: int, key: str, value: Any) -> None:
        if value is None:
            self._state.delete(partition, key)
        elif isinstance(value, StoredSuggestion):
            self._state.put(partition, key, value.to_json())
        elif isinstance(value, dict):  # a document built up over the batch (a rollout group)
            self._state.put(partition, key, json.dumps(value))
        else:
            self._state.put(partition, key, value)


_DOC_PARTITION = re.compile(r'^\{"p": ?(\d+)[,}]')


def entry_partition(key: str, raw: Any) -> int:
    """The partition an entry of the joiner's or the grouper's table belongs to: the last
    path element of a bookkeeping key (`\\x00off/<topic>/<p>`, `\\x00now/<p>`, ...), else the
    document's "p" (always its first field)."""
    if key.startswith(MARK):
        return int(key.rsplit("/", 1)[1])
    match = _DOC_PARTITION.match(raw) if isinstance(raw, str) else None
    return int(match.group(1)) if match else int(json.loads(raw)["p"])
