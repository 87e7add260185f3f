"""Crash-safe training checkpoints on `torch.distributed.checkpoint` (DCP).

Layout under ``save_dir``::

    ckpt-<step>.tmp-<token>/   being written; never read, removed at the next start
    ckpt-<step>/               complete: DCP shards + .metadata, rng-<rank>.pt, trainer.json,
                               COMPLETE.json (the marker)
    latest                     "ckpt-<step>", replaced atomically after the rename

Write order (each file fsynced): DCP shards (all ranks) → per-rank RNG files → trainer state →
marker → rename of the directory → ``latest``. A crash at any point leaves either a temp
directory (ignored) or a complete checkpoint. Resumption takes the newest directory whose marker
verifies, whatever ``latest`` says, since the process may die between the rename and ``latest``.
DCP shards load at any world size; RNG files are per rank and skipped when a rank has none.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ground.durable import fsync_dir
from learner.engine.distributed import DistributedContext, barrier, broadcast_text
from learner.errors import CheckpointError

MARKER_NAME = "COMPLETE.json"
LATEST_NAME = "latest"
TRAINER_STATE_NAME = "trainer.json"
# Test hook: seconds to sleep between the write phases, so a test's SIGKILL lands mid-write.
TEST_SLEEP_ENV = "FLYWHEEL_LEARNER_TEST_CHECKPOINT_SLEEP_S"
_COMPLETE_RE = re.compile(r"^ckpt-(\d+)$")
_TEMP_RE = re.compile(r"^ckpt-(\d+)\.tmp-[0-9a-f]+$")
M = TypeVar("M", bound=torch.nn.Module)


@dataclass(frozen=True)
class CheckpointRef:
    """A complete checkpoint directory and the optimizer step it was taken after."""

    path: Path
    step: int


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _test_pause() -> None:
    pause_s = float(os.environ.get(TEST_SLEEP_ENV, "0") or 0)
    if pause_s > 0:
        time.sleep(pause_s)


def verify(path: Path) -> CheckpointRef | None:
    """The checkpoint at ``path`` if its marker, DCP metadata and trainer state are present."""
    match = _COMPLETE_RE.match(path.name)
    if match is None or not path.is_dir():
        return None
    try:
        marker = json.loads((path / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None
    step = int(match.group(1))
    complete = (
        isinstance(marker, dict)
        and marker.get("step") == step
        and (path / ".metadata").is_file()
        and (path / TRAINER_STATE_NAME).is_file()
    )
    return CheckpointRef(path, step) if complete else None


def list_complete(save_dir: Path) -> list[CheckpointRef]:
    """Every complete checkpoint in ``save_dir``, oldest step first."""
    if not save_dir.is_dir():
        return []
    refs = [ref for entry in save_dir.iterdir() if (ref := verify(entry)) is not None]
    return sorted(refs, key=lambda ref: ref.step)


def find_resume_checkpoint(save_dir: Path) -> CheckpointRef | None:
    """The newest complete checkpoint (``latest`` may lag it or name a vanished one)."""
    refs = list_complete(save_dir)
    return refs[-1] if refs else None


def read_trainer_state(ref: CheckpointRef) -> dict[str, Any]:
    """The trainer's JSON state (progress, loader position, microbatch size) of ``ref``."""
    try:
        state = json.loads((ref.path / TRAINER_STATE_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{ref.path}: unreadable {TRAINER_STATE_NAME} ({exc})") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"{ref.path}/{TRAINER_STATE_NAME} is not a JSON object")
    return state


@contextlib.contextmanager
def _quiet_single_process() -> Iterator[None]:
    # DCP warns on every single-process save/load even with no_dist=True; that is our intent.
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="torch.distributed is disabled", category=UserWarning
        )
        yield


def load_model_state(ref: CheckpointRef, model: torch.nn.Module) -> None:
    """Loads only the model weights of ``ref`` into ``model`` (one process; for export/tests)."""
    state = {"model": model.state_dict()}
    with _quiet_single_process():
        dcp_load(state, checkpoint_id=ref.path, no_dist=True)
    model.load_state_dict(state["model"])


def load_trained(save_dir: Path, model_factory: Callable[[], M]) -> M:
    """A new ``model_factory()`` model with the weights of the newest complete checkpoint under
    ``save_dir`` (``Trainer.fit`` writes one at the end of its budget), in eval mode.
    CheckpointError when training left none there."""
    model = model_factory()
    ref = find_resume_checkpoint(save_dir)
    if ref is None:
        raise CheckpointError(f"training left no checkpoint under {save_dir}")
    load_model_state(ref, model)
    return model.eval()


def _rng_state() -> dict[str, Any]:
    np_state = cast(tuple[Any, ...], np.random.get_state(legacy=True))
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
    }


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


