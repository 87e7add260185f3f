"""Rollout worker throughput: generation against plain `model.generate`, and sandboxed scoring
against a bare `subprocess.run` of the same programs, each pair measured in the same run.

    .venv/bin/python -m bench.rollouts [--tasks 4 --group 8 --max-new-tokens 24 --rounds 5]
    .venv/bin/python -m bench.rollouts --checkpoint DIR --device cuda --dtype bfloat16  # a GPU
    .venv/bin/python -m bench.rollouts --env repository --checkpoint DIR  # episodes with tools

``--env program-synthesis`` (the default) measures single completions, below;
``--env repository`` (or ``repo``) measures episodes: the worker against a plain loop of
generate + tools at the same concurrency (``bench/rollouts_episodes.py``).

* generation: the worker's path (`policies.agent_sampling.sample`: one batched generate over
  tasks x group sequences, per-token log-probs, decoding, cut at end-of-sequence) vs
  ``model.generate`` with the same prompts, batch, sampling and budget; tokens counted are the
  generated positions of the batch (the same on both sides: ``min_new_tokens`` pins the length).
  The two alternate for ``--rounds`` rounds after a warm-up; medians are compared.
* scoring: the environment's sandboxed ``score`` (a fresh interpreter inside bubblewrap's
  namespaces, limits, the process filter, the audit hook) vs ``subprocess.run([python, -c,
  program])`` of the same programs, both with as many threads as CPUs. The programs are the
  reference solutions written as two statements (``y = …; return y``), so that every one runs
  in the sandbox: the environment evaluates a bare composition of its own operations itself,
  without starting anything, which measured no sandbox at all.
* start cost: one trivial program at a time, sandboxed vs bare, median milliseconds a run.

Prints tokens/s and programs/s of each side and the ratios (targets: generation >= 0.8x,
scoring >= 0.5x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from bench import rollouts_episodes
from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS, REPOSITORY
from environments.base import score_all
from environments.episodes import EpisodeLimits
from environments.isolation import require_isolation
from environments.program_synthesis import HEADER, PRELUDE, ProgramSynthesis, Spec, composition
from environments.sandbox import OK, run_program
from policies.agent_lm import AgentModelConfig, build_model, load_checkpoint, train_tokenizer
from policies.agent_sampling import SamplingParams, sample


def _model(args: argparse.Namespace, env: ProgramSynthesis) -> tuple[torch.nn.Module, object]:
    if args.checkpoint:
        dtype = getattr(torch, args.dtype)
        return load_checkpoint(Path(args.checkpoint), device=args.device, dtype=dtype)
    corpus = [env.reset(t) + env.solution(t) for t in env.tasks("train", 1000)]
    tokenizer = train_tokenizer(corpus, 512)
    torch.manual_seed(0)
    model = build_model(AgentModelConfig(), tokenizer).to(args.device).eval()
    return model, tokenizer


def _rate(work: Callable[[], int]) -> float:
    """Units per second of one call of ``work``."""
    started = time.perf_counter()
    units = work()
    return units / (time.perf_counter() - started)


def generation(args: argparse.Namespace, env: ProgramSynthesis) -> tuple[float, float]:
    model, tokenizer = _model(args, env)
    tasks = env.tasks("train", args.tasks, seed=1)
    prompts = [env.reset(t) for t in tasks]
    n, budget = args.group, args.max_new_tokens
    params = SamplingParams(temperature=1.0, max_new_tokens=budget)
    batch = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)  # type: ignore[operator]
    ids = batch["input_ids"].repeat_interleave(n, 0).to(args.device)
    mask = batch["attention_mask"].repeat_interleave(n, 0).to(args.device)
    tokens = len(prompts) * n * budget

    def plain() -> int:
        with torch.inference_mode():
            model.generate(  # type: ignore[operator]
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=None,
                max_new_tokens=budget, min_new_tokens=budget,
                pad_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
            )  # fmt: skip
        return tokens

    def worker() -> int:
        sample(model, tokenizer, prompts, n, params)
        return tokens

    model.generation_config.min_new_tokens = budget  # both sides generate the full budget
    plain(), worker()  # warm-up
    base, ours = [], []
    for _ in range(args.rounds):  # alternate, so drift hits both sides alike
        base.append(_rate(plain))
        ours.append(_rate(worker))
    return statistics.median(base), statistics.median(ours)


def _sandboxed_solution(solution: str) -> str:
    """``    return e`` as ``    y = e`` + ``    return y``: the same program, not a bare
    composition, so the environment runs it in the sandbox."""
    expression = solution.strip().removeprefix("return ")
    return f"    y = {expression}\n    return y\n"


def scoring(args: argparse.Namespace, env: ProgramSynthesis) -> tuple[float, float]:
    tasks = env.tasks("train", args.programs, seed=2)
    completions = [_sandboxed_solution(env.solution(t)) for t in tasks]
    if any(composition(c, Spec.from_json(t.spec).kind) is not None
           for t, c in zip(tasks, completions, strict=True)):  # fmt: skip
        raise RuntimeError("a program would skip the sandbox: the benchmark would measure none")
    workers = os.cpu_count() or 1

    def bare() -> int:
        def one(i: int) -> None:
            spec = Spec.from_json(tasks[i].spec)
            program = f"{PRELUDE}\n{HEADER}{completions[i]}\nfor x in {list(spec.tests)!r}: f(x)\n"
            subprocess.run([sys.executable, "-c", program], capture_output=True, check=True)

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, range(len(tasks))))
        return len(tasks)

    def sandboxed() -> int:
        scores = score_all([(env, t, c) for t, c in zip(tasks, completions, strict=True)])
        if not all(s.passed for s in scores):
            raise RuntimeError("a reference solution failed in the sandbox")
        return len(tasks)

    base, ours = [], []
    for _ in range(max(2, args.rounds // 2)):
        base.append(_rate(bare))
        ours.append(_rate(sandboxed))
    return statistics.median(base), statistics.median(ours)


def start_cost(runs: int = 30) -> tuple[float, float]:
    """Median milliseconds of one trivial program: bare ``python -c`` and sandboxed."""
    bare, ours = [], []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "def f(x):\n    return x\nf(1)"], check=True)
        bare.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        if run_program("def f(x):\n    return x\n", "f", [1]).status != OK:
            raise RuntimeError("a trivial program failed in the sandbox")
        ours.append((time.perf_counter() - started) * 1000)
    return statistics.median(bare), statistics.median(ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--env", choices=(PROGRAM_SYNTHESIS, REPOSITORY, "repo"), default=PROGRAM_SYNTHESIS,
        help="program-synthesis: completions and sandboxed scoring; repository (repo): episodes",
    )  # fmt: skip
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument(
        "--max-new-tokens", type=int, default=None,
        help="per trial; per turn of an episode (default 24; repository: 64, the eval suite's)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--programs", type=int, default=64)
    parser.add_argument("--checkpoint", default=None, help="an HF checkpoint dir (else random)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", help="with --checkpoint: bfloat16 on a GPU")
    parser.add_argument("--skip-scoring", action="store_true")
    parser.add_argument("--skip-generation", action="store_true")
    episodes = parser.add_argument_group("repository episodes")
    episodes.add_argument("--temperature", type=float, default=0.4,
                          help="the rollout workers' default")  # fmt: skip
    episodes.add_argument("--top-p", type=float, default=1.0)
    episodes.add_argument("--max-turns", type=int, default=EpisodeLimits.max_turns)
    episodes.add_argument("--max-context", type=int, default=EpisodeLimits.max_tokens,
                          help="an episode's tokens")  # fmt: skip
    episodes.add_argument("--seed", type=int, default=0, help="the episodes' sampling seed")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    if args.env != PROGRAM_SYNTHESIS:
        args.max_new_tokens = args.max_new_tokens or 64
        rollouts_episodes.run(args)
        return
    args.max_new_tokens = args.max_new_tokens or 24
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    assert isinstance(env, ProgramSynthesis)
    if not args.skip_generation:
        base, ours = generation(args, env)
        print(f"generation, {args.tasks} tasks x {args.group} trials x {args.max_new_tokens} "
              f"tokens on {args.device}:")  # fmt: skip
        print(f"  plain model.generate : {base:10,.0f} tokens/s")
        print(f"  rollout worker       : {ours:10,.0f} tokens/s  ratio {ours / base:.2f} (>= 0.8)")
    if not args.skip_scoring:
        print(f"sandbox: {require_isolation().detail}")
        base, ours = scoring(args, env)
        print(f"scoring, {args.programs} programs, {os.cpu_count()} threads:")
        print(f"  bare subprocess.run  : {base:10,.1f} programs/s")
        print(
            f"  sandboxed score      : {ours:10,.1f} programs/s  ratio {ours / base:.2f} (>= 0.5)"
        )
        base, ours = start_cost()
        print(f"start cost, one trivial program at a time: bare {base:.1f} ms, sandboxed "
              f"{ours:.1f} ms (+{ours - base:.1f} ms a run)")  # fmt: skip


if __name__ == "__main__":
    main()
