"""The operating-system boundary around model-written programs: bubblewrap namespaces.

A program runs under ``bwrap`` (bubblewrap, the sandbox Flatpak is built on; Debian's package
``bubblewrap``), in new user, PID, network, IPC, UTS and cgroup namespaces:

* a new root (a tmpfs remounted read-only) holding, read-only, ``/usr`` (with the ``/bin``,
  ``/lib``, ``/lib64`` links) and the interpreter's own prefix: no ``/etc``, ``/home``, ``/root``,
  ``/tmp`` or any other host file;
* the run's work dir, private to that run (``mkdtemp``, mode 0700), at ``/work``: the only
  writable place;
* a fresh ``/proc`` of its own PID namespace (the host's processes are not there, nor their
  environments) and a minimal ``/dev``;
* uid and gid 65534 inside a user namespace, every capability dropped, no network (a new,
  empty network namespace: even 127.0.0.1 is unreachable), a new session (no terminal);
* an empty environment;
* it dies with its parent (``--die-with-parent``), and when its first process ends the kernel
  kills everything left in its PID namespace, so nothing it started outlives the run.

The resource limits (CPU, address space, file size, processes, open files) are set by the runner
inside; the runner's audit hook is a second layer only.

**Fail closed.** Where this machine cannot build that boundary (no ``bwrap``, user namespaces
disabled, an unprivileged container), nothing runs model-written code: :func:`require_isolation`
raises with what is missing and how to provide it. The operator's explicit flag
(``flywheel --trust-model-code``, env ``FLYWHEEL_TRUST_MODEL_CODE=1``, for a host that is
already a boundary such as a gVisor or Firecracker VM) is the only way to run without it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from environments.errors import SandboxUnavailableError

BWRAP_ENV = "FLYWHEEL_BWRAP"  # the bwrap binary to use; default: `bwrap` on PATH
TRUST_ENV = "FLYWHEEL_TRUST_MODEL_CODE"  # "1": run model-written code without the boundary
SANDBOX_UID = 65534  # nobody, inside the run's user namespace
WORK_DIR = "/work"  # where the run's work dir appears inside
RUNNER_PATH = "/sandbox/runner.py"  # where the runner appears inside (read-only)
_INSTALL_FIX = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; `make install` does it as "
    f"root) or point {BWRAP_ENV} at a bwrap binary"
)


@dataclass(frozen=True)
class Isolation:
    """What this machine gives a run: ``available`` when a bwrap run works here. ``detail`` says
    what is in force (or what failed), ``fix`` how to provide it."""

    available: bool
    bwrap: str | None
    version: str
    detail: str
    fix: str = ""


def trusted() -> bool:
    """True when the operator set ``FLYWHEEL_TRUST_MODEL_CODE=1`` (``flywheel
    --trust-model-code`` sets it, for this process and the ones it starts)."""
    return os.environ.get(TRUST_ENV, "").strip().lower() in {"1", "true", "yes"}


def python_executable() -> str:
    """The base interpreter (a virtualenv's ``python`` is a link into it; the runner needs only
    the standard library, so the venv is not mounted)."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def bwrap_argv(
    bwrap: str, work: Path, runner: Path, filter_fd: int | None, modules: Sequence[Path] = ()
) -> list[str]:
    """The ``bwrap`` command that runs ``runner`` (read-only at :data:`RUNNER_PATH`) with ``work``
    as its only writable directory (at :data:`WORK_DIR`), loading the seccomp filter that
    ``filter_fd`` holds (:func:`process_filter_fd`; pass it to the child). ``modules`` are bound
    read-only beside the runner under their own names (modules it imports)."""
    argv = [
        bwrap,
        "--unshare-all", "--unshare-user",  # user, PID, network, IPC, UTS, cgroup namespaces
        "--disable-userns",  # and no nested one: a new user namespace would regain capabilities
        "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        "--hostname", "sandbox",
        "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for link in ("bin", "lib", "lib64", "sbin"):  # merged-/usr links; plain dirs are bound
        path = Path("/") / link
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    prefix = Path(python_executable()).parent.parent  # <prefix>/bin/python3.x
    if not str(prefix).startswith("/usr"):
        argv += ["--ro-bind", str(prefix), str(prefix)]
    argv += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--bind", str(work), WORK_DIR,
        "--ro-bind", str(runner), RUNNER_PATH,
    ]  # fmt: skip
    for module in modules:
        argv += ["--ro-bind", str(module), str(Path(RUNNER_PATH).with_name(module.name))]
    argv += [
        "--remount-ro", "/",
        "--chdir", WORK_DIR,
    ]  # fmt: skip
    if filter_fd is not None:
        argv += ["--seccomp", str(filter_fd)]
    return [*argv, "--"]


# Classic BPF for seccomp (linux/filter.h, linux/seccomp.h): the filter bwrap loads before the
# runner starts. It refuses every way to create a process (fork, vfork, clone without
# CLONE_THREAD, clone3 answered ENOSYS so that glibc falls back to clone for threads), so a
# program starts no process at all. RLIMIT_NPROC cannot do it where we are root: the kernel
# exempts processes whose real uid outside is root, and a user namespace run by root is mapped
# there. Syscalls of any other ABI (i386, x32 on x86_64) kill the run: they would walk around it.
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_CLONE_THREAD = 0x00010000
_ARCHES = {  # machine -> (AUDIT_ARCH, clone, clone3, other process syscalls, first foreign nr)
    "x86_64": (0xC000003E, 56, 435, (57, 58), 0x40000000),
    "aarch64": (0xC00000B7, 220, 435, (), None),
}


