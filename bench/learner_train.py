"""CPU training throughput: the Trainer over an MDS window of packed rows vs a plain tensor loop.

Same MLP, optimizer, rows per step and number of steps on both sides. The baseline indexes
shuffled in-memory tensors; the Trainer reads MDS samples (each packing ``--rows`` rows) through
streaming, splits microbatches, reduces gradients and writes one final checkpoint.

    .venv/bin/python -m bench.learner_train [--samples 4096 --rows 16 --batch 64 --steps 150]

Prints rows/s of each and their ratio (Trainer / baseline); steady state excludes setup (first
step) and the final checkpoint.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import streaming
import torch

from learner.loader import WindowStream
from learner.trainer import StepReport, Trainer, TrainerConfig

DIM = 32


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(DIM, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 1),
    )  # fmt: skip


class RegressionTask:
    def loss(
        self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        per_row = (model(batch["x"]).squeeze(-1) - batch["y"]) ** 2
        return per_row.sum(), torch.tensor(per_row.numel())


def write_data(out: Path, samples: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, rows, DIM)).astype(np.float32)
    y = (x.sum(-1) + rng.normal(scale=0.1, size=(samples, rows))).astype(np.float32)
    columns = {"id": "int", "x": "ndarray:float32", "y": "ndarray:float32"}
    with streaming.MDSWriter(out=str(out), columns=columns) as writer:
        for i in range(samples):
            writer.write({"id": i, "x": x[i], "y": y[i]})
    return x.reshape(-1, DIM), y.reshape(-1)


def baseline(x: np.ndarray, y: np.ndarray, rows_per_step: int, steps: int) -> float:
    """Rows/s of a plain loop over shuffled in-memory tensors (steady state)."""
    torch.manual_seed(0)
    model, xs, ys = make_model(), torch.from_numpy(x), torch.from_numpy(y)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    order = torch.randperm(len(xs))
    start = 0.0
    for step in range(steps):
        if step == 1:
            start = time.perf_counter()
        index = order[(step * rows_per_step) % len(xs) :][:rows_per_step]
        loss = ((model(xs[index]).squeeze(-1) - ys[index]) ** 2).sum() / len(index)
        optimizer.zero_grad()
        torch.autograd.backward(loss)
        optimizer.step()
    return rows_per_step * (steps - 1) / (time.perf_counter() - start)


def trainer(window: Path, save_dir: Path, batch: int, steps: int) -> tuple[float, float]:
    """(steady-state rows/s, whole-fit rows/s incl. setup and final checkpoint) of the Trainer."""
    stamps: list[tuple[float, int]] = []

    def on_step(report: StepReport) -> None:
        stamps.append((time.perf_counter(), report.progress.tokens))

    config = TrainerConfig(
        save_dir=save_dir, batch_size=batch, duration=f"{steps}ba",
        checkpoint_interval="1000000ba", device="cpu",
    )  # fmt: skip
    started = time.perf_counter()
    result = Trainer(config, RegressionTask(), make_model, [WindowStream(window)], on_step=on_step)
    fit = result.fit()
    whole = fit.progress.tokens / (time.perf_counter() - started)
    (t0, r0), (t1, r1) = stamps[0], stamps[-1]
    return (r1 - r0) / (t1 - t0), whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64, help="samples per step")
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        x, y = write_data(Path(tmp) / "window", args.samples, args.rows)
        base = baseline(x, y, args.batch * args.rows, args.steps)
        steady, whole = trainer(Path(tmp) / "window", Path(tmp) / "ckpt", args.batch, args.steps)
    print(
        f"rows/step={args.batch * args.rows} steps={args.steps} threads={torch.get_num_threads()}"
    )
    print(f"baseline tensor loop : {base:12,.0f} rows/s")
    print(f"trainer (steady)     : {steady:12,.0f} rows/s  ratio {steady / base:.2f}")
    print(f"trainer (whole fit)  : {whole:12,.0f} rows/s  ratio {whole / base:.2f}")


if __name__ == "__main__":
    main()
