"""Memory and CPU of processes from Linux /proc (psutil is not installed): the benchmarks'
one reader."""

from __future__ import annotations

import os
from pathlib import Path

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far; OSError once it is gone."""
    stat = _stat(pid)
    return (int(stat[11]) + int(stat[12])) / _CLK_TCK


def process_children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process now (one pass over /proc)."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int(_stat(int(entry.name))[1])
            except (OSError, IndexError, ValueError):
                continue  # the process exited meanwhile
            kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree(pid: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def tree_usage(pid: int, kids: dict[int, list[int]]) -> tuple[float, float] | None:
    """(VmRSS MiB, CPU seconds) of ``pid`` and its descendants; None once ``pid`` is gone."""
    rss_kib, cpu_s, alive = 0, 0.0, False
    for p in _tree(pid, kids):
        try:
            status = Path(f"/proc/{p}/status").read_text()
            cpu_s += cpu_seconds(p)
        except OSError:
            continue
        alive = alive or p == pid
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss_kib += int(line.split()[1])
    return (rss_kib / 1024, cpu_s) if alive else None
