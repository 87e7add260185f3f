"""A tiny training run for the trainer tests: a linear model over packed rows in MDS windows.

Used in-process (load this file with importlib) and as a child process: either
``python tiny_training.py spec.json`` or ``runpy.run_path(path, init_globals={"SPEC": spec})``
from a forkserver child that already imported torch and streaming (a fresh interpreter spends
~10 s importing them on a small box).

The spec (JSON): windows [dirs], save_dir, batch_size, duration, checkpoint_interval,
microbatch_size, seed, init_from, loader ("auto", "memory" or "streaming"), log (per-step
sample ids, one JSON line per step, fsynced),
result (FitResult summary), step_sleep_s, oom_above (inject OOM for microbatches of more
samples) on oom_ranks, env (extra environment), dist {rank, world_size, port} (sets the
env torchrun would).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import streaming
import torch

from learner.engine.loader import WindowStream
from learner.engine.trainer import FitResult, StepReport, Trainer, TrainerConfig

DIM = 4
MAX_ROWS_PER_SAMPLE = 3


def write_window(out: Path, first_id: int, count: int, seed: int) -> Path:
    """An MDS window of ``count`` samples; sample i packs 1 + i % 3 rows of (x, y)."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, DIM + 1, dtype=np.float32)
    columns = {"id": "int", "x": "ndarray:float32", "y": "ndarray:float32"}
    with streaming.MDSWriter(out=str(out), columns=columns, size_limit=1 << 12) as writer:
        for i in range(first_id, first_id + count):
            rows = 1 + i % MAX_ROWS_PER_SAMPLE
            x = rng.normal(size=(rows, DIM)).astype(np.float32)
            y = (x @ weights + rng.normal(scale=0.1, size=rows)).astype(np.float32)
            writer.write({"id": i, "x": x, "y": y})
    return out


class LinearTask:
    """Squared error per row; raises OOM for microbatches above ``oom_above`` samples."""

    def __init__(self, oom_above: int | None = None) -> None:
        self.oom_above = oom_above
        self.ooms = 0

    def loss(
        self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.oom_above is not None and batch["id"].numel() > self.oom_above:
            self.ooms += 1
            raise torch.OutOfMemoryError("CUDA out of memory (injected by the test task)")
        pred = model(batch["x"]).squeeze(-1)
        per_row = (pred - batch["y"]) ** 2
        return per_row.sum(), torch.tensor(per_row.numel())


def make_model() -> torch.nn.Module:
    return torch.nn.Linear(DIM, 1)


def _logger(path: Path | None, sleep_s: float) -> Any:
    def on_step(report: StepReport) -> None:
        if path is not None:
            line = {"step": report.progress.batches, "ids": [int(i) for i in report.batch["id"]]}
            line |= {"epoch": report.progress.epochs, "mb": report.microbatch_size}
            with open(path, "a") as handle:
                handle.write(json.dumps(line) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        if sleep_s:
            time.sleep(sleep_s)

    return on_step


def run(spec: Mapping[str, Any]) -> FitResult:
    """Trains as ``spec`` says; writes the result summary if ``spec['result']`` is set."""
    os.environ.update(spec.get("env", {}))
    if spec.get("dist"):
        d = spec["dist"]
        os.environ.update(
            RANK=str(d["rank"]),
            LOCAL_RANK=str(d["rank"]),
            WORLD_SIZE=str(d["world_size"]),
            LOCAL_WORLD_SIZE=str(d["world_size"]),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(d["port"]),
        )
    config = TrainerConfig(
        save_dir=Path(spec["save_dir"]),
        batch_size=spec["batch_size"],
        duration=spec["duration"],
        checkpoint_interval=spec.get("checkpoint_interval", "1ep"),
        microbatch_size=spec.get("microbatch_size", "auto"),
        lr=spec.get("lr", 0.05),
        seed=spec.get("seed", 7),
        init_from=Path(spec["init_from"]) if spec.get("init_from") else None,
        keep_checkpoints=spec.get("keep", 2),
        device="cpu",
        loader=spec.get("loader", "auto"),
    )
    oom_ranks = spec.get("oom_ranks")  # None: every rank
    rank = spec["dist"]["rank"] if spec.get("dist") else 0
    task = LinearTask(spec.get("oom_above") if oom_ranks is None or rank in oom_ranks else None)
    log = spec.get("log")
    if log and spec.get("dist"):
        log = f"{log}.rank{spec['dist']['rank']}"
    trainer = Trainer(
        config,
        task,
        make_model,
        [WindowStream(Path(w)) for w in spec["windows"]],
        on_step=_logger(Path(log) if log else None, spec.get("step_sleep_s", 0.0)),
    )
    result = trainer.fit()
    if spec.get("result"):
        summary = {
            "steps": result.steps,
            "samples": result.samples,
            "resumed_from": result.resumed_from,
            "warm_started": result.warm_started,
            "microbatch_size": result.microbatch_size,
            "ooms": task.ooms,
            "losses": result.losses,
            "last_checkpoint": str(result.last_checkpoint),
        }
        Path(spec["result"]).write_text(json.dumps(summary))
    return result


if __name__ == "__main__":
    _spec = globals().get("SPEC")
    if _spec is None:
        _spec = json.loads(Path(sys.argv[1]).read_text())
    run(_spec)
