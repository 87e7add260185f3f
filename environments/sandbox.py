"""Running model-written programs: one isolated process per program, limited, always scored.

Each program runs in a fresh interpreter (``python -I -S -B``: no site, no environment) inside
the operating system's boundary (environments/isolation.py: bubblewrap namespaces, a read-only
root, a private work dir, no network, nothing of the host visible), with resource limits set
before any of its code runs:

* CPU time (``RLIMIT_CPU``) and wall time (the parent kills the run at the deadline);
* address space (``RLIMIT_AS``), the size of any file it writes (``RLIMIT_FSIZE``, which also
  bounds its output: stdout and stderr go to files in the work dir), processes, open files.

**Verdicts the program cannot forge.** The program shares its interpreter with the runner, so
whatever the runner reports, the program could have written. The parent therefore takes the
runner's report as *claims*: per input the ``repr`` of what the function returned, or the name
of what it raised. It checks their shape (anything malformed is a crash), decides the status
itself (a syntax check in the parent before anything runs, the exit signal, which inputs have an
output), and the caller compares the outputs with expectations the program never sees: a claim
is worth exactly what returning that value would be. Reasons are built here from a fixed
vocabulary, exception class names and limits: never a message, a path or anything of the host.

Every way a program can fail — syntax error, exception, timeout, memory, huge output, a refused
operation, a crash of the interpreter — ends as a :class:`RunResult` with a status and a reason;
nothing raises into the caller (but :class:`SandboxUnavailableError` where this machine cannot
isolate and the operator did not trust the code) and no process outlives its run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from environments.isolation import (
    RUNNER_PATH,
    Isolation,
    bwrap_argv,
    process_filter_fd,
    python_executable,
    require_isolation,
)
from ground import python_ast

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

_RUNNER = Path(__file__).with_name("sandbox_runner.py")
VERDICT = ".verdict"  # the runner's claims, a file of its own: a program that fills stdout
# to the size limit cannot crowd them out
MAX_REPR = 4096  # the runner cuts each output there; a longer claim is malformed
EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a class name, nothing else
# The audit hook's refused events, as the runner names them (the reason's vocabulary).
REFUSED_EVENT = re.compile(
    r"open|os\.(system|exec\w*|posix_spawn\w*|spawn\w*|fork|forkpty|kill|killpg|remove|rmdir|"
    r"rename|mkdir|chmod|chown|symlink|link|truncate|utime)|subprocess\.Popen|"
    r"signal\.pthread_kill|socket\.\w+|ctypes\.\w+|shutil\.\w+"
)
_OUTSIDE = re.compile(r"open|os\.(remove|rmdir|rename|mkdir|chmod|chown|symlink|link|truncate|"
                      r"utime)|shutil\.\w+")  # fmt: skip


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run. Memory is the address space, generous enough for CPython's start."""

    cpu_s: int = 2
    # Far above cpu_s: on busy cores a run gets a fraction of one (2 s of CPU took 7.5-8.3 s of
    # wall with 4 runs beside a training job on 2 cores), and a load-dependent wall verdict would
    # fail programs that are within their CPU limit. Only a run that blocks waits for the wall.
    wall_s: float = 15.0
    memory_bytes: int = 512 << 20
    file_bytes: int = 1 << 20  # any file the program writes, stdout and stderr included
    processes: int = 64  # in the run's own user and PID namespaces
    open_files: int = 64


@dataclass(frozen=True)
class RunResult:
    """What a program did: ``outputs[i]`` is ``repr(f(inputs[i]))``, or None where it raised."""

    status: str
    reason: str
    outputs: tuple[str | None, ...]
    duration_ms: int


