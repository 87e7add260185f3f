"""Worker processes the demo runs: each is a real `flywheel` command in its own process.

Running them as subprocesses (not threads) gives each its own interpreter on a 2-core machine
(no GIL contention with the simulator) and exercises exactly what an operator would run.
Output goes to one log file per worker; a worker that dies is reported with its log's tail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.errors import WorkerDied

_TAIL_LINES = 15


@dataclass(frozen=True)
class WorkerSpec:
    """A `flywheel` sub-command to run: ``args`` after ``flywheel``."""

    name: str
    args: Sequence[str]
    finishes: bool = False  # may exit 0 on its own when its work is done (the learner)
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the demo's environment


class Workers:
    """Starts, watches and stops the demo's worker processes; logs under ``log_dir``."""

    def __init__(self, log_dir: Path, env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self._env = {**os.environ, **(env or {})}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._finishes: set[str] = set()

    def start(self, spec: WorkerSpec) -> None:
        """Start ``flywheel <args>`` as ``spec.name`` (its output in ``<log_dir>/<name>.log``)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{spec.name}.log").open("ab") as log:
            self._procs[spec.name] = subprocess.Popen(
                [sys.executable, "-m", "flywheel", *spec.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self._env, **spec.env},
                start_new_session=True,  # Ctrl-C reaches the demo only; it stops workers itself
            )
        if spec.finishes:
            self._finishes.add(spec.name)

    def check(self) -> set[str]:
        """Names of workers that finished their work (exit 0, ``finishes``); raise
        :class:`WorkerDied` (with the log tail) if any other worker has exited."""
        done = set()
        for name, proc in self._procs.items():
            code = proc.poll()
            if code == 0 and name in self._finishes:
                done.add(name)
            elif code is not None:
                raise WorkerDied(
                    f"worker {name!r} exited with code {code}; the end of its log "
                    f"({self.log(name)}):\n{self.tail(name)}"
                )
        return done

    def pids(self) -> dict[str, int]:
        """Worker name -> process id (memory and CPU readers: the soak benchmark)."""
        return {name: proc.pid for name, proc in self._procs.items()}

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def tail(self, name: str, lines: int = _TAIL_LINES) -> str:
        try:
            text = self.log(name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> dict[str, int | None]:
        """SIGTERM every worker (they write their buffers and commit), SIGKILL stragglers.

        Returns each worker's exit code (None if it had to be killed).
        """
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes: dict[str, int | None] = {}
        for name, proc in self._procs.items():
            try:
                codes[name] = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes[name] = None
        self._procs.clear()
        return codes
