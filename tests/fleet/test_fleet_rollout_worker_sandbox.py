"""The hostile-program suite under the rollout worker: 8 concurrent trials of one group, each a
hostile completion, all scored, the worker alive, nothing outside touched, no host data in the
RolloutResults it emits."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from environments import ENVIRONMENTS, PROGRAM_SYNTHESIS
from environments.sandbox import STATUSES
from fleet import rollout_worker
from fleet.rollout_worker import AgentPolicy, RolloutWorker, TaskRequest
from fleet.subscriber import Routed
from policies.agent_sampling import Completion, SamplingParams
from schemas.enums import Channel

sys.path.insert(0, str(Path(__file__).parents[1] / "environments"))
from test_environments_sandbox import (
    ESCAPES,
    MARKER,
    SECRET,
    _leftovers,
    _snapshot,
)

HOSTILE = sorted(ESCAPES)[:8]


class _Subscriber:
    """Routes every task to one loaded version (the worker's view of its channels)."""

    model_name = "agent-lm"

    def route(self, _key: str) -> Routed[AgentPolicy]:
        return Routed(Channel.PRODUCTION, 1, AgentPolicy(model=None, tokenizer=None))


def test_eight_hostile_trials_of_one_group_are_contained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "secret.txt").write_text(SECRET)
    monkeypatch.setenv("FLYWHEEL_TEST_SECRET", SECRET)
    runs = tmp_path / "runs"  # the trials' work dirs: tells their processes from other sandboxes'
    runs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(runs))
    victim = subprocess.Popen(["sleep", "600"])
    bodies = []
    for name in HOSTILE:  # each program, indented as the body of the task's f(x)
        program = ESCAPES[name].replace("{canary}", str(canary)).replace("{marker}", MARKER)
        program = program.replace("{victim}", str(victim.pid)) + "\nreturn f(x)\n"
        bodies.append("".join(f"    {line}\n" for line in program.splitlines()))

    def hostile_sample(_model: Any, _tokenizer: Any, prompts: list[str], n: int,
                       *_args: Any, **_kwargs: Any) -> list[list[Completion]]:  # fmt: skip
        assert n == len(bodies)
        return [[Completion((1,), (2, 3), (-0.5, -0.5), body, True) for body in bodies]
                for _ in prompts]  # fmt: skip

    monkeypatch.setattr(rollout_worker, "sample", hostile_sample)
    env = ENVIRONMENTS.get(PROGRAM_SYNTHESIS)
    worker = RolloutWorker(_Subscriber(), ENVIRONMENTS,  # type: ignore[arg-type]
                           sampling=SamplingParams(0.4, 1.0, 24), producer="test")  # fmt: skip
    before = _snapshot(canary)
    try:
        task = env.tasks("train", 1, seed=3)[0]
        results = worker.run([TaskRequest(task, group_size=len(bodies))])
    finally:
        alive = victim.poll() is None
        victim.kill()
    assert len(results) == 8
    assert all(r.sandbox_status in STATUSES for r in results)
    assert alive, "the victim died"
    assert _snapshot(canary) == before
    assert _leftovers(runs) == []
    assert SECRET not in repr(results)
