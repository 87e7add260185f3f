"""The sandbox against hostile programs: each ends scored, and nothing outside its run changes.

Every hostile program is aimed at things a test can watch: a canary directory on the host (with
a secret file), a victim process, a secret in the parent's environment, and marker processes it
tries to leave behind. Each test asserts the run was scored, the canary directory is unchanged,
the victim is alive, no process of the run is left, and the secret is nowhere in what the run
returned (outputs and reason), nor in the RolloutResult built from it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from environments.isolation import TRUST_ENV, probe, process_filter, require_isolation
from environments.sandbox import (
    FORBIDDEN,
    MEMORY,
    OK,
    OUTPUT_LIMIT,
    RUNTIME_ERROR,
    STATUSES,
    SYNTAX_ERROR,
    TIMEOUT,
    RunResult,
    SandboxLimits,
    run_program,
)

# The wall limit far above the CPU limit: on 2 busy cores a run may get a fraction of a core, and
# a spinning program must still reach its 1 s of CPU (its reason: "CPU time") before the wall
# deadline, as every other program must end with its own reason. Only runs that block wait for
# the wall: the sleeper has a short one of its own (SLEEPER).
FAST = SandboxLimits(cpu_s=1, wall_s=30.0)
SLEEPER = SandboxLimits(cpu_s=1, wall_s=2.0)
SECRET = f"flywheel-secret-{uuid.uuid4().hex}"
MARKER = f"86399.{uuid.uuid4().int % 10**6:06d}"  # a `sleep` argument no other process has

# Rewrites the audit hook's refused events through the garbage collector (its closure cells)
# and makes every path look inside the work dir: after this the hook refuses nothing, and only
# the operating system stands.
DISARM = """
import gc, os.path
os.path.realpath = lambda p, *a, **k: '/work'
for _o in gc.get_objects():
    if callable(_o) and getattr(_o, '__name__', '') == 'hook' and getattr(_o, '__closure__', None):
        for _c in _o.__closure__:
            if isinstance(_c.cell_contents, tuple):
                _c.cell_contents = ('-',)
"""

EXPECTED = {  # name -> (code, status, reason): the ordinary failures, each with its own reason
    "syntax error": ("def f(x):\n    return x +\n", SYNTAX_ERROR, "SyntaxError"),
    "infinite loop": ("def f(x):\n    while True:\n        pass\n", TIMEOUT, "CPU time"),
    "sleeper": ("import time\ndef f(x):\n    time.sleep(60)\n", TIMEOUT, "wall time"),
    "fork bomb": ("import os\ndef f(x):\n    while True:\n        os.fork()\n", FORBIDDEN,
                  "os.fork"),
    "memory hog": ("def f(x):\n    return 'a' * (10 ** 10)\n", MEMORY, "memory"),
    "huge output": ("def f(x):\n    print('a' * 10 ** 8)\n    return x\n", OUTPUT_LIMIT,
                    "wrote more than"),
    "os.system": ("import os\ndef f(x):\n    os.system('true')\n    return x\n", FORBIDDEN,
                  "os.system"),
    "subprocess": ("import subprocess\ndef f(x):\n    subprocess.run(['true'])\n    return x\n",
                   FORBIDDEN, "subprocess"),
    "network": ("import socket\ndef f(x):\n    socket.create_connection(('127.0.0.1', 9092))\n",
                FORBIDDEN, "socket"),
    "exception": ("def f(x):\n    return 1 / 0\n", RUNTIME_ERROR, "ZeroDivisionError"),
    "exit": ("import sys\ndef f(x):\n    sys.exit(3)\n", RUNTIME_ERROR, "SystemExit"),
    "exit while defining": ("import os\nos._exit(0)\n", "crashed", "no verdict"),
    "recursion": ("def f(x):\n    return f(x)\n", RUNTIME_ERROR, "RecursionError"),
    "no function": ("g = 1\n", RUNTIME_ERROR, "does not define"),
}  # fmt: skip

# name -> program; {canary}, {victim} and {marker} are filled in. Each returns what it got hold
# of (the test checks the secret is not in it) and must change nothing outside its work dir.
ESCAPES = {
    "hook tampering, then a shell": DISARM
    + """
import os
def f(x):
    return os.system("touch {canary}/pwned; kill -9 {victim}; setsid sleep {marker} &")
""",
    "path checks walked around by a patched realpath": """
import os, os.path
os.path.realpath = lambda p, *a, **k: '/work'
def f(x):
    open('{canary}/pwned', 'w').write('x')
    os.remove('{canary}/secret.txt')
    return 'wrote'
""",
    "descriptor-relative write, unlink and chmod": DISARM
    + """
import os
def f(x):
    got = []
    for where in ('{canary}', '/', '/usr'):
        try:
            d = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
            fd = os.open('pwned', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=d)
            os.write(fd, b'x')
            got.append(where)
        except OSError as e:
            got.append(type(e).__name__)
        try:
            os.unlink('secret.txt', dir_fd=d)
        except (OSError, NameError) as e:
            got.append(type(e).__name__)
    try:
        os.chmod(os.open('{canary}/secret.txt', os.O_RDONLY), 0o777)
    except OSError as e:
        got.append(type(e).__name__)
    return got
