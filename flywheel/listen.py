"""The listening socket every HTTP service of the CLI hands to uvicorn, and running it."""

from __future__ import annotations

import socket
from typing import Any

from flywheel.errors import FlywheelError


class ListenError(FlywheelError):
    """The service cannot listen where it was asked to."""


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


def run_server(app: Any, sock: socket.socket) -> None:
    """Run the ASGI ``app`` with uvicorn on ``sock`` until Ctrl-C or SIGTERM; closes ``sock``."""
    import uvicorn  # imported here so `--help` stays fast

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", server_header=False))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the Ctrl-C it already handled with a graceful shutdown
    finally:
        sock.close()
