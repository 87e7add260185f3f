"""Shipped warm-ups: the agent-sft recipe's result for a config, trained once and kept in the
repository, so that a demo on 2 cores spends its minutes on RL, not on the warm-up.

    learner/recipes/agent_sft/shipped/<config digest>/hf/      the checkpoint (HF layout)
    learner/recipes/agent_sft/shipped/<config digest>/meta.json corpus fingerprint, training numbers

A shipped warm-up is used only when it is what training would produce from here: the config's
digest names the folder (model, corpus, training settings, seed), and the *corpus fingerprint*
— a hash of the first expert episodes as the environment plays them now (its tasks, tools,
observations, expert) — must equal the one it was trained on. A change to the generator, a tool's
output or the expert changes the fingerprint, and the recipe trains again (and a test fails until
``make agent-warm-up`` ships the new one). Its eval results (per task, greedy:
``learner.eval_suite.save_evals``) ship inside the checkpoint and travel with it into the
registry, so neither the warm-up nor the RL learner evaluates the same weights again when its
eval settings are the same.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments.base import AnyEnvironment, Task
from environments.episode_runner import expert_trace
from environments.episodes import MultiTurnEnvironment
from policies.agent_chat import render
from policies.agent_lm import EOS, train_tokenizer

SHIPPED_ROOT = Path(__file__).parent / "shipped"
FINGERPRINT_EPISODES = 16
META = "meta.json"


@dataclass(frozen=True)
class ShippedWarmUp:
    checkpoint: Path
    meta: dict[str, Any]


def corpus_fingerprint(environment: AnyEnvironment, tasks: list[Task]) -> str:
    """sha256 of the rendered expert episodes of the first :data:`FINGERPRINT_EPISODES` tasks
    (the prompts and solutions, for a single-shot environment)."""
    digest = hashlib.sha256(environment.name.encode())
    head = tasks[:FINGERPRINT_EPISODES]
    if isinstance(environment, MultiTurnEnvironment):
        player = train_tokenizer([t.spec for t in head], 300, chat=True)
        for task in head:
            trace = expert_trace(player, environment, task)
            digest.update(render(trace.messages, EOS, environment.tools).encode())
    else:
        for task in head:
            digest.update(environment.reset(task).encode())
            digest.update(getattr(environment, "solution")(task).encode())  # noqa: B009
    return digest.hexdigest()


def find_shipped(digest: str, fingerprint: str, root: Path = SHIPPED_ROOT) -> ShippedWarmUp | None:
    """The shipped warm-up of config ``digest`` when its corpus fingerprint is ``fingerprint``."""
    folder = root / digest
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return None
    if meta.get("fingerprint") != fingerprint or not (folder / "hf" / "config.json").is_file():
        return None
    return ShippedWarmUp(folder / "hf", meta)


def ship(digest: str, checkpoint: Path, meta: dict[str, Any], root: Path = SHIPPED_ROOT) -> Path:
    """Keep ``checkpoint`` (with its eval results, ``learner.eval_suite.save_evals``) as config
    ``digest``'s shipped warm-up, replacing older ones."""
    if root.exists():
        shutil.rmtree(root)
    folder = root / digest
    shutil.copytree(checkpoint, folder / "hf")
    (folder / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return folder