""",
    "low-level fork/exec in a session of its own": DISARM
    + """
import os, _posixsubprocess
def f(x):
    try:
        pid = _posixsubprocess.fork_exec(
            [b'/usr/bin/sleep', b'{marker}'], [b'/usr/bin/sleep'], True, (), None, None,
            -1, -1, -1, -1, -1, -1, *os.pipe(), False, True, -1, None, None, None, -1, None,
            False)
    except Exception as e:
        return type(e).__name__
    return pid
""",
    "a raw fork, setsid and exec": DISARM
    + """
import os
def f(x):
    try:
        pid = os.fork()
    except OSError as e:
        return type(e).__name__
    if pid == 0:
        os.setsid()
        os.execv('/usr/bin/sleep', ['sleep', '{marker}'])
    return pid
""",
    "pidfd signal to another process": DISARM
    + """
import os, signal
def f(x):
    got = []
    for pid in ({victim}, 1):
        try:
            signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL)
            got.append(pid)
        except OSError as e:
            got.append(type(e).__name__)
    return got
""",
    "host reads": DISARM
    + """
import os
def f(x):
    got = []
    for path in ('{canary}/secret.txt', '/etc/passwd', '/etc/shadow', '/root/.bashrc',
                 '/proc/1/environ', '/proc/self/environ', '/proc/%d/environ' % os.getppid(),
                 '/proc/1/cmdline'):
        try:
            got.append(open(path, 'rb').read()[:4000].decode(errors='replace'))
        except OSError as e:
            got.append(type(e).__name__)
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            try:
                got.append(open('/proc/%s/environ' % pid, 'rb').read().decode(errors='replace'))
            except OSError:
                pass
    return got
""",
    "environment reads": """
import os
def f(x):
    return dict(os.environ)
""",
    "an exception that carries host data": """
def f(x):
    raise ValueError(open('{canary}/secret.txt').read())
""",
    "sqlite and other C-level file access": DISARM
    + """
import sqlite3, _io, os
def f(x):
    got = []
    for attempt in (
        lambda: sqlite3.connect('{canary}/db.sqlite').execute('create table t(x)'),
        lambda: _io.FileIO('{canary}/pwned', 'w').write(b'x'),
        lambda: os.mkfifo('{canary}/fifo'),
        lambda: sqlite3.connect('/work/ok.sqlite').execute('create table t(x)'),
    ):
        try:
            attempt()
            got.append('ok')
        except Exception as e:
            got.append(type(e).__name__)
    return got
""",
    "a thread storm": """
import threading, time
def f(x):
    n = 0
    try:
        for _ in range(10000):
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
            n += 1
    except Exception as e:
        return (n, type(e).__name__)
    return n
""",
}


@pytest.fixture(scope="module")
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process on the host that hostile programs try to kill."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host directory with a secret in it, and the secret in the parent's environment."""
    folder = tmp_path / "canary"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET)
    monkeypatch.setenv("FLYWHEEL_TEST_SECRET", SECRET)
    return folder


def _snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mode, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's runs make their work dirs (``mkdtemp`` under ``tempfile.tempdir``): a
    folder no other run on the machine uses, so a process left by this test can be told apart."""
    folder = tmp_path / "runs"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _parent(pid: int) -> int:
    try:  # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _below_us(pid: int) -> bool:
    while pid > 1:
        pid = _parent(pid)
        if pid == os.getpid():
            return True
    return False


def _leftovers(runs: Path) -> list[str]:
    """Live processes a run of this test may have left: its markers, its bwrap (the run's work
    dir, under ``runs``, is on bwrap's command line; the runner dies with bwrap's PID namespace)
    and a runner below this process. Not another process's sandbox runs: a warm-up or a rollout
    on the same machine runs its own at the same time, and those are no leftovers of this test."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        runner = "sandbox_runner.py" in cmdline or "/sandbox/runner.py" in cmdline
        if (MARKER in cmdline or f"{runs}/" in cmdline
                or (runner and _below_us(int(entry.name)))):  # fmt: skip
            found.append(f"{entry.name} (parent {_parent(int(entry.name))}): {cmdline[:200]}")
    return found


def _check_contained(
    result: RunResult, canary: Path, before: object, victim: object, runs: Path
) -> None:
    assert result.status in STATUSES, result
    assert _snapshot(canary) == before, "the canary directory changed"
    assert isinstance(victim, subprocess.Popen) and victim.poll() is None, "the victim died"
    time.sleep(0.2)  # a marker started in the background has had time to appear
    assert _leftovers(runs) == []
    assert SECRET not in repr(result), "host data came back"
    assert len(result.reason) <= 300


