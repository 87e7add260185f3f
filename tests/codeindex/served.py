"""An ASGI app served by uvicorn in a thread on a free port, for tests and benches that drive
a server over real HTTP (the index client speaks only HTTP)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from flywheel.listen import listen


@contextmanager
def served(app: Any, *, log_level: str = "warning") -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (a free port) until the block ends; yields its base URL.
    RuntimeError when uvicorn has not started within 10 s."""
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, server_header=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start within 10 s")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
