"""The GPU check of the agent recipe: GRPO through the Trainer on CUDA (bf16 autocast) for a
fixed number of steps, tokens/s and model FLOPs utilisation, then the GPU checkpoint resumed on
the CPU for one more step.

    .venv/bin/python -m bench.agent_gpu [--steps 50 --batch 16 --rows 16] [--hidden 512
        --layers 8] [--peak-tflops 989] [--no-cpu-resume]   # H200 dense bf16; --device cpu here

The rows are synthetic trials (random prompt and completion tokens, behaviour log-probs, ±1
advantages) in a real MDS token window: throughput does not depend on their values, and no
sandbox runs on the GPU machine. MFU = 6 * parameters * trained tokens per second (forward and
backward of every token of a row, prompt included) / the device's peak.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from learner.data.token_windows import TokenSampleSpec, pack_sequences, write_token_window
from learner.engine.loader import WindowStream
from learner.engine.trainer import StepReport, Trainer, TrainerConfig
from learner.recipes.agent_rl.grpo import GRPOConfig, GRPOTask
from learner.recipes.agent_rl.windows import AgentRows
from policies.agent_lm import AgentModelConfig, build_model, parameter_count, train_tokenizer

SEQ_LEN = 128


def synthetic_rows(n: int, vocab: int, seed: int = 0) -> AgentRows:
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, vocab, size=rng.integers(60, 100)).tolist() for _ in range(n)]
    completions = [rng.integers(3, vocab, size=rng.integers(8, 24)).tolist() for _ in range(n)]
    tokens = pack_sequences(prompts, completions, SEQ_LEN, 0)
    behaviour = np.where(tokens.target > 0, -rng.uniform(0.1, 3.0, tokens.target.shape), 0.0)
    return AgentRows(
        tokens, behaviour.astype(np.float32), np.ones(n, np.float32),
        rng.choice([-1.0, 1.0], n).astype(np.float32), np.zeros(n, np.float32),
        np.ones(n, np.int32), rng.integers(0, 1 << 40, n),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=16, help="MDS samples per step")
    parser.add_argument("--rows", type=int, default=16, help="trials per MDS sample")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak")
    parser.add_argument(
        "--cpu-resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="resume the checkpoint on the CPU for one step (slow for big models)",
    )
    args = parser.parse_args()
    shape = AgentModelConfig(hidden_size=args.hidden, layers=args.layers, heads=8, kv_heads=2,
                             intermediate_size=4 * args.hidden, vocab_size=512,
                             max_positions=SEQ_LEN)  # fmt: skip
    tokenizer = train_tokenizer(["def f(x):\n    return x\n"] * 50, 512)
    torch.manual_seed(0)
    model = build_model(shape, tokenizer)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    params = parameter_count(model)

    def factory() -> Any:
        fresh = type(model)(model.config)
        fresh.load_state_dict(state)
        return fresh

    rows = synthetic_rows(args.batch * args.rows * (args.steps + 1), shape.vocab_size)
    stamps: list[tuple[float, int]] = []

    def on_step(report: StepReport) -> None:
        if args.device == "cuda":
            torch.cuda.synchronize()
        stamps.append((time.perf_counter(), report.progress.batches))

    with tempfile.TemporaryDirectory() as tmp:
        window = write_token_window(Path(tmp) / "window", rows.arrays(),
                                    TokenSampleSpec(SEQ_LEN, args.rows))  # fmt: skip
        config = TrainerConfig(
            save_dir=Path(tmp) / "ckpt", batch_size=args.batch, duration=f"{args.steps}ba",
            checkpoint_interval=f"{args.steps}ba", lr=3e-4, grad_clip_norm=1.0,
            device=args.device,
        )  # fmt: skip
        task = GRPOTask(GRPOConfig())
        Trainer(config, task, factory, [WindowStream(window)], on_step=on_step).fit()
        (t0, b0), (t1, b1) = stamps[0], stamps[-1]
        rows_per_s = (b1 - b0) * args.batch * args.rows / (t1 - t0)
        completion = rows.tokens.trained_tokens / len(rows)
        flops = 6 * params * rows_per_s * float(rows.tokens.lengths.mean())
        print(f"model {params / 1e6:.1f}M parameters, {args.batch * args.rows} trials/step, "
              f"device {args.device}")  # fmt: skip
        in_rows = rows_per_s * float(rows.tokens.lengths.mean())
        print(f"trained {rows_per_s * completion:,.0f} completion tokens/s "
              f"({in_rows:,.0f} tokens/s in rows)")  # fmt: skip
        print(f"MFU {flops / (args.peak_tflops * 1e12):.1%} of {args.peak_tflops:g} TFLOP/s")
        if not args.cpu_resume:
            return
        # The GPU's checkpoint, resumed on the CPU for one more step.
        resumed = dataclasses.replace(config, device="cpu", duration=f"{args.steps + 1}ba")
        done = Trainer(resumed, task, factory, [WindowStream(window)]).fit()
        print(f"resumed on cpu at step {args.steps}: now {done.progress.batches} steps, loss "
              f"{done.losses[-1]:.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
