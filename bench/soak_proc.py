"""Memory and CPU of a process and its descendants, from Linux /proc (psutil is not installed)."""

from __future__ import annotations

import os
from pathlib import Path

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process now (one pass over /proc)."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
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
    rss_kib, ticks, alive = 0, 0, False
    for p in _tree(pid, kids):
        try:
            status = Path(f"/proc/{p}/status").read_text()
            stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        alive = alive or p == pid
        ticks += int(stat[11]) + int(stat[12])  # utime + stime
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss_kib += int(line.split()[1])
    return (rss_kib / 1024, ticks / _CLK_TCK) if alive else None
