"""The trainer in one process: microbatching and injected OOM, warm start vs autoresume,
epoch boundaries across a resume, config errors, and the row-packing collate."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import tiny_training

from learner.engine.checkpoints import find_resume_checkpoint, load_model_state
from learner.engine.loader import collate_columns, concat_rows, samples_of
from learner.engine.trainer import TrainerConfig
from learner.errors import DurationError, MicrobatchError, TrainerConfigError


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("windows")
    return [
        str(tiny_training.write_window(root / "w0", 0, 48, seed=1)),
        str(tiny_training.write_window(root / "w1", 1000, 16, seed=2)),
    ]


def _spec(windows: list[str], save_dir: Path, **extra: Any) -> dict[str, Any]:
    spec = {"windows": windows, "save_dir": str(save_dir), "batch_size": 8, "duration": "6ba"}
    return spec | {"checkpoint_interval": "3ba"} | extra


def _weights(save_dir: Path) -> dict[str, torch.Tensor]:
    ref = find_resume_checkpoint(save_dir)
    assert ref is not None
    model = tiny_training.make_model()
    load_model_state(ref, model)
    return model.state_dict()


def _assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)


def test_injected_oom_halves_microbatch_and_keeps_the_step(
    windows: list[str], tmp_path: Path
) -> None:
    plain = tiny_training.run(_spec(windows, tmp_path / "plain"))
    oom = tiny_training.run(_spec(windows, tmp_path / "oom", oom_above=2))
    assert plain.microbatch_size == 8 and oom.microbatch_size == 2
    assert (oom.steps, oom.samples) == (plain.steps, plain.samples) == (6, 48)
    np.testing.assert_allclose(oom.losses, plain.losses, rtol=1e-5)
    _assert_close(_weights(tmp_path / "oom"), _weights(tmp_path / "plain"))
    # An uneven fixed microbatch (3 + 3 + 2 samples) gives the same gradient too.
    fixed = tiny_training.run(_spec(windows, tmp_path / "fixed", microbatch_size=3))
    _assert_close(_weights(tmp_path / "fixed"), _weights(tmp_path / "plain"))
    assert fixed.microbatch_size == 3


def test_oom_that_cannot_be_fixed_names_the_fix(windows: list[str], tmp_path: Path) -> None:
    with pytest.raises(MicrobatchError, match="microbatch_size='auto'"):
        tiny_training.run(_spec(windows, tmp_path / "a", microbatch_size=8, oom_above=4))
    with pytest.raises(MicrobatchError, match="1 sample"):
        tiny_training.run(_spec(windows, tmp_path / "b", oom_above=0))


def test_warm_start_only_without_a_checkpoint(windows: list[str], tmp_path: Path) -> None:
    first, second = tiny_training.make_model(), tiny_training.make_model()
    torch.nn.init.constant_(first.weight, 0.5)
    torch.nn.init.constant_(second.weight, -2.0)
    torch.save(first.state_dict(), tmp_path / "first.pt")
    torch.save(second.state_dict(), tmp_path / "second.pt")
    save_dir = tmp_path / "run"
    frozen = {"lr": 0.0, "duration": "2ba"}  # lr 0: weights show where training started
    result = tiny_training.run(
        _spec(windows, save_dir, init_from=str(tmp_path / "first.pt"), **frozen)
    )
    assert result.warm_started and result.resumed_from is None
    torch.testing.assert_close(_weights(save_dir)["weight"], first.weight.detach())

    frozen["duration"] = "4ba"
    result = tiny_training.run(
        _spec(windows, save_dir, init_from=str(tmp_path / "second.pt"), **frozen)
    )
    assert not result.warm_started and result.resumed_from == 2 and result.steps == 4
    torch.testing.assert_close(_weights(save_dir)["weight"], first.weight.detach())


def test_resume_across_an_epoch_boundary_counts_each_epoch_once(
    windows: list[str], tmp_path: Path
) -> None:
    whole_log, split_log = tmp_path / "whole.jsonl", tmp_path / "split.jsonl"
    every = {"checkpoint_interval": "4ba"}  # 8 steps per epoch: saves land on its last step
    whole = tiny_training.run(
        _spec(windows, tmp_path / "whole", duration="2ep", log=str(whole_log), **every)
    )
    tiny_training.run(
        _spec(windows, tmp_path / "split", duration="1ep", log=str(split_log), **every)
    )
    split = tiny_training.run(
        _spec(windows, tmp_path / "split", duration="2ep", log=str(split_log), **every)
    )
    assert split.resumed_from == 8
    assert (split.steps, split.progress.epochs) == (whole.steps, whole.progress.epochs) == (16, 2)
    lines = [json.loads(line) for line in split_log.read_text().splitlines()]
    assert lines == [json.loads(line) for line in whole_log.read_text().splitlines()]
    _assert_close(_weights(tmp_path / "split"), _weights(tmp_path / "whole"))


def test_config_errors_name_the_fix(windows: list[str], tmp_path: Path) -> None:
    with pytest.raises(TrainerConfigError, match="batch_size"):
        TrainerConfig(save_dir=tmp_path, batch_size=0, duration="1ep")
    with pytest.raises(TrainerConfigError, match="microbatch_size"):
        TrainerConfig(save_dir=tmp_path, batch_size=8, duration="1ep", microbatch_size=0)
    with pytest.raises(DurationError, match="tok"):
        TrainerConfig(save_dir=tmp_path, batch_size=8, duration="forever")
    with pytest.raises(TrainerConfigError, match="init_from"):
        tiny_training.run(_spec(windows, tmp_path / "a", init_from=str(tmp_path / "none.pt")))
    with pytest.raises(TrainerConfigError, match="fewer than batch_size"):
        tiny_training.run(_spec(windows, tmp_path / "b", batch_size=128, duration="1ep"))


def test_collate_packs_rows_and_keeps_scalars_per_sample() -> None:
    samples = [
        {"id": 1, "x": np.ones((2, 3), np.float32), "y": np.float32(0.5), "tag": "a"},
        {"id": 2, "x": np.zeros((1, 3), np.float32), "y": np.float32(1.5), "tag": "b"},
    ]
    columns = collate_columns(samples)
    assert columns["id"] == [1, 2] and samples_of(columns)[1]["tag"] == "b"
    batch = concat_rows(samples)
    assert batch["x"].shape == (3, 3) and batch["id"].tolist() == [1, 2]
    assert batch["y"].tolist() == [0.5, 1.5] and "tag" not in batch
