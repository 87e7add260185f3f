"""Does the agent learn from its own trials? GRPO iterations from a warm-up checkpoint, with the
eval suite's greedy pass@1 before and after (the same held-out tasks).

    .venv/bin/python -m bench.agent_learning --checkpoint DIR [--env repository --iterations 25
        --tasks 16 --group 8 --lr 3e-4] [--flip]   # --flip: advantages negated (a bad candidate)
        [--optimizer sgd --lr 1.0]                 # steps in proportion to the gradient

Each iteration: sample ``group`` trials of ``tasks`` training tasks (at --temperature; episodes of
tool calls in a multi-turn environment), score them in the sandbox, normalise rewards within each
group (the joiner's grpo@1 formula), drop flat groups, and take one optimizer step of the GRPO
objective (learner.recipes.agent_rl.grpo) on the trials' tokens with their behaviour log-probs
(an episode's tool observations masked out). Prints the mean trial reward and gradient norm (before
clipping) per iteration, pass@1 before and after, the eval check's paired decision and the wall
time.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from contracts.advantages import normalised_advantages
from environments import ENVIRONMENTS, REPOSITORY
from environments.base import AnyEnvironment, Task, training_tasks
from environments.episodes import EpisodeLimits
from learner.eval_suite import EvalResult, evaluate
from learner.recipes.agent_rl.eval_check import EvalCheckConfig, eval_check
from learner.recipes.agent_rl.grpo import GRPOConfig, GRPOTask, TrialFilter
from learner.recipes.agent_rl.trials import collect_trials
from learner.recipes.agent_rl.windows import AgentRows
from policies.agent_lm import load_checkpoint
from policies.agent_sampling import SamplingParams


@dataclass(frozen=True)
class GRPOSettings:
    """How :func:`grpo_iteration` samples its trials and trains on them."""

    group: int  # trials per task
    sampling: SamplingParams
    seq_len: int = 512  # tokens per training row
    limits: EpisodeLimits | None = None  # an episode's bounds (multi-turn environments)
    epochs: int = 1  # optimizer steps per batch (the ratio to the behaviour policy clips later)
    reward: Literal["tests", "solved"] = "tests"  # solved: 1 when all hidden tests pass, else 0
    flip: bool = False  # negate advantages (a bad candidate)
    positive_only: bool = False  # train on trials with positive advantage only


@dataclass(frozen=True)
class Iteration:
    """What one iteration sampled (the rows, with the advantages it trained with) and how many
    trials it trained on."""

    rows: AgentRows
    advantage: np.ndarray
    trained: int
    flat: int  # trials in groups whose advantages were all equal (no signal)
    grad_norm: float = 0.0  # mean over the iteration's steps, before clipping

    def line(self) -> str:
        length = self.rows.tokens.target.sum(axis=1).mean()  # trained tokens, end included
        return (
            f"mean trial reward {self.rows.reward.mean():.3f}, {length:.1f} tokens per trial, "
            f"trained on {self.trained} trials ({self.flat} in flat groups), "
            f"gradient norm {self.grad_norm:.3f}"
        )


def grpo_iteration(
    model: Any,
    tokenizer: Any,
    environment: AnyEnvironment,
    tasks: Sequence[Task],
    settings: GRPOSettings,
    objective: GRPOTask,
    optimizer: torch.optim.Optimizer,
    *,
    seed: int,
) -> Iteration:
    """One GRPO iteration in process: ``settings.group`` trials of each task (episodes in a
    multi-turn environment) sampled from ``model`` as it is, scored, normalised within their
    group, flat groups dropped, then ``settings.epochs`` optimizer steps of ``objective`` on the
    kept rows (an episode's tool observations masked out). Leaves ``model`` in train mode when
    it trained."""
    group = settings.group
    model.eval()
    rows = collect_trials(model, tokenizer, environment, tasks, group, settings.sampling,
                          seq_len=settings.seq_len, seed=seed, limits=settings.limits)  # fmt: skip
    advantage = rows.advantage
    if settings.reward == "solved":  # all hidden tests passed or nothing: what pass@1 counts
        solved = (rows.reward >= 1.0).astype(np.float32).tolist()
        advantage = np.concatenate([
            normalised_advantages(solved[j * group : (j + 1) * group]) for j in range(len(tasks))
        ]).astype(np.float32)  # fmt: skip
    advantage = -advantage if settings.flip else advantage
    keep, dropped = TrialFilter().keep(np.zeros(len(advantage), dtype=int), rows.group,
                                       advantage, production=0)  # fmt: skip
    if settings.positive_only:
        keep &= advantage > 0
    norms: list[float] = []
    if keep.any():
        model.train()
        batch = rows.batch(keep)
        batch["advantage"] = torch.from_numpy(advantage[keep])
        for _ in range(settings.epochs):
            total, count = objective.loss(model, batch)
            (total / count).backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
            optimizer.step()
            optimizer.zero_grad()
    grad_norm = float(np.mean(norms)) if norms else 0.0
    return Iteration(rows, advantage, int(keep.sum()), dropped["flat_group"], grad_norm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="an HF checkpoint (agent-sft's hf/)")
    parser.add_argument("--iterations", type=int, default=25)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--temperature", type=float, default=1.0, help="the trials' sampling")
    parser.add_argument("--top-p", type=float, default=1.0, help="the trials' nucleus")
    parser.add_argument("--epochs", type=int, default=1, help="optimizer steps per batch")
    parser.add_argument("--eval-tasks", type=int, default=200)
    parser.add_argument("--env", default=REPOSITORY, help="the environment (its training pool)")
    parser.add_argument("--max-depth", type=int, default=3, help="train on levels 1..this")
    parser.add_argument("--flip", action="store_true", help="negate advantages (a bad candidate)")
    parser.add_argument("--kl", type=float, default=0.0, help="k3 KL coefficient to the start")
    parser.add_argument(
        "--normalisation", choices=("token", "sequence"), default="token",
        help="the loss's mean: over completion tokens (DAPO) or over trials (GRPO)",
    )  # fmt: skip
    parser.add_argument(
        "--positive-only",
        action="store_true",
        help="train on trials with positive advantage only (rejection sampling)",
    )
    parser.add_argument(
        "--optimizer", choices=("adamw", "sgd"), default="adamw",
        help="adamw (the recipe's) or sgd: steps in proportion to the gradient, not its sign",
    )  # fmt: skip
    parser.add_argument("--momentum", type=float, default=0.0, help="sgd's momentum")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reward", choices=("tests", "solved"), default="tests",
        help="tests: the share of hidden tests passed (the environment's reward); solved: 1 "
        "when all pass, else 0 (what pass@1 counts)",
    )  # fmt: skip
    parser.add_argument("--eval-every", type=int, default=0, help="pass@1 every N iterations")
    parser.add_argument(
        "--eval-trained", action="store_true",
        help="also greedy pass@1 on the training tasks themselves, before and after: does the "
        "recipe learn what it trained on (optimisation) where unseen instances do not gain "
        "(generalisation)?",
    )  # fmt: skip
    parser.add_argument("--max-new-tokens", type=int, default=64, help="per trial (per turn)")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per training row")
    parser.add_argument("--max-context", type=int, default=512, help="an episode's tokens")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    env = ENVIRONMENTS.get_any(args.env)
    eval_tasks = env.tasks("eval", args.eval_tasks)
    model, tokenizer = load_checkpoint(Path(args.checkpoint))
    limits = EpisodeLimits(max_tokens=args.max_context)
    started = time.monotonic()

    def evaluated(tasks: Sequence[Task] = eval_tasks) -> EvalResult:
        model.eval()
        return evaluate(model, tokenizer, env, tasks, max_new_tokens=args.max_new_tokens,
                        limits=limits)  # fmt: skip

    before = evaluated()
    print(f"pass@1 before: {before.pass_at_1:.1%} ({_by_depth(before, eval_tasks)})")
    reference = None
    if args.kl > 0:
        reference, _ = load_checkpoint(Path(args.checkpoint))
    task = GRPOTask(GRPOConfig(kl_coef=args.kl, normalisation=args.normalisation), reference)
    optimizer = (
        torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
        if args.optimizer == "sgd"
        else torch.optim.AdamW(model.parameters(), lr=args.lr)
    )
    rng, draw = random.Random(0), random.Random(f"train-{args.seed + 1}")
    levels = range(1, args.max_depth + 1)
    drawn = training_tasks(ENVIRONMENTS, args.env, draw.randrange(1 << 30), levels)
    pool = list(islice(drawn, args.tasks * args.iterations))
    trained_before = evaluated(pool) if args.eval_trained else None
    if trained_before is not None:
        print(f"pass@1 on the {len(pool)} training tasks before: {trained_before.pass_at_1:.1%}")
    sampling = SamplingParams(args.temperature, args.top_p, args.max_new_tokens)
    settings = GRPOSettings(
        group=args.group, sampling=sampling, seq_len=args.seq_len, limits=limits,
        epochs=args.epochs, reward=args.reward, flip=args.flip, positive_only=args.positive_only,
    )  # fmt: skip
    for i in range(args.iterations):
        tasks = pool[i * args.tasks : (i + 1) * args.tasks]
        done = grpo_iteration(model, tokenizer, env, tasks, settings, task, optimizer,
                              seed=rng.randrange(1 << 30))  # fmt: skip
        print(f"iteration {i + 1:3d}: {done.line()}", flush=True)
        if args.eval_every and (i + 1) % args.eval_every == 0 and i + 1 < args.iterations:
            now = evaluated()
            print(f"  pass@1 after {i + 1} iterations: {now.pass_at_1:.1%} "
                  f"({_by_depth(now, eval_tasks)})", flush=True)  # fmt: skip
    after = evaluated()
    decision = eval_check(after, before, EvalCheckConfig())
    lift, took = after.pass_at_1 - before.pass_at_1, time.monotonic() - started
    print(f"pass@1 after {args.iterations} iterations: {after.pass_at_1:.1%} ({lift:+.1%} "
          f"points); {took:.0f}s")  # fmt: skip
    print(f"eval check: {'PASS' if decision.passed else 'REFUSED'}: {decision.reason}")
    if trained_before is not None:
        trained_after = evaluated(pool)
        print(f"pass@1 on the {len(pool)} training tasks: {trained_before.pass_at_1:.1%} -> "
              f"{trained_after.pass_at_1:.1%} ({_by_depth(trained_after, pool)})")  # fmt: skip


def _by_depth(result: EvalResult, tasks: list[Task]) -> str:
    """pass@1 per level (composition depth): 'level 1 41.9%, level 2 2.7%, ...'."""
    passed = np.asarray(result.passed, dtype=float)
    depth = np.asarray([t.difficulty for t in tasks])
    return ", ".join(f"level {d} {passed[depth == d].mean():.1%}" for d in np.unique(depth))


if __name__ == "__main__":
    main()