def run_program(
    code: str,
    function: str,
    inputs: Sequence[object],
    *,
    prelude: str = "",
    limits: SandboxLimits | None = None,
) -> RunResult:
    """Define ``function`` by running ``prelude`` then ``code`` in the sandbox and call it on each
    of ``inputs`` (JSON values). Never raises for anything the program does; raises
    SandboxUnavailableError where this machine cannot isolate it (environments/isolation.py)."""
    isolation = require_isolation()
    limits = limits or SandboxLimits()
    started = time.monotonic()
    source = prelude + "\n" + code
    syntax = syntax_error(source)
    if syntax is not None:  # nothing of the program runs
        return RunResult(SYNTAX_ERROR, syntax, (None,) * len(inputs), _ms(started))
    request = {"source": source, "function": function, "inputs": list(inputs),
               "limits": asdict(limits)}  # fmt: skip
    with work_dir() as work:
        status, reason, outputs = run_calls(isolation, _RUNNER, work, request, limits, len(inputs))
    return RunResult(status, reason, outputs, _ms(started))


@contextlib.contextmanager
def work_dir() -> Iterator[Path]:
    """A fresh work dir for one run (``mkdtemp``: mode 0700, this run's alone), removed after."""
    work = Path(tempfile.mkdtemp(prefix="flywheel-sandbox-"))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_calls(
    isolation: Isolation,
    runner: Path,
    work: Path,
    request: Mapping[str, object],
    limits: SandboxLimits,
    n: int,
    modules: Sequence[Path] = (),
) -> tuple[str, str, tuple[str | None, ...]]:
    """Run a runner that answers ``n`` calls with :class:`_Claims` (sandbox_runner.py, or
    repo_runner.py's "calls" mode) and decide the status, reason and outputs from its validated
    claims. Never raises: a sandbox that cannot start is a ``crashed`` run."""
    failed: tuple[str | None, ...] = (None,) * n
    try:
        ended, reason = run_child(isolation, runner, work, json.dumps(request), limits, modules)
    except OSError as exc:  # the sandbox itself could not start: still a scored failure
        return CRASHED, f"sandbox failed to start ({exc.strerror})", failed
    if ended is not None:
        return ended, reason, failed
    claims = _claims(work / VERDICT, n)
    if claims is None:
        return CRASHED, f"{reason}, no verdict", failed
    return _verdict(claims, limits, n)


