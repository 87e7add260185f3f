"""Checkpoint store on one process: write protocol, verification, pruning, round trip."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from learner.engine.checkpoints import (
    LATEST_NAME,
    MARKER_NAME,
    CheckpointStore,
    find_resume_checkpoint,
    list_complete,
    load_model_state,
    read_trainer_state,
)
from learner.engine.distributed import DistributedContext
from learner.errors import CheckpointError

SINGLE = DistributedContext(0, 1, 0, torch.device("cpu"), owns_group=False)


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_round_trip_restores_model_optimizer_rng_and_state(tmp_path: Path) -> None:
    model, optimizer = _trained()
    store = CheckpointStore(tmp_path, keep=2, ctx=SINGLE)
    ref = store.save(1, model, optimizer, {"progress": {"batches": 1}})
    after_save = torch.rand(3)
    assert (tmp_path / LATEST_NAME).read_text().strip() == "ckpt-1"
    assert (ref.path / MARKER_NAME).is_file() and (ref.path / "rng-0.pt").is_file()

    fresh = torch.nn.Linear(3, 2)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    state = store.load(ref, fresh, fresh_optimizer)
    assert state == {"progress": {"batches": 1}} == read_trainer_state(ref)
    assert torch.equal(torch.rand(3), after_save)  # RNG continues where the save left it
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)
    moments = fresh_optimizer.state[fresh.weight]["exp_avg"]
    assert torch.equal(moments, optimizer.state[model.weight]["exp_avg"])

    weights_only = torch.nn.Linear(3, 2)
    load_model_state(ref, weights_only)
    assert torch.equal(weights_only.weight, model.weight)


def test_keeps_the_newest_k(tmp_path: Path) -> None:
    model, optimizer = _trained()
    store = CheckpointStore(tmp_path, keep=2, ctx=SINGLE)
    for step in (2, 4, 6):
        store.save(step, model, optimizer, {})
    assert [ref.step for ref in list_complete(tmp_path)] == [4, 6]
    assert (tmp_path / LATEST_NAME).read_text().strip() == "ckpt-6"


def test_resume_ignores_temp_unmarked_and_dangling_latest(tmp_path: Path) -> None:
    model, optimizer = _trained()
    store = CheckpointStore(tmp_path, keep=3, ctx=SINGLE)
    store.save(3, model, optimizer, {})
    store.save(5, model, optimizer, {})
    (tmp_path / "ckpt-9.tmp-abc123").mkdir()  # a save killed mid-write
    (tmp_path / "ckpt-5" / MARKER_NAME).unlink()  # marker lost: incomplete
    (tmp_path / LATEST_NAME).write_text("ckpt-9\n")  # points at something incomplete
    ref = find_resume_checkpoint(tmp_path)
    assert ref is not None and ref.step == 3
    removed = {p.name for p in store.clean_incomplete()}
    assert removed == {"ckpt-9.tmp-abc123", "ckpt-5"}
    assert find_resume_checkpoint(tmp_path / "missing") is None


def test_loading_into_another_architecture_names_the_fix(tmp_path: Path) -> None:
    model, optimizer = _trained()
    store = CheckpointStore(tmp_path, keep=1, ctx=SINGLE)
    ref = store.save(1, model, optimizer, {})
    other = torch.nn.Linear(4, 2)
    with pytest.raises(CheckpointError, match="fresh save_dir"):
        store.load(ref, other, torch.optim.AdamW(other.parameters()))


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="keep"):
        CheckpointStore(tmp_path, keep=0, ctx=SINGLE)
