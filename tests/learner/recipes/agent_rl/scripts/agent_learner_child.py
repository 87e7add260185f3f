"""A child process running the agent learner until two versions are decided (for SIGKILL
tests): ``python agent_learner_child.py SPEC.json``. The release check refuses (min_lift 1), so
a run ends without a canary once the candidate is trained and checked."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from pathlib import Path

from flywheel.clients import codec
from flywheel.settings import Settings
from learner.continuous import ContinuousLearner, LearnerPaths
from learner.eval_suite import EvalConfig
from learner.recipes.agent_rl.eval_check import EvalCheckConfig
from learner.recipes.agent_rl.recipe import AgentLoopConfig, AgentRLConfig, AgentRLRecipe
from model_registry.registry import ModelRegistry, ModelTopics


def main(spec: dict[str, str]) -> None:
    settings = Settings.from_env()
    registry = ModelRegistry(settings.kafka_client_config(), codec(settings),
                             topics=ModelTopics.prefixed(spec["prefix"]))  # fmt: skip
    base = AgentRLConfig()
    config = AgentRLConfig(
        model_name=spec["model"],
        train=dataclasses.replace(base.train, batch_size=4, duration=spec["duration"],
                                  checkpoint_interval="1ep", lr=3e-4),
        eval=EvalConfig(tasks=20),
        release_check=EvalCheckConfig(min_lift=1.0),  # refuse: no canary needed
        loop=AgentLoopConfig(min_new_rows=64, poll_s=0.5),
    )  # fmt: skip
    root = Path(spec["root"])
    paths = LearnerPaths(root / "lake", root / "mds", root / "models", root / "runs")
    learner = ContinuousLearner(AgentRLRecipe(config, paths), paths, settings.kafka_client_config(),
                                codec(settings), registry=registry,
                                rewards_topic=spec["rewards_topic"])  # fmt: skip
    learner.run(threading.Event(), max_versions=2)


if __name__ == "__main__":
    main(json.loads(Path(sys.argv[1]).read_text()))