def process_filter(machine: str | None = None) -> bytes | None:
    """The seccomp filter (``struct sock_filter[]``) refusing process creation on ``machine``
    (default: this one), or None where we have no syscall table for it."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, clone, clone3, others, foreign = arch
    prog: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, audit_arch), (_RET, 0, 0, _KILL), (_LD_W_ABS, 0, 0, 0),
    ]  # fmt: skip
    if foreign is not None:
        prog += [(_JGE, 0, 1, foreign), (_RET, 0, 0, _KILL)]
    deny_at = len(prog) + len(others) + 5  # the index of "deny" below
    for nr in others:
        prog.append((_JEQ, deny_at - (len(prog) + 1), 0, nr))
    prog += [
        (_JEQ, 0, 1, clone3), (_RET, 0, 0, _ERRNO | errno.ENOSYS),
        (_JEQ, 0, 3, clone),
        (_LD_W_ABS, 0, 0, 16),  # args[0] (clone's flags), low 32 bits: little-endian
        (_JSET, 1, 0, _CLONE_THREAD),
        (_RET, 0, 0, _ERRNO | errno.EPERM),  # deny
        (_RET, 0, 0, _ALLOW),
    ]  # fmt: skip
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


@contextlib.contextmanager
def process_filter_fd() -> Iterator[int | None]:
    """A pipe's read end holding :func:`process_filter`, for one bwrap start (bwrap reads it to
    the end); None where there is no filter for this machine."""
    program = process_filter()
    if program is None:
        yield None
        return
    read, write = os.pipe()
    try:
        os.write(write, program)  # 8 bytes an instruction: far below a pipe's buffer
        os.close(write)
        write = -1
        yield read
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)


@functools.cache
def probe() -> Isolation:
    """Whether a bwrap run works here, tried once per process (~50 ms): a Python started the
    way programs are, inside the full boundary, that checks its own namespaces."""
    bwrap = os.environ.get(BWRAP_ENV) or shutil.which("bwrap")
    if not bwrap or not os.access(bwrap, os.X_OK):
        where = os.environ.get(BWRAP_ENV) or "bwrap on PATH"
        return Isolation(False, None, "", f"no bubblewrap ({where} not found)", _INSTALL_FIX)
    version = _version(bwrap)
    check = (
        "import os, socket\n"
        f"if os.getuid() != {SANDBOX_UID} or os.getcwd() != {WORK_DIR!r}:\n"
        "    raise SystemExit('not the sandbox user or work dir')\n"
        "if os.path.exists('/etc') or os.path.exists('/root/.ssh'):\n"
        "    raise SystemExit('host files visible')\n"
        "try:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "except OSError:\n    pass\nelse:\n    raise SystemExit('network reachable')\n"
        "try:\n    pid = os.fork()\nexcept OSError:\n    pass\nelse:\n"
        "    if pid == 0:\n        os._exit(0)\n    raise SystemExit('a process could start')\n"
    )
    work = Path(tempfile.mkdtemp(prefix="flywheel-isolation-probe-"))
    try:
        runner = work / "probe.py"
        runner.write_text(check)
        with process_filter_fd() as fd:
            argv = [*bwrap_argv(bwrap, work, runner, fd), python_executable(), "-I", "-S",
                    RUNNER_PATH]  # fmt: skip
            done = subprocess.run(argv, capture_output=True, timeout=30, env=_host_env(),
                                  pass_fds=() if fd is None else (fd,))  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return Isolation(False, bwrap, version, f"bwrap could not start: {exc}", _ns_fix())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return Isolation(False, bwrap, version, f"bwrap failed: {said[0][:200]}", _ns_fix())
    processes = (
        "no process can start (seccomp)"
        if process_filter() is not None
        else f"processes limited by RLIMIT_NPROC only (no filter for {platform.machine()})"
    )
    detail = (
        f"bubblewrap {version} ({bwrap}): user, pid, network, ipc, uts, mount namespaces; "
        f"read-only root; private work dir; uid 65534; no capabilities; {processes}"
    )
    return Isolation(True, bwrap, version, detail)


def require_isolation() -> Isolation:
    """The boundary in force, checked once. Raises SandboxUnavailableError naming what is missing
    and the fix, unless the operator trusts model-written code (then the returned Isolation has
    ``available`` False: say so loudly)."""
    isolation = probe()
    if isolation.available or trusted():
        return isolation
    raise SandboxUnavailableError(
        f"cannot isolate model-written code here: {isolation.detail}. Fix: {isolation.fix}. "
        f"Only on a host that is itself a boundary, run with `flywheel --trust-model-code` "
        f"({TRUST_ENV}=1) to run it unisolated (docs/operations.md)"
    )


def _host_env() -> dict[str, str]:
    """The environment bwrap itself gets: nothing of ours (its /proc/1/environ is visible inside
    the run)."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def _version(bwrap: str) -> str:
    try:
        done = subprocess.run([bwrap, "--version"], capture_output=True, timeout=10, text=True)
    except (OSError, subprocess.SubprocessError):
        return "?"
    return done.stdout.strip().removeprefix("bubblewrap ") or "?"


def _ns_fix() -> str:
    return (
        "allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; Ubuntu 24.04+: "
        "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap); in a "
        "container, the settings of docs/operations.md (seccomp, AppArmor, unmasked /proc)"
    )
