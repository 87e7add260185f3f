"""Why do a checkpoint's repository episodes fail? Greedy episodes on the eval set, each sorted
into one outcome by comparing its edits with the expert's (the lines the fix changes).

    .venv/bin/python -m bench.agent_failures --checkpoint DIR [--tasks 300 --split eval]

Outcomes, checked in this order: ``passed``; ``no-edit`` (no edit call); ``right-new`` (every
changed line written as some edit's ``new``, yet the hidden tests failed: an ``old`` missed or a
later edit undid it); ``wrong-old`` (some buggy line never given as ``old``: the edit tool
refused, the model did not copy the line it read); ``wrong-new`` (every ``old`` right, some
``new`` a wrong composition). Each failure also carries how its episode ended (context full,
turns out, submitted). Counts per outcome, per bug kind and template, and one example each.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from environments import ENVIRONMENTS, REPOSITORY
from environments.episodes import EpisodeLimits
from environments.repository import expert
from environments.repository.environment import RepositoryEnvironment
from learner.eval_suite import greedy_episodes
from policies.agent_chat import ToolCall, tool_call
from policies.agent_lm import load_checkpoint


def calls_of(messages: Sequence[Mapping[str, Any]]) -> list[ToolCall]:
    """Every tool call in an episode's OpenAI messages, in order."""
    return [tool_call(raw) for message in messages for raw in message.get("tool_calls") or ()]


def outcome(passed: bool, calls: Sequence[ToolCall], want: Sequence[tuple[str, str]]) -> str:
    """The episode's outcome (module docstring) given its calls and the fix's ``(old, new)``
    lines (stripped, as :func:`environments.repository.expert.changed_lines` gives them)."""
    if passed:
        return "passed"
    edits = [call.arguments for call in calls if call.name == "edit"]
    if not edits:
        return "no-edit"
    olds = {str(e.get("old", "")).strip() for e in edits}
    news = {str(e.get("new", "")).strip() for e in edits}
    if all(new in news for _, new in want):
        return "right-new"
    if not all(old in olds for old, _ in want):
        return "wrong-old"
    return "wrong-new"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="an HF checkpoint (agent-sft's hf/)")
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--split", default="eval", help="eval, eval_extra or train")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="per turn")
    parser.add_argument("--max-context", type=int, default=512, help="an episode's tokens")
    args = parser.parse_args()
    env = ENVIRONMENTS.get_any(REPOSITORY)
    assert isinstance(env, RepositoryEnvironment)
    tasks = env.tasks(args.split, args.tasks)
    model, tokenizer = load_checkpoint(Path(args.checkpoint))
    model.eval()
    traces = greedy_episodes(model, tokenizer, env, tasks, args.max_new_tokens,
                             EpisodeLimits(max_tokens=args.max_context))  # fmt: skip
    outcomes: Counter[str] = Counter()
    endings: Counter[str] = Counter()
    by: dict[str, Counter[str]] = {}
    examples: dict[str, str] = {}
    for trace in traces:
        spec = env.spec(trace.task)
        want = [(old, new) for _, old, new in expert.changed_lines(spec)]
        calls = calls_of(trace.messages)
        kind = outcome(trace.score.passed, calls, want)
        outcomes[kind] += 1
        if kind != "passed":
            endings[f"{kind} ({trace.ended})"] += 1
        for key in (f"level {trace.task.difficulty}", f"bugs {'+'.join(spec.bugs)}",
                    f"template {spec.template}"):  # fmt: skip
            by.setdefault(key, Counter())["passed" if kind == "passed" else "failed"] += 1
        examples.setdefault(
            kind, f"fix {want}\n    calls {[(c.name, dict(c.arguments)) for c in calls]}"
        )
    print(f"{len(traces)} greedy episodes of {args.split}: " + ", ".join(
        f"{k} {n} ({n / len(traces):.0%})" for k, n in outcomes.most_common()))  # fmt: skip
    print("failures by ending: " + ", ".join(f"{k} {n}" for k, n in endings.most_common()))
    for key in sorted(by):
        print(f"  {key}: {by[key]['passed']} of {sum(by[key].values())} passed")
    for kind, example in examples.items():
        print(f"{kind}, e.g.:\n    {example}")


if __name__ == "__main__":
    main()
