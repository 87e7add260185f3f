"""Running untrusted completions: one subprocess per program, limited, isolated, always scored.

Each program runs in a fresh interpreter (``python -I -S``: no user site, no environment) inside
an empty temporary work directory, with resource limits set before any of its code runs:

* CPU time (``RLIMIT_CPU``) and wall time (the parent kills the process group at the deadline);
* address space (``RLIMIT_AS``), the size of any file it writes (``RLIMIT_FSIZE``, which also
  bounds its output: stdout and stderr go to files in the work dir), open files;
* processes: as root the child drops to ``nobody`` first, so ``RLIMIT_NPROC`` holds (where
  ``nobody`` can read the interpreter's standard library: :func:`unprivileged_user`);
* no network: the child starts in a new network namespace (``unshare --net``) when the machine
  allows it (:func:`network_isolation` says whether it does), and an audit hook refuses sockets;
* an audit hook, installed before the program is compiled, refuses new processes (``os.system``,
  ``subprocess``, ``fork``, ``exec``), signals to other processes, ``ctypes``, sockets, and
  writes, renames and deletions outside the work dir (it cannot be removed once installed).

The child never sees expected outputs: it returns what the program computed for each input
(``repr`` strings), and the caller compares. A program cannot fake its own score without solving
the task. Every way a program can fail — syntax error, exception, timeout, memory, huge output,
forbidden operation, a crash of the interpreter — ends as a :class:`RunResult` with a status and
a reason; nothing raises into the caller and no process outlives its run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

# Statuses of a run (RolloutResult.sandbox_status); "ok" means the program ran every input.
OK = "ok"
SYNTAX_ERROR = "syntax_error"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
MEMORY = "memory_limit"
OUTPUT_LIMIT = "output_limit"
FORBIDDEN = "forbidden"
CRASHED = "crashed"
STATUSES = (OK, SYNTAX_ERROR, RUNTIME_ERROR, TIMEOUT, MEMORY, OUTPUT_LIMIT, FORBIDDEN, CRASHED)

_MARKER = "\x00flywheel-sandbox-result\x00"
_NOBODY = 65534
_RUNNER = Path(__file__).with_name("sandbox_runner.py")
_VERDICT = ".verdict"  # the runner's verdict, a file of its own: a program that fills stdout
# to the size limit cannot crowd it out


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run. Memory is the address space, generous enough for CPython's start."""

    cpu_s: int = 2
    wall_s: float = 5.0
    memory_bytes: int = 512 << 20
    file_bytes: int = 1 << 20  # any file the program writes, stdout and stderr included
    processes: int = 64  # nobody's processes; the audit hook refuses new ones anyway
    open_files: int = 64


@dataclass(frozen=True)
class RunResult:
    """What a program did: ``outputs[i]`` is ``repr(f(inputs[i]))``, or None where it raised."""

    status: str
    reason: str
    outputs: tuple[str | None, ...]
    duration_ms: int


@functools.cache
def network_isolation() -> bool:
    """True when ``unshare --net`` works here (a new, empty network namespace per run). Checked
    once per process; where it does not (no privileges), the audit hook alone refuses sockets."""
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.cache
def unprivileged_user() -> bool:
    """True when runs can drop to ``nobody`` (we are root, and ``nobody`` can read this Python's
    standard library: a Python installed under /root cannot). Otherwise a run keeps this user,
    and the audit hook alone refuses new processes and writes outside the work dir."""
    if os.geteuid() != 0:
        return False
    probe = f"import os; os.setgid({_NOBODY}); os.setuid({_NOBODY}); import socket, decimal"
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-B", "-c", probe], capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def isolation_report() -> dict[str, bool]:
    """What this machine allows, for start-up logs: a network namespace per run, and running
    programs as ``nobody``."""
    return {"network_namespace": network_isolation(), "unprivileged_user": unprivileged_user()}


def run_program(
    code: str,
    function: str,
    inputs: Sequence[object],
    *,
    prelude: str = "",
    limits: SandboxLimits | None = None,
) -> RunResult:
    """Define ``function`` by running ``prelude`` then ``code`` in a sandbox and call it on each
    of ``inputs`` (JSON values). Never raises for anything the program does."""
    limits = limits or SandboxLimits()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="flywheel-sandbox-"))
    try:
        os.chmod(work, 0o777)  # noqa: S103  # the child runs as nobody, in this dir alone
        request = {
            "code": code,
            "prelude": prelude,
            "function": function,
            "inputs": list(inputs),
            "marker": _MARKER,
            "limits": limits.__dict__,
            "uid": _NOBODY if unprivileged_user() else None,
        }
        status, reason, outputs = _run_child(work, json.dumps(request), limits, len(inputs))
    except OSError as exc:  # the sandbox itself could not start: still a scored failure
        status, reason, outputs = CRASHED, f"sandbox failed to start: {exc}", (None,) * len(inputs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return RunResult(status, reason, outputs, round((time.monotonic() - started) * 1000))


def _command() -> list[str]:
    python = [sys.executable, "-I", "-S", "-B", str(_RUNNER)]
    return ["unshare", "--net", "--", *python] if network_isolation() else python


def _run_child(
    work: Path, request: str, limits: SandboxLimits, n: int
) -> tuple[str, str, tuple[str | None, ...]]:
    stdout, stderr = work / ".stdout", work / ".stderr"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        child = subprocess.Popen(
            _command(),
            cwd=work,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            start_new_session=True,  # its own process group: killed whole at the end
            close_fds=True,
        )
        timed_out = False
        try:
            child.communicate(request.encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(child)
    failed = (None,) * n
    if timed_out:
        return TIMEOUT, f"wall time over {limits.wall_s:g}s", failed
    code = child.returncode
    if code == -signal.SIGXCPU or code == -signal.SIGKILL:
        return TIMEOUT, f"CPU time over {limits.cpu_s}s", failed
    if code == -signal.SIGXFSZ:
        return OUTPUT_LIMIT, f"wrote more than {limits.file_bytes} bytes", failed
    result = _result(work / _VERDICT)
    if result is None:
        tail = _tail(stderr)
        if "MemoryError" in tail:
            return MEMORY, f"address space over {limits.memory_bytes >> 20} MiB", failed
        return CRASHED, f"exit status {code}: {tail or 'no output'}", failed
    raw = cast(list[str | None], result["outputs"])
    outputs = tuple(raw) if len(raw) == n else failed
    return str(result["status"]), str(result["reason"]), outputs


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group (anything it started dies with it) and reap."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=5)


def _result(verdict: Path) -> dict[str, object] | None:
    """The runner's verdict: the JSON after the last marker in its verdict file (the program may
    have written there too), or None when the runner never got that far."""
    try:
        text = verdict.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None
    _, sep, payload = text.rpartition(_MARKER)
    if not sep:
        return None
    try:
        result = json.loads(payload)
    except ValueError:
        return None
    ok = isinstance(result, dict) and isinstance(result.get("outputs"), list)
    return result if ok and result.get("status") in STATUSES else None


def _tail(path: Path, size: int = 400) -> str:
    try:
        data = path.read_bytes()[-size:]
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace").strip().splitlines()[-1:][0] if data else ""