class CheckpointStore:
    """Saves and loads the checkpoints of one training run. Every rank holds one; all ranks
    call `save` and `load` together (DCP is collective). One run writes a ``save_dir``.

    ``keep`` is how many complete checkpoints survive pruning (the newest ones).
    """

    def __init__(self, save_dir: Path, keep: int, ctx: DistributedContext) -> None:
        if keep < 1:
            raise CheckpointError(f"keep={keep}: keep at least the newest checkpoint (keep >= 1)")
        self.save_dir = save_dir
        self.keep = keep
        self.ctx = ctx

    def clean_incomplete(self) -> list[Path]:
        """Removes temp directories of interrupted saves (main rank only); returns them."""
        if not self.ctx.is_main or not self.save_dir.is_dir():
            return []
        removed = []
        for entry in self.save_dir.iterdir():
            incomplete = _COMPLETE_RE.match(entry.name) and verify(entry) is None
            if _TEMP_RE.match(entry.name) or incomplete:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        return removed

    def save(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        trainer_state: Mapping[str, Any],
    ) -> CheckpointRef:
        """Writes a complete checkpoint of ``step`` (collective), then prunes old ones."""
        token = broadcast_text(self.ctx, uuid.uuid4().hex[:12] if self.ctx.is_main else "")
        temp = self.save_dir / f"ckpt-{step}.tmp-{token}"
        final = self.save_dir / f"ckpt-{step}"
        temp.mkdir(parents=True, exist_ok=True)
        model_state, optim_state = get_state_dict(model, optimizer)
        with _quiet_single_process():
            dcp_save(
                {"model": model_state, "optim": optim_state},
                checkpoint_id=temp,
                no_dist=not self.ctx.is_distributed,
            )
        buffer = _serialise(_rng_state())
        _write_durably(temp / f"rng-{self.ctx.rank}.pt", buffer)
        _test_pause()
        barrier(self.ctx)
        if self.ctx.is_main:
            self._complete(temp, final, step, trainer_state)
        barrier(self.ctx)
        return CheckpointRef(final, step)

    def _complete(
        self, temp: Path, final: Path, step: int, trainer_state: Mapping[str, Any]
    ) -> None:
        _write_durably(temp / TRAINER_STATE_NAME, json.dumps(dict(trainer_state)).encode())
        marker = {"step": step, "world_size": self.ctx.world_size, "written_at": time.time()}
        _write_durably(temp / MARKER_NAME, json.dumps(marker).encode())
        fsync_dir(temp)
        _test_pause()
        if final.exists():  # an earlier run's copy of this step: the new one replaces it
            shutil.rmtree(final)
        os.rename(temp, final)
        fsync_dir(self.save_dir)
        _test_pause()
        pointer = self.save_dir / f"{LATEST_NAME}.tmp-{temp.name.rsplit('-', 1)[-1]}"
        _write_durably(pointer, f"{final.name}\n".encode())
        os.replace(pointer, self.save_dir / LATEST_NAME)
        fsync_dir(self.save_dir)
        for old in list_complete(self.save_dir)[: -self.keep]:
            shutil.rmtree(old.path, ignore_errors=True)

    def load(
        self, ref: CheckpointRef, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, Any]:
        """Restores model, optimizer and this rank's RNG (collective); returns trainer state."""
        model_state, optim_state = get_state_dict(model, optimizer)
        state: dict[str, Any] = {"model": model_state, "optim": optim_state}
        try:
            with _quiet_single_process():
                dcp_load(state, checkpoint_id=ref.path, no_dist=not self.ctx.is_distributed)
        # DCP's CheckpointException derives from BaseException, not Exception.
        except (Exception, CheckpointException) as exc:
            raise CheckpointError(
                f"cannot load {ref.path} into this model/optimizer ({exc}); a checkpoint only "
                "resumes the same architecture and optimizer: use a fresh save_dir otherwise"
            ) from exc
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        rng_file = ref.path / f"rng-{self.ctx.rank}.pt"
        if rng_file.is_file():  # absent when this rank did not exist in the saving run
            _set_rng_state(torch.load(rng_file, weights_only=True))
        return read_trainer_state(ref)


def _serialise(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()
