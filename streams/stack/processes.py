"""Background JVM services we start, stop and recognise by a marker in their command line.

`down` must stop only what `up` started: a pid file alone is not enough (pids are reused), so
each service's command line carries `-Dflywheel.service=<name>@<home>` and is checked first.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from streams.errors import StackError

LOG_TAIL_LINES = 25
_EMPTY_CMDLINE_RETRIES = 50


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already listens on (or holds) `host:port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def port_open(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    """True when a TCP connection to `host:port` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file, or a note that it does not exist."""
    if not path.exists():
        return f"(no log at {path})"
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64 * 1024))
        text = f.read().decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class ServiceProcess:
    """One background service: its pid file, its console log and its command-line marker."""

    name: str
    home: Path

    @property
    def pid_file(self) -> Path:
        return self.home / "run" / f"{self.name}.pid"

    @property
    def console_log(self) -> Path:
        return self.home / "logs" / f"{self.name}.out"

    @property
    def marker(self) -> str:
        """A JVM system property that names this service and the state directory it belongs to."""
        return f"-Dflywheel.service={self.name}@{self.home}"

    def recorded_pid(self) -> int | None:
        """The pid in the pid file, running or not."""
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def running_pid(self) -> int | None:
        """The pid of this service if it runs; the pid file of a dead process is removed."""
        pid = self.recorded_pid()
        if pid is None:
            return None
        if _cmdline_has(pid, self.marker):
            return pid
        if not _alive(pid):
            self.pid_file.unlink(missing_ok=True)
        return None  # alive but not ours: the pid was reused (or the JVM is mid-exec)

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, umask: int = -1) -> int:
        """Start `argv` detached (own session, output to the console log) and record its pid.
        `umask` sets the file mode mask of what the service creates (-1: inherited)."""
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.console_log.parent.mkdir(parents=True, exist_ok=True)
        with self.console_log.open("ab") as log:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the CLI that started it; Ctrl-C is not passed on
                umask=umask,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after `timeout_s`. Returns False when it was not running."""
        pid = self.running_pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        return True

    def wait_until(self, ready: Callable[[], bool], what: str, timeout_s: float) -> None:
        """Poll `ready` until true; raise StackError with the log tail if the service dies first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid = self.recorded_pid()
            if pid is None or not _alive(pid):
                raise StackError(
                    f"{self.name} exited while starting; the end of {self.console_log}:\n"
                    f"{log_tail(self.console_log)}"
                )
            if ready():
                return
            time.sleep(0.5)
        raise StackError(
            f"{self.name} did not become ready ({what}) within {timeout_s:.0f}s; "
            f"the end of {self.console_log}:\n{log_tail(self.console_log)}"
        )


def _alive(pid: int) -> bool:
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)  # our own child lingers as a zombie until reaped
        if reaped == pid:
            return False
    except ChildProcessError:
        pass  # not our child: init reaps it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline_has(pid: int, marker: str) -> bool:
    if not Path("/proc").is_dir():  # no procfs (macOS): the pid file is all we have
        return _alive(pid)
    # Right after exec the kernel has woken our parent but not yet set the new command line:
    # it reads empty for a moment. Wait that out rather than mistake the process for another.
    for _ in range(_EMPTY_CMDLINE_RETRIES):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        if raw or not _alive(pid):
            return marker.encode() in raw.split(b"\0")
        time.sleep(0.01)
    return False
