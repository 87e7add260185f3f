"""The gate recipe's training throughput: the Trainer over an MDS window vs a plain tensor loop.

The gate's own pieces on both sides: `GatePolicyNet`, the doubly-robust `GateObjective` (its
reward model fitted once), reward rows packed as the learner packs them (`SampleSpec`,
``--rows`` per sample) and collated by `collate_rows`; same optimizer, rows per step and steps.
The baseline indexes shuffled in-memory tensors. The Trainer runs twice, once with each loader:
``memory`` (the default for windows that fit, `learner.engine.memory_loader`) and ``streaming``
(`streaming.StreamingDataLoader`); it splits microbatches, reduces gradients and writes one
final checkpoint.

    .venv/bin/python -m bench.learner_train [--rows-total 131072 --rows 64 --batch 32
        --steps 150]

Prints rows/s of each (steady state: from the second step to the last, without setup and the
final checkpoint) and the ratio of each loader to the baseline; the target is >= 0.8x.
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import streaming
import torch

from learner.engine.loader import WindowStream
from learner.engine.trainer import StepReport, Trainer, TrainerConfig
from learner.recipes.gate.objective import GateObjective, fit_reward_model
from learner.recipes.gate.samples import RewardRows, SampleSpec, collate_rows, rows_to_batch
from policies.context import CONTEXT_DIM
from policies.gate_net import GatePolicyNet

LR = 0.01


def make_rows(n: int) -> RewardRows:
    """Logged decisions of a uniform behaviour policy; reward depends on the context."""
    rng = np.random.default_rng(0)
    context = rng.normal(size=(n, CONTEXT_DIM)).astype(np.float32)
    shown = rng.random(n) < 0.5
    accept = rng.random(n) < 1 / (1 + np.exp(-context[:, 0]))
    return RewardRows(
        source_id=np.asarray([f"s{i}" for i in range(n)], dtype=object), context=context,
        shown=shown, propensity=np.full(n, 0.5), reward=np.where(shown, accept * 1.0 - 0.1, 0.0),
        model_version=np.zeros(n, dtype=np.int64), event_time_ms=np.zeros(n, dtype=np.int64),
    )  # fmt: skip


def make_model(rows: RewardRows) -> GatePolicyNet:
    torch.manual_seed(0)
    net = GatePolicyNet()
    net.set_standardisation(rows.features())
    return net


def write_window(out: Path, rows: RewardRows, rows_per_sample: int) -> None:
    spec = SampleSpec(rows_per_sample=rows_per_sample)
    with streaming.MDSWriter(out=str(out), columns=spec.columns()) as writer:
        for sample in spec.pack(rows):
            writer.write(sample)


def baseline(rows: RewardRows, task: GateObjective, rows_per_step: int, steps: int) -> float:
    """Rows/s of a plain loop over shuffled in-memory tensors (steady state)."""
    model, batch = make_model(rows), rows_to_batch(rows)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
    start = 0.0
    for step in range(steps):
        if step == 1:
            start = time.perf_counter()
        first = (step * rows_per_step) % (len(rows) - rows_per_step + 1)
        index = order[first : first + rows_per_step]
        loss, count = task.loss(model, {k: v[index] for k, v in batch.items()})
        optimizer.zero_grad()
        torch.autograd.backward(loss / count)
        optimizer.step()
    return rows_per_step * (steps - 1) / (time.perf_counter() - start)


def trainer(
    rows: RewardRows, task: GateObjective, window: Path, save_dir: Path, batch: int, steps: int,
    loader: str,
) -> float:  # fmt: skip
    """Steady-state rows/s of the Trainer with ``loader``."""
    stamps: list[tuple[float, int]] = []

    def on_step(report: StepReport) -> None:
        stamps.append((time.perf_counter(), report.progress.tokens))

    config = TrainerConfig(
        save_dir=save_dir, batch_size=batch, duration=f"{steps}ba", lr=LR,
        checkpoint_interval="1000000ba", device="cpu", loader=loader,  # type: ignore[arg-type]
    )  # fmt: skip
    Trainer(config, task, lambda: make_model(rows), [WindowStream(window)],
            collate=collate_rows, on_step=on_step).fit()  # fmt: skip
    (t0, r0), (t1, r1) = stamps[0], stamps[-1]
    return (r1 - r0) / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows-total", type=int, default=131072, help="reward rows in the window")
    parser.add_argument("--rows", type=int, default=64, help="rows per MDS sample (the config's)")
    parser.add_argument("--batch", type=int, default=32, help="samples per step (the config's)")
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    rows = make_rows(args.rows_total)
    task = GateObjective(fit_reward_model(rows))
    # Removed at exit, not before: streaming's prefetch thread may still look at the window.
    tmp = tempfile.mkdtemp(prefix="bench-learner-train-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    write_window(Path(tmp) / "window", rows, args.rows)
    base = baseline(rows, task, args.batch * args.rows, args.steps)
    results = {}
    for loader in ("memory", "streaming"):
        results[loader] = trainer(rows, task, Path(tmp) / "window", Path(tmp) / f"ckpt-{loader}",
                                  args.batch, args.steps, loader)  # fmt: skip
    print(f"gate model, rows/step={args.batch * args.rows} ({args.batch} samples x {args.rows} "
          f"rows) steps={args.steps} threads={torch.get_num_threads()}")  # fmt: skip
    print(f"baseline tensor loop  : {base:12,.0f} rows/s")
    for loader, rate in results.items():
        print(f"trainer, {loader + ' loader':13s}: {rate:12,.0f} rows/s  ratio {rate / base:.2f}")


if __name__ == "__main__":
    main()
