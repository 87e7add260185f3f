"""Ctrl-C and SIGTERM as a `threading.Event`, for commands that stop cleanly."""

from __future__ import annotations

import signal
import threading
from types import FrameType


def stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM; the command finishes its step and closes cleanly.

    The handler sets the event from a new thread: a signal can arrive while the main thread
    holds the event's internal lock (inside ``stop.wait()``), and setting it from the handler
    itself would then deadlock on that non-reentrant lock.
    """
    stop = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        threading.Thread(target=stop.set, name="stop-on-signal", daemon=True).start()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop
