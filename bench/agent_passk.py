"""What could RL reach from a checkpoint? Greedy pass@1 beside sampled pass@k, per depth.

    .venv/bin/python -m bench.agent_passk --checkpoint DIR [--tasks 400 --samples 16
        --temperature 1.0]

GRPO with groups of ``k`` trials learns from the tasks where at least one trial of ``k``
passes, so the policy's pass@k at the rollout temperature bounds what a few versions can move
greedy pass@1 to (the RL literature's "pass@k of the base model"). Each of the eval suite's
first ``--tasks`` tasks gets ``--samples`` completions; pass@k is the unbiased estimator
1 - C(n - c, k) / C(n, k) over them (n samples, c correct).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from learner.eval_suite import GREEDY_BATCH, evaluate, pass_at_k, sample_trials
from policies.agent_lm import load_checkpoint
from policies.agent_sampling import SamplingParams

KS = (1, 2, 4, 8, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="an HF checkpoint directory")
    parser.add_argument("--tasks", type=int, default=400, help="the eval suite's first N")
    parser.add_argument("--samples", type=int, default=16, help="completions per task")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    tasks = env.tasks("eval", args.tasks)
    model, tokenizer = load_checkpoint(Path(args.checkpoint))
    greedy = evaluate(model, tokenizer, env, tasks, max_new_tokens=args.max_new_tokens)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    n, correct = args.samples, []
    step = max(1, GREEDY_BATCH // n)
    for start in range(0, len(tasks), step):
        trials = sample_trials(model, tokenizer, env, tasks[start : start + step], n, params)
        correct += [sum(t.score.passed for t in trials[i : i + n])
                    for i in range(0, len(trials), n)]  # fmt: skip
    hits, depth = np.asarray(correct), np.asarray([t.difficulty for t in tasks])
    for d in [*np.unique(depth), None]:
        mask = depth == d if d is not None else np.ones(len(tasks), dtype=bool)
        ks = "  ".join(f"pass@{k} {pass_at_k(hits[mask], n, k):5.1%}" for k in KS if k <= n)
        label = f"depth {d}" if d is not None else "all    "
        print(f"{label}: greedy {greedy.passed[mask].mean():5.1%}  {ks}  ({mask.sum()} tasks)")


if __name__ == "__main__":
    main()
