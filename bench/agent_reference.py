"""The agent's RL recipe in one process, with the loop's trials: does the platform cost learning?

The reference runs as many trials as the loop's versions consumed; the loop's pass@1 gain over
v1 should be >= 0.9x the reference's.

    .venv/bin/python -m bench.agent_reference --checkpoint DIR --demo-results RESULTS_JSON
    .venv/bin/python -m bench.agent_reference --checkpoint DIR --trials 1536 --versions 4 \\
        --loop-gain 0.03          # no demo results yet: give the budget and the loop's gain

``--checkpoint`` is the warm-up (v1, the loop's first production); ``--demo-results`` a demo
run's ``results.json`` (``flywheel.demo.results.RunResults``). The budget is the trials the
loop's candidates trained on: per version after v1, its new trials (``train_rows`` less the
served completions; ``trials`` in results written without it), one *block* each, in order. The
loop's gain is its best promoted eval pass@1 minus v1's (0 when none was promoted).

"The same recipe" here: the RL config (``--config``, default
``learner/recipes/agent_rl/configs/rl.yaml``): its environment and eval set (the first
``eval.tasks`` of the ``eval`` split, greedy episodes within ``eval.max_context`` tokens and
``eval.max_turns`` turns, ``eval.max_new_tokens`` a turn), its GRPO objective (clip bounds, TIS
cap, KL), AdamW at ``train.lr`` / ``train.weight_decay`` with the gradient clipped at 1,
trials of ``contracts.advantages.DEFAULT_GROUP_SIZE`` per task normalised within their group
(the joiner's formula) with flat groups dropped, episode rows of ``windows.seq_len`` tokens
with tool observations masked out, training tasks drawn by the rollout workers' curriculum.
Each block warm-starts from production with a fresh optimizer and takes as many optimizer steps
as a loop version (``train.duration`` batches; ``--epochs`` steps per iteration's batch by
default make it so), is evaluated once (a version), and the eval check
(``learner.recipes.agent_rl.eval_check`` with the config's ``release_check``, paired, clustered
by template) promotes it — the next block starts from it — or refuses it — the next block starts
from production again. The gain is the best promoted pass@1 minus v1's, measured here.

What differs from the loop: no Kafka, lake, joiner or MDS windows (trials go straight to the
optimizer, in memory); no staleness and no replay (each iteration samples from the weights
being trained, tasks x group trials at a time, and trains on those only; the loop's candidate
trains on trials its production sampled, mixed with replayed windows); no canary (the eval
check alone decides); the sampling settings are this script's (``--temperature``,
``--max-new-tokens``: keep them equal to the rollout workers'). On-policy, fresher trials favour
the reference, so a loop within 0.9x of it loses little to the platform.
"""

from __future__ import annotations

import argparse
import copy
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.agent_learning import GRPOSettings, grpo_iteration
from contracts.advantages import DEFAULT_GROUP_SIZE
from environments import ENVIRONMENTS
from environments.base import training_tasks
from environments.curriculum import Curriculum
from flywheel.demo.results import RunResults
from learner.engine.durations import Unit
from learner.eval_suite import EvalResult, evaluate
from learner.recipes.agent_rl.eval_check import eval_check
from learner.recipes.agent_rl.grpo import GRPOTask
from learner.recipes.agent_rl.recipe import DEFAULT_AGENT_CONFIG, AgentRLConfig
from policies.agent_lm import load_checkpoint
from policies.agent_sampling import SamplingParams

TARGET = 0.9


@dataclass(frozen=True)
class LoopRun:
    """What the loop did: the trials each of its candidate versions trained on, and its gain."""

    blocks: list[int]
    gain: float | None
    source: str


