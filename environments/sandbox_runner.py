"""The sandbox's child: runs ``python -I -S -B sandbox_runner.py`` with a JSON request on stdin.

Trusted code, run before any of the program's: it sets the resource limits, drops to ``nobody``
(when asked: root, and ``nobody`` can read the interpreter), installs the audit hook, then
defines the program's function and calls it on each input. It writes one verdict after a marker
to ``.verdict`` (opened before the limits): ``{"status", "reason", "outputs"}``, each output
``repr(f(x))`` or None where the call raised. Standard library only (``-S``: no site).
"""

import errno
import json
import os
import resource
import sys
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PROCESS_EVENTS = (
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "subprocess.Popen",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
)
_MAX_REPR = 4096  # an output longer than this is wrong for any task here
_PATH_EVENTS = (
    "os.remove",
    "os.rmdir",
    "os.rename",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.symlink",
    "os.link",
    "os.truncate",
    "os.utime",
    "shutil.rmtree",
    "shutil.copyfile",
    "shutil.move",
)


def _limit(kind: int, value: int) -> None:
    resource.setrlimit(kind, (value, value))


def _apply_limits(limits: dict[str, int], uid: int | None) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    _limit(resource.RLIMIT_AS, limits["memory_bytes"])
    _limit(resource.RLIMIT_FSIZE, limits["file_bytes"])
    _limit(resource.RLIMIT_NOFILE, limits["open_files"])
    _limit(resource.RLIMIT_CORE, 0)
    if uid is not None:  # root ignores RLIMIT_NPROC: become nobody first
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    _limit(resource.RLIMIT_NPROC, limits["processes"])


def _install_hook(work: str, refused: list[str]) -> None:
    def inside(path: object) -> bool:
        if isinstance(path, int):  # a file descriptor already open
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return real == work or real.startswith(work + os.sep)

    def refuse(what: str) -> None:
        refused.append(what)
        raise PermissionError(f"sandbox: {what} is not allowed")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(_PROCESS_EVENTS) or event.startswith(("socket.", "ctypes.")):
            refuse(event)
        elif event == "open":
            path, mode, flags = (*tuple(args), None, None, 0)[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                (flags or 0) & _WRITE_FLAGS
            )
            if writing and not inside(path):
                refuse(f"writing {path!r} outside the work dir")
        elif event.startswith(_PATH_EVENTS) and not all(
            inside(a) for a in args if isinstance(a, (str, bytes, os.PathLike))
        ):
            refuse(f"{event} outside the work dir")

    sys.addaudithook(hook)


def _run(request: dict[str, Any], refused: list[str]) -> tuple[str, str, list[str | None]]:
    source = request["prelude"] + "\n" + request["code"]
    try:
        program = compile(source, "<completion>", "exec")
    except (SyntaxError, ValueError) as exc:
        return "syntax_error", f"{type(exc).__name__}: {exc}", []
    scope: dict[str, Any] = {"__name__": "__sandbox__"}
    try:
        exec(program, scope)  # noqa: S102  # the point of the sandbox
    except MemoryError:
        return "memory_limit", "out of memory while defining the function", []
    except BaseException as exc:  # a program may raise anything, SystemExit too
        status = "forbidden" if refused else "runtime_error"
        return status, refused[0] if refused else f"{type(exc).__name__}: {exc}", []
    function = scope.get(request["function"])
    if not callable(function):
        return "runtime_error", f"the code does not define {request['function']}()", []
    outputs: list[str | None] = []
    error = ""
    for value in request["inputs"]:
        try:
            outputs.append(repr(function(value))[:_MAX_REPR])
        except MemoryError:
            return "memory_limit", "out of memory", []
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                return "output_limit", "wrote more than the file size limit", []
            outputs.append(None)
            error = error or f"{type(exc).__name__}: {exc}"
        except BaseException as exc:
            outputs.append(None)
            error = error or f"{type(exc).__name__}: {exc}"
    if refused:
        return "forbidden", refused[0], outputs
    return ("runtime_error" if error else "ok"), error, outputs


def main() -> None:
    request = json.loads(sys.stdin.read())
    sys.dont_write_bytecode = True
    sys.setrecursionlimit(2000)
    refused: list[str] = []
    verdict = os.open(".verdict", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    _apply_limits(request["limits"], request["uid"])
    _install_hook(os.path.realpath(os.getcwd()), refused)
    status, reason, outputs = _run(request, refused)
    text = json.dumps({"status": status, "reason": reason[:500], "outputs": outputs})
    os.write(verdict, (request["marker"] + text).encode())


if __name__ == "__main__":
    main()
