"""Train the agent's warm-up with the default agent-sft config and keep it in the repository
(`learner/recipes/agent_sft/shipped/<digest>/`), so `make demo` starts its RL from it instead of
spending its minutes on supervised training (`learner.recipes.agent_sft.shipped`).

    make agent-warm-up            # ~10 min on 2 cores; then commit the shipped folder
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from environments import ENVIRONMENTS
from learner.recipes.agent_sft.recipe import DEFAULT_SFT_CONFIG, AgentSFTConfig, run_sft
from learner.recipes.agent_sft.shipped import corpus_fingerprint, ship


def main() -> None:
    config = AgentSFTConfig.load(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SFT_CONFIG)
    environment = ENVIRONMENTS.get_any(config.environment)
    tasks = environment.tasks("train", config.corpus.tasks, seed=config.corpus.seed)
    with tempfile.TemporaryDirectory(prefix="agent-warm-up-") as run_dir:
        result = run_sft(config, Path(run_dir), use_shipped=False)
        meta = {
            "digest": config.digest(),
            "fingerprint": corpus_fingerprint(environment, tasks),
            "environment": config.environment,
            "train_tokens": result.trained.tokens,
            "train_loss": result.trained.loss,
            "train_s": round(result.trained.seconds),
            "eval_pass_at_1": result.eval.pass_at_1,
            "eval_tasks": len(result.eval.passed),
        }
        folder = ship(config.digest(), result.checkpoint, meta)
    print(f"shipped {folder} (eval pass@1 {result.eval.pass_at_1:.1%}); commit it")


if __name__ == "__main__":
    main()
