"""SIGKILL a training process at random moments (mid-step and mid-checkpoint), restart it until
done, and check the resumed runs consumed exactly the uninterrupted run's samples, in order,
and ended with the same weights."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import children
import tiny_training

from learner.engine.checkpoints import (
    TEST_SLEEP_ENV,
    find_resume_checkpoint,
    load_model_state,
)


def _entries(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    # A kill can cut the last line short; an entry without its newline was never relied on.
    return [json.loads(line) for line in lines if line.endswith("}")]


def _final_weights(save_dir: Path) -> dict[str, torch.Tensor]:
    ref = find_resume_checkpoint(save_dir)
    assert ref is not None
    model = tiny_training.make_model()
    load_model_state(ref, model)
    return model.state_dict()


def _wait_for(predicate: Any, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def _kill_somewhere(
    process: Any, spec: dict[str, Any], log: Path, rng: random.Random, in_checkpoint: bool
) -> bool:
    """Kills ``process`` mid-step or mid-checkpoint; False if it finished first."""
    save_dir = Path(spec["save_dir"])
    if in_checkpoint:
        stale = set(save_dir.glob("*.tmp-*"))  # left by the previous kill, until cleaned
        seen: set[Path] = set()
        wanted = rng.randint(1, 3)  # kill inside the 1st, 2nd or 3rd save of this attempt

        def writing() -> bool:
            seen.update(set(save_dir.glob("*.tmp-*")) - stale)
            return len(seen) >= wanted

        landed = _wait_for(lambda: writing() or not process.is_alive())
        time.sleep(rng.uniform(0.0, 0.35))  # inside one of the three test pauses (0.15 s each)
    else:
        target = len(_entries(log)) + rng.randint(1, 6)
        landed = _wait_for(lambda: len(_entries(log)) >= target or not process.is_alive())
        time.sleep(rng.uniform(0.0, 0.04))
    alive = process.is_alive()
    process.kill()
    process.join(10)
    return landed and alive


def test_sigkill_at_random_moments_loses_and_repeats_no_samples(tmp_path: Path) -> None:
    windows = [
        str(tiny_training.write_window(tmp_path / "w0", 0, 48, seed=1)),
        str(tiny_training.write_window(tmp_path / "w1", 1000, 16, seed=2)),
    ]
    base = {"windows": windows, "batch_size": 8, "duration": "3ep", "checkpoint_interval": "2ba"}
    base |= {"step_sleep_s": 0.03}
    reference_log = tmp_path / "reference.jsonl"
    children.run_all([{**base, "save_dir": str(tmp_path / "ref"), "log": str(reference_log)}])
    reference = _entries(reference_log)
    assert [e["step"] for e in reference] == list(range(1, 25))

    save_dir = tmp_path / "crashy"
    rng = random.Random(20240607)
    resumed_from: list[int] = []
    logs: list[Path] = []
    kills_in_checkpoint = 0
    for attempt in range(6):
        in_checkpoint = attempt % 2 == 1
        ref = find_resume_checkpoint(save_dir)
        resumed_from.append(ref.step if ref else 0)
        logs.append(tmp_path / f"attempt-{attempt}.jsonl")
        spec = {**base, "save_dir": str(save_dir), "log": str(logs[-1])}
        if in_checkpoint:
            spec["env"] = {TEST_SLEEP_ENV: "0.15"}
        process = children.start(spec)
        killed = _kill_somewhere(process, spec, logs[-1], rng, in_checkpoint)
        kills_in_checkpoint += killed and in_checkpoint
    assert kills_in_checkpoint >= 2, "no kill landed inside a checkpoint write"

    ref = find_resume_checkpoint(save_dir)
    resumed_from.append(ref.step if ref else 0)
    logs.append(tmp_path / "final.jsonl")
    children.run_all([{**base, "save_dir": str(save_dir), "log": str(logs[-1])}])
    resumed_from.append(24)

    replayed: list[dict[str, Any]] = []
    for i, log in enumerate(logs):
        entries = _entries(log)
        if entries:  # each attempt starts right after the checkpoint it resumed from
            assert entries[0]["step"] == resumed_from[i] + 1
        replayed += [e for e in entries if resumed_from[i] < e["step"] <= resumed_from[i + 1]]
    assert [(e["step"], e["ids"]) for e in replayed] == [(e["step"], e["ids"]) for e in reference]
    assert not list(save_dir.glob("*.tmp-*"))

    expected, actual = _final_weights(tmp_path / "ref"), _final_weights(save_dir)
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, rtol=0, atol=0)
