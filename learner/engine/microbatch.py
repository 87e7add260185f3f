"""Gradient accumulation over microbatches, and the out-of-memory handling of 'auto' sizing.

One optimizer step = one global batch of samples. Each rank splits its share into microbatches of
at most ``size`` samples and back-propagates the *sum* of per-row losses of each; the trainer
divides the accumulated gradient by the global row count once, so the step's gradient does not
depend on the microbatch size or the world size. An OOM is caught here and reported, not raised:
the ranks first agree (one all-reduce) and then all halve and retry together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from learner.errors import MicrobatchError

Collate = Callable[[Sequence[Mapping[str, Any]]], Mapping[str, torch.Tensor]]


class TrainingTask(Protocol):
    """What the trainer optimises: the loss of one microbatch."""

    def loss(
        self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum of per-row losses, number of rows) for one microbatch."""
        ...


@dataclass(frozen=True)
class Accumulated:
    """What one rank's pass over its microbatches produced (gradients live on the model)."""

    loss_sum: float
    rows: int
    out_of_memory: bool


def is_out_of_memory(exc: BaseException) -> bool:
    """True for torch's OOM error and for RuntimeErrors whose message says 'out of memory'."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def split_samples(samples: Sequence[Any], size: int) -> list[Sequence[Any]]:
    """Consecutive chunks of at most ``size`` samples, order kept."""
    if size < 1:
        raise MicrobatchError(f"microbatch size {size} must be at least 1")
    return [samples[i : i + size] for i in range(0, len(samples), size)]


def halved(size: int) -> int:
    """The next microbatch size after an OOM at ``size``; raises when already 1 sample."""
    if size <= 1:
        raise MicrobatchError(
            "out of memory with a microbatch of 1 sample: the model or one packed sample does "
            "not fit; use a smaller model, shorter samples, or a device with more memory"
        )
    return size // 2


def _no_sync(model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
    no_sync = getattr(model, "no_sync", None)  # DDP: keep gradients local during accumulation
    return no_sync() if callable(no_sync) else contextlib.nullcontext()


def _autocast(device: torch.device, bf16: bool) -> contextlib.AbstractContextManager[Any]:
    if bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def accumulate(
    model: torch.nn.Module,
    task: TrainingTask,
    microbatches: Sequence[Sequence[Mapping[str, Any]]],
    collate: Collate,
    device: torch.device,
    bf16: bool,
) -> Accumulated:
    """Back-propagates each microbatch's summed loss into ``model``'s gradients.

    Runs under DDP's ``no_sync`` (the trainer reduces gradients itself once every rank is known
    to have finished). On OOM, stops early and reports it; gradients are then partial and must
    be zeroed by the caller.
    """
    loss_sum, rows = 0.0, 0
    try:
        with _no_sync(model):
            for microbatch in microbatches:
                batch = {k: v.to(device, non_blocking=True) for k, v in collate(microbatch).items()}
                with _autocast(device, bf16):
                    loss, count = task.loss(model, batch)
                if loss.dim() != 0:
                    raise MicrobatchError(
                        f"task.loss returned a loss of shape {tuple(loss.shape)}; return the "
                        "sum of per-row losses as a scalar"
                    )
                torch.autograd.backward(loss.float())
                loss_sum += float(loss.detach())
                rows += int(count)
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not is_out_of_memory(exc):
            raise
        return Accumulated(0.0, 0, out_of_memory=True)
    return Accumulated(loss_sum, rows, out_of_memory=False)


def release_memory(device: torch.device) -> None:
    """Returns cached blocks after an OOM so the retry starts from a clean allocator."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
