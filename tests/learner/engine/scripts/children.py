"""Starts tiny training runs as real child processes, cheaply.

Children come from a forkserver that imported torch, streaming and the learner once, so each
child starts in milliseconds instead of re-importing for ~10 s; they are still separate processes
that a test can SIGKILL. Each child runs ``tiny_training.py`` as ``__main__`` with its spec.
"""

from __future__ import annotations

import multiprocessing
import runpy
from collections.abc import Mapping, Sequence
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from flywheel.listen import free_port

SCRIPT = Path(__file__).with_name("tiny_training.py")
_PRELOAD = ["torch", "streaming", "learner.engine.trainer", "learner.engine.checkpoints"]


def context() -> ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def start(spec: Mapping[str, Any]) -> BaseProcess:
    """A started child running one training spec."""
    process = context().Process(
        target=runpy.run_path,
        args=(str(SCRIPT),),
        kwargs={"init_globals": {"SPEC": dict(spec)}, "run_name": "__main__"},
        daemon=True,
    )
    process.start()
    return process


def run_all(specs: Sequence[Mapping[str, Any]], timeout_s: float = 60.0) -> None:
    """Runs the specs concurrently (e.g. the ranks of one run); raises if any child fails."""
    processes = [start(spec) for spec in specs]
    for process in processes:
        process.join(timeout_s)
    for process in processes:
        if process.is_alive():
            process.kill()
    codes = [process.exitcode for process in processes]
    if any(code != 0 for code in codes):
        raise RuntimeError(f"training children exited with {codes}")


def run_ranks(spec: Mapping[str, Any], world_size: int, timeout_s: float = 60.0) -> None:
    """Runs ``spec`` on ``world_size`` gloo ranks, as torchrun would (env RANK/WORLD_SIZE)."""
    port = free_port()
    specs = [
        {**spec, "dist": {"rank": r, "world_size": world_size, "port": port}}
        for r in range(world_size)
    ]
    run_all(specs, timeout_s)