def loop_run(results: RunResults) -> LoopRun:
    """Blocks and gain of a demo run's agent loop (module docstring)."""
    versions = sorted(results.agent_versions, key=lambda v: v.version)
    if len(versions) < 2:
        raise SystemExit("the demo results hold no agent version after v1: nothing to compare")
    later = versions[1:]
    blocks = [v.train_rows - v.served_rows for v in later]
    source = "new trials each candidate trained on (train_rows - served_rows)"
    if not any(blocks):  # results written before train_rows
        blocks, source = [v.trials for v in later], "trials sampled by each version after v1"
    first = versions[0].eval_pass_at_1
    headline = results.agent_headline()
    if first is None:
        gain = None
    elif headline is None:
        gain = 0.0  # nothing promoted: no gain
    else:
        gain = (headline[1].eval_pass_at_1 or 0.0) - first
    return LoopRun([b for b in blocks if b > 0], gain, source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="the warm-up (v1): an HF checkpoint")
    parser.add_argument("--demo-results", type=Path, help="a demo run's results.json")
    parser.add_argument("--trials", type=int, help="the loop's trials (instead of the results)")
    parser.add_argument("--versions", type=int, default=4, help="with --trials: blocks of them")
    parser.add_argument("--loop-gain", type=float, help="the loop's pass@1 gain (points / 100)")
    parser.add_argument("--config", type=Path, default=DEFAULT_AGENT_CONFIG, help="RL config")
    parser.add_argument("--group", type=int, default=DEFAULT_GROUP_SIZE, help="trials per task")
    parser.add_argument(
        "--tasks", type=int, default=None,
        help="tasks per iteration (default: a loop step's trials / group)",
    )  # fmt: skip
    parser.add_argument(
        "--epochs", type=int, default=None,
        help="optimizer steps per iteration (default: a loop version's steps / iterations)",
    )  # fmt: skip
    parser.add_argument("--eval-tasks", type=int, default=None, help="default: the config's")
    parser.add_argument("--temperature", type=float, default=0.4, help="the rollout workers'")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="per turn (default: the config's eval.max_new_tokens)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.demo_results is None and args.trials is None:
        parser.error("give --demo-results, or --trials (and --loop-gain)")

    loop = (loop_run(RunResults.load(args.demo_results)) if args.demo_results
            else LoopRun([], None, ""))  # fmt: skip
    if args.trials is not None:  # the budget given: in --versions equal blocks
        per = max(1, args.trials // args.versions)
        loop = LoopRun([per] * args.versions, loop.gain, f"--trials {args.trials}")
    gain = args.loop_gain if args.loop_gain is not None else loop.gain
    config = AgentRLConfig.load(args.config)
    reference_gain = run_reference(args, config, loop.blocks, loop.source)
    print(f"gain in eval pass@1 over v1: reference {reference_gain:+.1%}", end="")
    if gain is None:
        print("; the loop's is unknown (give --loop-gain or demo results with v1's pass@1)")
        return
    print(f", loop {gain:+.1%}")
    if reference_gain <= 0:
        met = "met" if gain >= 0 else "NOT met"
        print(f"the reference gained nothing: ratio undefined; loop >= 0.9 x reference {met}")
        return
    ratio = gain / reference_gain
    print(f"loop / reference: {ratio:.2f}x (target >= {TARGET}x: "
          f"{'met' if ratio >= TARGET else 'NOT met'})")  # fmt: skip


def run_reference(
    args: argparse.Namespace, config: AgentRLConfig, blocks: list[int], source: str
) -> float:
    """The reference run (module docstring); returns its gain in eval pass@1 over v1."""
    torch.manual_seed(args.seed)
    env = ENVIRONMENTS.get_any(config.environment)
    eval_tasks = env.tasks("eval", args.eval_tasks or config.eval.tasks)
    limits = config.eval.limits()
    per_turn = args.max_new_tokens or config.eval.max_new_tokens
    model, tokenizer = load_checkpoint(Path(args.checkpoint))
    batch_trials = config.train.batch_size * config.windows.rows_per_sample  # one loop step
    tasks_per_iteration = args.tasks or max(1, batch_trials // args.group)
    duration = config.train.budget
    steps = int(duration.value) if duration.unit is Unit.BATCH else 1
    started = time.monotonic()

    def evaluated() -> EvalResult:
        model.eval()
        return evaluate(model, tokenizer, env, eval_tasks, max_new_tokens=per_turn,
                        limits=limits)  # fmt: skip

    production_eval = first = evaluated()
    production = copy.deepcopy(model.state_dict())
    print(f"reference: {sum(blocks):,} trials in {len(blocks)} version(s) ({source}), "
          f"{tasks_per_iteration} tasks x {args.group} trials an iteration, {len(eval_tasks)} "
          f"eval tasks; v1 pass@1 {first.pass_at_1:.1%} ({time.monotonic() - started:.0f}s)",
          flush=True)  # fmt: skip
    reference = None
    if config.objective.kl_coef > 0:
        reference, _ = load_checkpoint(Path(args.checkpoint))
    objective = GRPOTask(config.objective, reference)
    curriculum, rng = Curriculum(), random.Random(args.seed)
    draw = training_tasks(ENVIRONMENTS, config.environment, rng.randrange(1 << 30),
                          level=curriculum.draw)  # fmt: skip
    best = first.pass_at_1
    for b, trials in enumerate(blocks):
        version = b + 2
        iterations = max(1, round(trials / (tasks_per_iteration * args.group)))
        epochs = args.epochs or max(1, round(steps / iterations))
        settings = GRPOSettings(
            group=args.group, sampling=SamplingParams(args.temperature, 1.0, per_turn),
            seq_len=config.windows.seq_len, limits=limits, epochs=epochs,
        )  # fmt: skip
        model.load_state_dict(production)  # warm start from production, a fresh optimizer
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.train.lr,
                                      weight_decay=config.train.weight_decay)  # fmt: skip
        for i in range(iterations):
            tasks = [next(draw) for _ in range(tasks_per_iteration)]
            done = grpo_iteration(model, tokenizer, env, tasks, settings, objective, optimizer,
                                  seed=rng.randrange(1 << 30))  # fmt: skip
            for task, reward in zip([t for t in tasks for _ in range(args.group)],
                                    done.rows.reward, strict=True):  # fmt: skip
                curriculum.record(task.difficulty, bool(reward >= 1.0))
            print(f"  v{version} iteration {i + 1}/{iterations}: {done.line()}", flush=True)
        result = evaluated()
        decision = eval_check(result, production_eval, config.release_check)
        if decision.passed:
            production, production_eval = copy.deepcopy(model.state_dict()), result
            best = max(best, result.pass_at_1)
        print(f"v{version}: {iterations} x {tasks_per_iteration * args.group} trials, {epochs} "
              f"step(s) each; pass@1 {result.pass_at_1:.1%}: "
              f"{'PROMOTED' if decision.passed else 'REFUSED'}: {decision.reason} "
              f"({time.monotonic() - started:.0f}s)", flush=True)  # fmt: skip
    return best - first.pass_at_1


if __name__ == "__main__":
    main()
