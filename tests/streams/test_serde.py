import pytest

from streams.errors import DecodeError
from streams.serde import HEADER, schema_id_of


def test_schema_id_is_read_from_the_header() -> None:
    assert schema_id_of(HEADER.pack(0, 258) + b"body") == 258


@pytest.mark.parametrize(
    ("data", "cause"),
    [(b"", "truncated"), (b"\x00\x00\x01", "truncated"), (b"\x01\x00\x00\x00\x01x", "bad_magic")],
)
def test_headers_that_are_not_wire_format_are_refused(data: bytes, cause: str) -> None:
    with pytest.raises(DecodeError) as refused:
        schema_id_of(data)
    assert refused.value.cause == cause
