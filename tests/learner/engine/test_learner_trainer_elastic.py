"""Multi-process training with 2 gloo ranks (the env torchrun sets): checkpoints saved by 2 ranks
resume on 1 (with either loader) and the reverse, and an OOM on one rank makes both halve the
microbatch."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import children
import tiny_training

from learner.engine.checkpoints import CheckpointRef, list_complete, load_model_state


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Windows, and a 1-process reference run to 8 steps with checkpoints at 4 and 8."""
    root = tmp_path_factory.mktemp("elastic")
    windows = [
        str(tiny_training.write_window(root / "w0", 0, 48, seed=1)),
        str(tiny_training.write_window(root / "w1", 1000, 16, seed=2)),
    ]
    base = {"windows": windows, "batch_size": 8, "checkpoint_interval": "4ba", "keep": 5}
    references = [
        {**base, "save_dir": str(root / f"ref-{loader}"), "duration": "8ba", "loader": loader,
         "log": str(root / f"ref-{loader}.jsonl")}
        for loader in ("memory", "streaming")
    ]  # fmt: skip
    children.run_all(references)
    return {"root": root, "base": base}


def _weights(save_dir: Path, step: int) -> dict[str, torch.Tensor]:
    model = tiny_training.make_model()
    load_model_state(CheckpointRef(save_dir / f"ckpt-{step}", step), model)
    return model.state_dict()


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    for name in a:  # summation order differs between 1 and 2 ranks: close, not identical
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)


def _steps(log: Path) -> dict[int, list[int]]:
    return {e["step"]: e["ids"] for e in map(json.loads, log.read_text().splitlines())}


@pytest.mark.parametrize("loader", ["memory", "streaming"])
def test_two_ranks_save_and_one_process_resumes(
    data: dict[str, Any], tmp_path: Path, loader: str
) -> None:
    base, ref_dir = data["base"], data["root"] / f"ref-{loader}"
    spec = {**base, "save_dir": str(tmp_path / "run"), "log": str(tmp_path / "log.jsonl")}
    spec["loader"] = loader
    children.run_ranks({**spec, "duration": "4ba"}, world_size=2)
    checkpoint = list_complete(tmp_path / "run")[-1]
    assert checkpoint.step == 4
    assert json.loads((checkpoint.path / "COMPLETE.json").read_text())["world_size"] == 2
    _assert_same(_weights(tmp_path / "run", 4), _weights(ref_dir, 4))

    result = tmp_path / "result.json"
    children.run_all([{**spec, "duration": "8ba", "result": str(result)}])
    assert json.loads(result.read_text())["resumed_from"] == 4
    _assert_same(_weights(tmp_path / "run", 8), _weights(ref_dir, 8))

    # Each global batch holds the reference's samples, however the ranks split it.
    reference = _steps(data["root"] / f"ref-{loader}.jsonl")
    rank0, rank1 = _steps(tmp_path / "log.jsonl.rank0"), _steps(tmp_path / "log.jsonl.rank1")
    for step in range(1, 5):
        assert sorted(rank0[step] + rank1[step]) == sorted(reference[step])
    assert _steps(tmp_path / "log.jsonl") == {s: reference[s] for s in range(5, 9)}


def test_one_process_saves_and_two_ranks_resume(data: dict[str, Any], tmp_path: Path) -> None:
    base, ref_dir = data["base"], data["root"] / "ref-memory"
    spec = {**base, "save_dir": str(tmp_path / "run")}
    children.run_all([{**spec, "duration": "4ba"}])
    children.run_ranks({**spec, "duration": "8ba"}, world_size=2)
    _assert_same(_weights(tmp_path / "run", 8), _weights(ref_dir, 8))


def test_oom_on_one_rank_halves_the_microbatch_on_both(
    data: dict[str, Any], tmp_path: Path
) -> None:
    base, ref_dir = data["base"], data["root"] / "ref-memory"
    spec = {**base, "save_dir": str(tmp_path / "run"), "log": str(tmp_path / "log.jsonl")}
    spec |= {"duration": "8ba", "oom_above": 1, "oom_ranks": [1]}
    children.run_ranks(spec, world_size=2)
    for rank in (0, 1):  # rank share is 4 samples: 4 → 2 → 1 on both, in the first step
        log = tmp_path / f"log.jsonl.rank{rank}"
        sizes = [json.loads(line)["mb"] for line in log.read_text().splitlines()]
        assert sizes == [1] * 8
    _assert_same(_weights(tmp_path / "run", 8), _weights(ref_dir, 8))
