"""The sandbox's child: ``python -I -S -B sandbox_runner.py`` with a JSON request on stdin, run
inside the operating-system boundary (environments/isolation.py).

It sets the resource limits, installs an audit hook (a second layer only: the boundary is the
operating system's), defines the program's function and calls it on each input. It then writes
one line of *claims* to ``.verdict`` in its work dir: per input ``repr(f(x))`` or None, and the
name of the exception raised. The program runs in this same interpreter and can write anything
this runner can, so the parent treats the line as claims: it validates their shape, decides the
run's status itself, and compares the outputs with expectations the program never sees. Standard
library only (``-S``: no site).
"""

import errno
import json
import os
import resource
import sys
from typing import Any

_MAX_REPR = 4096  # an output longer than this is wrong for any task here


def apply_limits(limits: dict[str, int]) -> None:
    cpu = limits["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    for kind, value in (
        (resource.RLIMIT_AS, limits["memory_bytes"]),
        (resource.RLIMIT_FSIZE, limits["file_bytes"]),
        (resource.RLIMIT_NOFILE, limits["open_files"]),
        (resource.RLIMIT_NPROC, limits["processes"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(kind, (value, value))


def install_hook(work: str, refused: list[str]) -> None:
    """Refuse new processes, signals, ctypes, sockets and path operations outside ``work``. The
    refused events are bound in this closure (not module globals a program could rewrite); the
    hook cannot be removed, but the program shares this interpreter, so it is no boundary."""
    processes = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                 "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "socket.",
                 "ctypes.")  # fmt: skip
    paths = ("os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown",
             "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.")  # fmt: skip
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def inside(path: object) -> bool:
        try:
            real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return real == work or real.startswith(work + os.sep)

    def refuse(event: str) -> None:
        refused.append(event)
        raise PermissionError(f"sandbox: {event} is not allowed")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(processes):
            refuse(event)
        elif event == "open":
            path, mode, flags = (*tuple(args), None, None, 0)[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                (flags or 0) & writing
            )
            if writes and not isinstance(path, int) and not inside(path):
                refuse("open")
        elif event.startswith(paths) and not all(
            inside(a) for a in args if isinstance(a, (str, bytes, os.PathLike))
        ):
            refuse(".".join(event.split(".")[:2]))

    sys.addaudithook(hook)


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def _run(request: dict[str, Any], refused: list[str]) -> dict[str, Any]:
    inputs = request["inputs"]
    claims: dict[str, Any] = {"outputs": [None] * len(inputs), "errors": [None] * len(inputs),
                              "define_error": None, "refused": None, "limit": None}  # fmt: skip
    scope: dict[str, Any] = {"__name__": "__sandbox__"}
    function: Any = None
    try:
        exec(compile(request["source"], "<completion>", "exec"), scope)  # noqa: S102
        function = scope.get(request["function"])
        if not callable(function):
            claims["define_error"] = "undefined"
    except MemoryError:
        claims["limit"] = "memory"
    except BaseException as exc:  # a program may raise anything, SystemExit too
        claims["define_error"] = _name(exc)
    if claims["define_error"] is None and claims["limit"] is None:
        for i, value in enumerate(inputs):
            try:
                claims["outputs"][i] = repr(function(value))[:_MAX_REPR]
            except MemoryError:
                claims["limit"] = "memory"
                break
            except OSError as exc:
                if exc.errno == errno.EFBIG:  # Python ignores SIGXFSZ: the write fails instead
                    claims["limit"] = "output"
                    break
                claims["errors"][i] = _name(exc)
            except BaseException as exc:
                claims["errors"][i] = _name(exc)
    claims["refused"] = refused[0] if refused else None
    return claims


def main() -> None:
    request = json.loads(sys.stdin.read())
    sys.dont_write_bytecode = True
    sys.setrecursionlimit(2000)
    refused: list[str] = []
    verdict = os.open(".verdict", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    apply_limits(request["limits"])
    install_hook(os.path.realpath(os.getcwd()), refused)
    write_claims(verdict, _run(request, refused))


def write_claims(verdict: int, claims: dict[str, Any]) -> None:
    """One line of claims to the verdict file (``{}`` when the program put something in them
    that JSON cannot hold: the parent reads that as a crash)."""
    try:
        text = json.dumps(claims)
    except (TypeError, ValueError):  # a program may have put anything in our lists
        text = "{}"
    os.write(verdict, ("\n" + text + "\n").encode())


if __name__ == "__main__":
    main()
