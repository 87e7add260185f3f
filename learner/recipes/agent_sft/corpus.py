"""The warm-up's corpus: what the first version imitates, as token rows, and the tokenizer
trained on it.

* A single-shot environment with reference solutions (``environments.base.Demonstrator``):
  one row per training task, the prompt then the solution (trained) and end-of-sequence.
* A multi-turn environment with an expert (``environments.episodes.ExpertDemonstrator``): one
  row per expert episode, played through a real episode (the tools run, tests in the sandbox),
  so the observations are exactly what the model will see; the expert's calls are trained, the
  observations masked out (``environments.episode_runner``). The episodes are played first and
  the tokenizer (with the chat format's role tokens) is trained on their rendered text; then
  each conversation is cut into token segments with that tokenizer. Episodes longer than
  ``seq_len`` are left out (counted), never cut: a cut episode would teach a call without the
  observation that led to it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from environments.base import AnyEnvironment, Demonstrator, Task
from environments.episode_runner import EpisodeTrace, conversation_tokens, expert_trace
from environments.episodes import EpisodeLimits, ExpertDemonstrator, MultiTurnEnvironment
from learner.data.token_windows import TokenRows, pack_sequences
from learner.errors import LearnerError
from policies.agent_chat import render
from policies.agent_lm import EOS, train_tokenizer

_PLAY_LIMITS = EpisodeLimits(max_turns=16, max_tokens=1 << 30, wall_s=120.0)  # the expert's own


@dataclass(frozen=True)
class Corpus:
    tokenizer: Any
    rows: TokenRows
    left_out: int  # episodes longer than seq_len
    kind: str  # "solutions" or "expert episodes"


def build_corpus(
    environment: AnyEnvironment,
    tasks: list[Task],
    vocab_size: int,
    seq_len: int,
    log: Callable[[str], None] = print,
) -> Corpus:
    """Rows and tokenizer of ``environment``'s demonstrations of ``tasks`` (see the module
    docstring); LearnerError when the environment cannot demonstrate."""
    if isinstance(environment, MultiTurnEnvironment):
        if not isinstance(environment, ExpertDemonstrator):
            raise LearnerError(
                f"environment {environment.name!r} has no expert; a multi-turn warm-up needs one "
                "that implements expert_action(task, history)"
            )
        return _episodes(environment, tasks, vocab_size, seq_len, log)
    if not isinstance(environment, Demonstrator):
        raise LearnerError(
            f"environment {environment.name!r} has no reference solutions; supervised warm-up "
            "needs one that implements solution(task)"
        )
    prompts = [environment.reset(t) for t in tasks]
    solutions = [environment.solution(t) for t in tasks]
    texts = [p + s for p, s in zip(prompts, solutions, strict=True)]
    tokenizer = train_tokenizer(texts, vocab_size)
    eos = [tokenizer.eos_token_id]
    rows = pack_sequences(
        [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts],
        [tokenizer(s, add_special_tokens=False)["input_ids"] + eos for s in solutions],
        seq_len,
        tokenizer.pad_token_id,
    )
    return Corpus(tokenizer, rows, 0, "solutions")


def _episodes(
    environment: MultiTurnEnvironment,
    tasks: list[Task],
    vocab_size: int,
    seq_len: int,
    log: Callable[[str], None],
) -> Corpus:
    # Playing needs a tokenizer only to count tokens; the expert's limits do not count them.
    player = train_tokenizer([t.spec for t in tasks[:64]], 300, chat=True)
    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:  # each tool run is a subprocess
        traces: list[EpisodeTrace] = list(
            pool.map(lambda t: expert_trace(player, environment, t, _PLAY_LIMITS), tasks)
        )
    solved = [t for t in traces if t.score.passed]
    log(f"corpus: {len(solved):,} of {len(traces):,} expert episodes solved their task")
    texts = [render(t.messages, EOS, environment.tools) for t in solved]
    tokenizer = train_tokenizer(texts, vocab_size, chat=True)
    prompts, completions, masks, left_out = [], [], [], 0
    for trace in solved:
        prompt, completion, mask = conversation_tokens(tokenizer, trace.messages, environment.tools)
        if len(prompt) + len(completion) > seq_len:
            left_out += 1
            continue
        prompts.append(prompt)
        completions.append(completion)
        masks.append(mask)
    if not prompts:
        raise LearnerError(f"no expert episode fits corpus.seq_len {seq_len}; raise it")
    rows = pack_sequences(prompts, completions, seq_len, tokenizer.pad_token_id, masks=masks)
    return Corpus(tokenizer, rows, left_out, "expert episodes")