def test_this_machine_isolates_model_code() -> None:
    # CI and the developers' machines run as root with bubblewrap: the boundary must be there,
    # or every test below would only be testing the fallback.
    isolation = require_isolation()
    assert isolation.available, isolation.detail
    assert "user, pid, network" in isolation.detail


def test_a_correct_program_runs_every_input() -> None:
    result = run_program("def f(x):\n    return x[::-1]\n", "f", ["abc", "de"], limits=FAST)
    assert (result.status, result.outputs) == (OK, ("'cba'", "'ed'"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ordinary_failures_end_scored_with_their_reason(
    name: str, canary: Path, victim: subprocess.Popen[bytes], runs: Path
) -> None:
    code, status, reason = EXPECTED[name]
    limits = SLEEPER if name == "sleeper" else FAST
    before = _snapshot(canary)
    started = time.monotonic()
    result = run_program(code, "f", ["abc"], limits=limits)
    assert (result.status, result.outputs) == (status, (None,)), result
    assert reason in result.reason, result
    assert time.monotonic() - started < limits.wall_s + 5  # never a hang of the caller
    _check_contained(result, canary, before, victim, runs)


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escapes_are_contained_by_the_operating_system(
    name: str, canary: Path, victim: subprocess.Popen[bytes], runs: Path
) -> None:
    code = ESCAPES[name].replace("{canary}", str(canary)).replace("{marker}", MARKER)
    code = code.replace("{victim}", str(victim.pid))
    before = _snapshot(canary)
    result = run_program(code, "f", ["abc"], limits=FAST)
    _check_contained(result, canary, before, victim, runs)


def test_hook_tampering_leaves_a_shell_that_can_do_nothing(canary: Path) -> None:
    # The disarmed hook lets os.system through; the process filter refuses the shell's start.
    code = ESCAPES["hook tampering, then a shell"].replace("{canary}", str(canary))
    result = run_program(code.replace("{victim}", "1").replace("{marker}", MARKER), "f", [1],
                         limits=FAST)  # fmt: skip
    assert result.status == OK and result.outputs != ("0",), result  # the shell never ran


def test_a_forged_verdict_does_not_turn_a_raise_into_ok() -> None:
    forged = '{"outputs": ["\'cba\'"], "errors": [null], "define_error": null, "refused": null, "limit": null}'  # noqa: E501
    code = (f"open('/work/.verdict', 'a').write('\\n' + {forged!r} + '\\n')\n"
            "def f(x):\n    raise ValueError('no')\n")  # fmt: skip
    result = run_program(code, "f", ["abc"], limits=FAST)
    assert (result.status, result.outputs) == (RUNTIME_ERROR, (None,)), result


def test_a_malformed_verdict_is_a_crash_not_a_claim() -> None:
    code = (
        "import os\nopen('/work/.verdict', 'a').write('\\n{\"status\": \"ok\"}\\n')\nos._exit(0)\n"
    )
    result = run_program(code, "f", ["abc"], limits=FAST)
    assert (result.status, result.outputs) == ("crashed", (None,)), result


def test_sibling_runs_cannot_see_each_other(tmp_path: Path) -> None:
    # One run writes a secret into its work dir and waits; the others look for any other run's.
    writer = (f"import time\nopen('/work/secret', 'w').write({SECRET!r})\n"
              "def f(x):\n    time.sleep(1.5)\n    return 1\n")  # fmt: skip
    reader = DISARM + (
        "import glob, os, time\ndef f(x):\n    time.sleep(0.5)\n"
        f"    found = glob.glob('/*/flywheel-sandbox-*') + glob.glob('{tmp_path.parent}/*')\n"
        "    found += glob.glob('/work/../*') + glob.glob('/tmp/*')\n"
        "    return [open(p).read() if os.path.isfile(p) else p for p in found]\n"
    )
    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(lambda c: run_program(c, "f", [1], limits=FAST),
                             [writer] * 2 + [reader] * 6))  # fmt: skip
    assert [r.status for r in runs] == [OK] * 8, runs
    assert all(SECRET not in repr(r) for r in runs[2:])


def test_the_process_filter_covers_this_machine() -> None:
    program = process_filter()
    assert program is not None and len(program) % 8 == 0
    assert process_filter("riscv64") is None  # no table: the doctor says processes are unlimited


def test_without_isolation_nothing_runs_unless_the_operator_trusts_the_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from environments.errors import SandboxUnavailableError

    monkeypatch.setenv("FLYWHEEL_BWRAP", "/nonexistent/bwrap")
    monkeypatch.delenv(TRUST_ENV, raising=False)
    probe.cache_clear()
    try:
        assert not probe().available
        with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
            run_program("def f(x):\n    return x\n", "f", [1])
        monkeypatch.setenv(TRUST_ENV, "1")
        result = run_program("def f(x):\n    return x\n", "f", [1], limits=FAST)
        assert (result.status, result.outputs) == (OK, ("1",))
    finally:
        probe.cache_clear()