def _ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def syntax_error(source: str, filename: str = "<completion>") -> str | None:
    """The parser's complaint about ``source`` (run here, before anything runs), or None. The
    parser only reads the text; its message names the line, never anything of the host."""
    try:
        python_ast.parse(source, filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def _command(
    isolation: Isolation, runner: Path, work: Path, filter_fd: int | None, modules: Sequence[Path]
) -> list[str]:
    python = [python_executable(), "-I", "-S", "-B"]
    if isolation.available and isolation.bwrap is not None:
        argv = bwrap_argv(isolation.bwrap, work, runner, filter_fd, modules)
        return [*argv, *python, RUNNER_PATH]
    return [*python, str(runner)]  # the operator trusts the code: no boundary


def run_child(
    isolation: Isolation,
    runner: Path,
    work: Path,
    request: str,
    limits: SandboxLimits,
    modules: Sequence[Path] = (),
) -> tuple[str | None, str]:
    """Run ``runner`` (a stdlib script; ``modules`` beside it) with ``request`` on its stdin and
    ``work`` as its work dir, inside the boundary, and kill whatever is left when it ends or at
    the wall deadline. Returns (TIMEOUT or OUTPUT_LIMIT, reason) when the deadline or a limit
    signal ended it, else (None, "exit status N"): its claims are then the last line of
    ``work / VERDICT``, to be validated. Raises OSError when the sandbox could not start."""
    with (
        open(work / ".stdout", "wb") as out,
        open(work / ".stderr", "wb") as err,
        process_filter_fd() as filter_fd,
    ):
        child = subprocess.Popen(
            _command(isolation, runner, work, filter_fd, modules),
            pass_fds=() if filter_fd is None else (filter_fd,),
            cwd=work,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},  # bwrap's own: visible inside
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
    if timed_out:
        return TIMEOUT, f"wall time over {limits.wall_s:g}s"
    code = child.returncode
    # bwrap reports its command's death by a signal as exit status 128 + signal
    killed = -code if code < 0 else code - 128 if code > 128 else 0
    if killed in (signal.SIGXCPU, signal.SIGKILL):
        return TIMEOUT, f"CPU time over {limits.cpu_s}s"
    if killed == signal.SIGXFSZ:
        return OUTPUT_LIMIT, f"wrote more than {limits.file_bytes} bytes"
    return None, f"exit status {code}"


def limit_verdict(
    limit: str | None, refused: str | None, limits: SandboxLimits
) -> tuple[str, str] | None:
    """The status and reason of a run whose (validated) claims say it hit a limit or was refused
    an operation; None when neither."""
    if limit == "memory":
        return MEMORY, f"memory (address space) over {limits.memory_bytes >> 20} MiB"
    if limit == "output":
        return OUTPUT_LIMIT, f"wrote more than {limits.file_bytes} bytes"
    if refused is not None:
        where = " outside the work dir" if _OUTSIDE.fullmatch(refused) else " not allowed"
        return FORBIDDEN, f"{refused}{where}"
    return None


@dataclass(frozen=True)
class _Claims:
    """What the runner (or the program, which shares its interpreter) says happened."""

    outputs: tuple[str | None, ...]
    errors: tuple[str | None, ...]
    define_error: str | None
    refused: str | None
    limit: str | None


def _verdict(
    claims: _Claims, limits: SandboxLimits, n: int
) -> tuple[str, str, tuple[str | None, ...]]:
    """The run's status and reason, decided here from validated claims."""
    failed: tuple[str | None, ...] = (None,) * n
    ended = limit_verdict(claims.limit, claims.refused, limits)
    if ended is not None:
        return *ended, failed
    if claims.define_error == "undefined":
        return RUNTIME_ERROR, "the code does not define the function", failed
    if claims.define_error is not None:
        return RUNTIME_ERROR, f"{claims.define_error} while defining the function", failed
    errors = [e for e in claims.errors if e is not None]
    missing = sum(o is None for o in claims.outputs)
    if not errors and not missing:
        return OK, "", claims.outputs
    first = errors[0] if errors else "no output"
    return RUNTIME_ERROR, f"{first} on {missing} of {n} inputs", claims.outputs


def _claims(verdict: Path, n: int) -> _Claims | None:
    """The last line of the verdict file, if it is a well-formed set of claims for ``n``
    inputs; None otherwise (a crash: the runner never got that far, or something else wrote)."""
    try:
        lines = verdict.read_bytes().decode("utf-8", errors="replace").splitlines()
        raw = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or set(raw) != {f.name for f in fields(_Claims)}:
        return None
    outputs, errors = raw["outputs"], raw["errors"]
    shaped = (
        isinstance(outputs, list) and len(outputs) == n
        and all(o is None or (isinstance(o, str) and len(o) <= MAX_REPR) for o in outputs)
        and isinstance(errors, list) and len(errors) == n
        and all(matches(EXCEPTION_NAME, e) for e in errors)
        and raw["limit"] in (None, "memory", "output")
        and matches(REFUSED_EVENT, raw["refused"])
        and matches(EXCEPTION_NAME, raw["define_error"])
    )  # fmt: skip
    if not shaped:
        return None
    return _Claims(tuple(outputs), tuple(errors), raw["define_error"], raw["refused"], raw["limit"])


def matches(pattern: re.Pattern[str], value: object) -> bool:
    """None, or a string the whole of which ``pattern`` matches."""
    return value is None or (isinstance(value, str) and pattern.fullmatch(value) is not None)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group and reap it. bwrap's PID namespace takes
    everything the program started with it, whatever group or session it moved to."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=5)
