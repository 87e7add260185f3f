"""A bounded topic read when no broker answers: a one-line error naming the fix, no traceback."""

from __future__ import annotations

import socket

import pytest

from streams.errors import TopicIOError
from streams.topic_io import read_to_end


def _closed_port() -> int:
    with socket.socket() as s:  # bound then released: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_reading_without_a_broker_says_to_start_one() -> None:
    config = {"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}
    with pytest.raises(TopicIOError, match=r"is the broker up\?.*flywheel stack up"):
        read_to_end(config, "models.versions", keep=lambda _: True, timeout_s=1.0)
