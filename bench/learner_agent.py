"""The agent recipe's training throughput: the Trainer with the GRPO objective over an MDS token
window vs a plain torch loop over the same rows in memory, same model, batches and optimizer.

    .venv/bin/python -m bench.learner_agent [--checkpoint DIR] [--trials 1024 --batch 4
        --rows 16 --steps 40] [--device cuda --dtype bfloat16]

The rows are real trials: sampled by the model (the default agent LM shape, or ``--checkpoint``)
on training tasks, scored, with group-relative advantages. Prints completion tokens/s of each
side (steady state: from the second step) and their ratio; the target is >= 0.8x. The gate
recipe's counterpart (rows/s of its Trainer vs its plain loop) is ``bench/learner_train.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from learner.data.token_windows import TokenSampleSpec, write_token_window
from learner.engine.loader import WindowStream
from learner.engine.trainer import StepReport, Trainer, TrainerConfig
from learner.recipes.agent_rl.grpo import GRPOConfig, GRPOTask
from learner.recipes.agent_rl.trials import collect_trials
from learner.recipes.agent_rl.windows import AgentRows
from policies.agent_lm import AgentModelConfig, build_model, load_checkpoint, train_tokenizer
from policies.agent_sampling import SamplingParams

SEQ_LEN = 128


def _model(args: argparse.Namespace) -> tuple[Any, Any]:
    if args.checkpoint:
        return load_checkpoint(Path(args.checkpoint))
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    tasks = env.tasks("train", 2000)
    tokenizer = train_tokenizer([env.reset(t) + env.solution(t) for t in tasks], 512)  # type: ignore[attr-defined]
    torch.manual_seed(0)
    return build_model(AgentModelConfig(), tokenizer), tokenizer


def _rows(model: Any, tokenizer: Any, trials: int, group: int) -> AgentRows:
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    tasks = env.tasks("train", trials // group, seed=7)
    rows = collect_trials(model.eval(), tokenizer, env, tasks, group,
                          SamplingParams(temperature=1.0, max_new_tokens=24), seq_len=SEQ_LEN,
                          seed=0)  # fmt: skip
    # Throughput does not depend on the values: give every row a signal (flat groups have 0).
    rng = np.random.default_rng(0)
    advantage = rng.choice([-1.0, 1.0], size=len(rows)).astype(np.float32)
    return AgentRows(rows.tokens, rows.behaviour, rows.temperature, advantage, rows.reward,
                     rows.version, rows.group)  # fmt: skip


def plain_loop(
    factory: Any, rows: AgentRows, rows_per_step: int, steps: int, device: str, dtype: Any
) -> float:
    """Completion tokens/s of a loop over shuffled in-memory rows (steady state)."""
    torch.manual_seed(0)
    model = factory().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    task = GRPOTask(GRPOConfig())
    arrays = {k: torch.from_numpy(v) for k, v in rows.arrays().items()}
    order = torch.randperm(len(rows))
    tokens, start = 0, 0.0
    for step in range(steps):
        if step == 1:
            start, tokens = time.perf_counter(), 0
        index = order[(step * rows_per_step) % len(rows) :][:rows_per_step]
        batch = {k: v[index].to(device) for k, v in arrays.items()}
        with torch.autocast(device, dtype=dtype, enabled=dtype is not None):
            total, count = task.loss(model, batch)
        torch.autograd.backward(total / count)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        tokens += int(count)
    if device == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def trainer(
    factory: Any, window: Path, save_dir: Path, batch: int, steps: int, device: str
) -> float:
    stamps: list[tuple[float, int]] = []

    def on_step(report: StepReport) -> None:
        stamps.append((time.perf_counter(), report.progress.tokens))

    config = TrainerConfig(
        save_dir=save_dir, batch_size=batch, duration=f"{steps}ba", lr=3e-4, grad_clip_norm=1.0,
        checkpoint_interval="1000000ba", device=device,  # type: ignore[arg-type]
    )  # fmt: skip
    Trainer(config, GRPOTask(GRPOConfig()), factory, [WindowStream(window)],
            on_step=on_step).fit()  # fmt: skip
    (t0, k0), (t1, k1) = stamps[0], stamps[-1]
    return (k1 - k0) / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", help="an HF checkpoint; default: a fresh default model")
    parser.add_argument("--trials", type=int, default=1024)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4, help="MDS samples per step")
    parser.add_argument("--rows", type=int, default=16, help="trials per MDS sample")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args()
    model, tokenizer = _model(args)
    rows = _rows(model, tokenizer, args.trials, args.group)
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def factory() -> Any:
        fresh = type(model)(model.config)
        fresh.load_state_dict(state)
        return fresh

    dtype = torch.bfloat16 if args.dtype == "bfloat16" else None
    with tempfile.TemporaryDirectory() as tmp:
        window = write_token_window(Path(tmp) / "window", rows.arrays(),
                                    TokenSampleSpec(SEQ_LEN, args.rows))  # fmt: skip
        base = plain_loop(factory, rows, args.batch * args.rows, args.steps, args.device, dtype)
        ours = trainer(factory, window, Path(tmp) / "ckpt", args.batch, args.steps, args.device)
    print(
        f"{len(rows):,} trials, {rows.tokens.trained_tokens:,} completion tokens; "
        f"{args.batch * args.rows} trials/step, {args.steps} steps, device {args.device}"
    )
    print(f"plain torch loop : {base:10,.0f} tokens/s")
    print(f"trainer (GRPO)   : {ours:10,.0f} tokens/s  ratio {ours / base:.2f}")


if __name__ == "__main__":
    main()
