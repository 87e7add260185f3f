"""The stored form of a suggestion's state (`processors.joiner.state.StoredSuggestion`)."""

from __future__ import annotations

import base64
import json

from processors.joiner.state import StoredSuggestion


def document(partition: int, session: str, events: list[tuple[str, bytes]]) -> str:
    held = [[topic, base64.b64encode(value).decode("ascii")] for topic, value in events]
    return json.dumps({"p": partition, "k": session, "e": held}, separators=(",", ":"))


def test_a_document_extended_record_by_record_is_the_one_encoded_whole() -> None:
    """Each write appends the new record's JSON to the held records' (not encoding the offer's
    code text again); the text must stay exactly what encoding the whole document gives,
    whatever the session id holds, and whether or not the previous state was encoded."""
    session = 'quote " and é'
    records = [("telemetry.suggestions", b"\x00offer"), ("telemetry.outcomes", b"\xffout")]
    records.append(("telemetry.edits", b"edit"))
    state = StoredSuggestion(2, session, None, tuple(records[:1]))
    for n in range(2, len(records) + 1):
        if n == 2:
            state.to_json()  # encoded: the next one extends its JSON
        state = state.adding(2, session, None, records[n - 1])
        assert state.to_json() == document(2, session, records[:n])
        assert json.loads(state.to_json())["k"] == session


def test_state_of_the_previous_layout_stays_in_it() -> None:
    class Pending:
        def to_json(self) -> str:
            return "{}"

    old = StoredSuggestion(0, "s", Pending(), None)
    assert old.adding(0, "s", Pending(), ("telemetry.outcomes", b"x")).events is None


def test_done_markers_and_previous_layout_documents_are_compact_json() -> None:
    class Pending:
        def to_json(self) -> str:
            return '{"a": 1}'

    done = StoredSuggestion(1, "s", None, (), done_ms=1234)
    assert done.to_json() == '{"p":1,"k":"s","d":1234}'
    old = StoredSuggestion(0, "é", Pending(), None)
    assert json.loads(old.to_json()) == {"p": 0, "k": "é", "s": '{"a": 1}'}
    assert old.to_json() == json.dumps(json.loads(old.to_json()), separators=(",", ":"))
