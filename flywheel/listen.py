"""The listening socket every HTTP service of the CLI hands to uvicorn, and running it."""

from __future__ import annotations

import signal
import socket
import threading
from typing import Any

from flywheel.errors import ListenError


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, with TCP_NODELAY (inherited by accepted connections):
    without it Nagle's algorithm and delayed ACKs add ~40 ms to each keep-alive response.
    Raises ListenError naming the fix (busy port, unknown host)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
    except OSError as exc:
        raise ListenError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pass another --port or "
            "--host, or stop the process using it"
        ) from None
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a service this process starts next (the demo's)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def run_server(app: Any, sock: socket.socket) -> None:
    """Run the ASGI ``app`` with uvicorn on ``sock`` until Ctrl-C or SIGTERM; closes ``sock``.

    Returns after a graceful shutdown, so the caller's ``finally`` blocks run (the gateway's
    last flush) on SIGTERM too.
    """
    import uvicorn  # imported here so `--help` stays fast

    _absorb_reraised_signals()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", server_header=False))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the Ctrl-C it already handled with a graceful shutdown
    finally:
        sock.close()


def _absorb_reraised_signals() -> None:
    """After its graceful shutdown uvicorn re-raises the signal it handled, for the handler that
    was there before it. Python's default SIGTERM action would then kill the process before any
    ``finally`` block: where no handler of ours is set, install one that does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers belong to the main thread (tests run servers in threads)
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _ignore)


def _ignore(_signum: int, _frame: Any) -> None:
    return None
