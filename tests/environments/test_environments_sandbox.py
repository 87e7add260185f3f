"""The sandbox against hostile programs: each ends scored with its reason, nothing escapes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from environments.sandbox import (
    FORBIDDEN,
    MEMORY,
    OK,
    OUTPUT_LIMIT,
    RUNTIME_ERROR,
    SYNTAX_ERROR,
    TIMEOUT,
    SandboxLimits,
    isolation_report,
    run_program,
)

# A wall limit with room for a slow start: with both cores busy (a benchmark beside the tests)
# a 2 s wall ended exit, fork-bomb and huge-output programs as timeouts instead of their reason.
FAST = SandboxLimits(cpu_s=1, wall_s=6.0)
OUTSIDE = Path("/tmp") / f"flywheel-sandbox-escape-{os.getpid()}"

HOSTILE = {
    "syntax error": ("def f(x):\n    return x +\n", SYNTAX_ERROR, "SyntaxError"),
    "infinite loop": ("def f(x):\n    while True:\n        pass\n", TIMEOUT, "CPU time"),
    "sleeper": ("import time\ndef f(x):\n    time.sleep(60)\n", TIMEOUT, "wall time"),
    "fork bomb": ("import os\ndef f(x):\n    while True:\n        os.fork()\n", FORBIDDEN,
                  "os.fork"),
    "memory hog": ("def f(x):\n    return 'a' * (10 ** 10)\n", MEMORY, "memory"),
    "huge output": ("def f(x):\n    print('a' * 10 ** 8)\n    return x\n", OUTPUT_LIMIT,
                    "limit"),
    "write outside": (f"def f(x):\n    open({str(OUTSIDE)!r}, 'w').write('x')\n    return x\n",
                      FORBIDDEN, "outside the work dir"),
    "os.system": (f"import os\ndef f(x):\n    os.system('touch {OUTSIDE}')\n    return x\n",
                  FORBIDDEN, "os.system"),
    "subprocess": ("import subprocess\ndef f(x):\n    subprocess.run(['true'])\n    return x\n",
                   FORBIDDEN, "subprocess"),
    "network": ("import socket\ndef f(x):\n    socket.create_connection(('127.0.0.1', 9092))\n",
                FORBIDDEN, "socket"),
    "exception": ("def f(x):\n    return 1 / 0\n", RUNTIME_ERROR, "ZeroDivisionError"),
    "exit": ("import sys\ndef f(x):\n    sys.exit(3)\n", RUNTIME_ERROR, "SystemExit"),
    "no function": ("g = 1\n", RUNTIME_ERROR, "does not define f"),
}  # fmt: skip


def _runners() -> list[int]:
    """Pids of sandbox children still alive (their command line names the runner)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"sandbox_runner.py" in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_a_correct_program_runs_every_input() -> None:
    result = run_program("def f(x):\n    return x[::-1]\n", "f", ["abc", "de"], limits=FAST)
    assert (result.status, result.outputs) == (OK, ("'cba'", "'ed'"))


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_programs_end_scored_with_their_reason(name: str) -> None:
    code, status, reason = HOSTILE[name]
    started = time.monotonic()
    result = run_program(code, "f", ["abc"], limits=FAST)
    assert result.status == status, result
    assert reason in result.reason, result
    assert result.outputs == (None,)
    assert time.monotonic() - started < FAST.wall_s + 5  # never a hang of the caller
    assert not OUTSIDE.exists()  # no file appears outside the work dir
    assert _runners() == []  # no process outlives its trial


def test_a_program_cannot_see_the_expected_outputs() -> None:
    # The child gets inputs only; the caller compares. Printing a verdict does not help.
    code = "def f(x):\n    print('\\x00flywheel-sandbox-result\\x00{}')\n    return 0\n"
    result = run_program(code, "f", [1], limits=FAST)
    assert (result.status, result.outputs) == (OK, ("0",))


def test_isolation_is_checked_and_reported() -> None:
    report = isolation_report()
    assert set(report) == {"network_namespace", "unprivileged_user"}
    assert all(isinstance(v, bool) for v in report.values())
