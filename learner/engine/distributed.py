"""Process-group setup and the few collectives the trainer needs.

One code path for every launch: under ``torchrun`` (RANK/WORLD_SIZE in the environment) the
process group is initialised here (gloo on CPU, nccl on CUDA); a group that the caller already
initialised is used as is; otherwise the run is a single process and every collective is a no-op.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist

from learner.errors import DistributedError

DevicePreference = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class DistributedContext:
    """Who this process is in the run, and on which device it computes."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool  # True when this module initialised the group and must destroy it

    @property
    def is_distributed(self) -> bool:
        """True when collectives have to talk to other processes."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on the rank that writes shared files (checkpoint marker, ``latest``)."""
        return self.rank == 0

    @property
    def uses_bf16_autocast(self) -> bool:
        """CUDA with bf16 support computes the forward pass under bf16 autocast."""
        return self.device.type == "cuda" and torch.cuda.is_bf16_supported()


def _pick_device(preference: DevicePreference, local_rank: int) -> torch.device:
    if preference == "cuda" and not torch.cuda.is_available():
        raise DistributedError("device='cuda' was requested but CUDA is not available; use 'auto'")
    if preference == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def setup_distributed(
    preference: DevicePreference = "auto", timeout_s: float = 600.0
) -> DistributedContext:
    """Joins the run's process group, if there is one, and picks the device.

    Uses an already initialised default group; else initialises one when WORLD_SIZE > 1 (as
    torchrun sets, with MASTER_ADDR/MASTER_PORT); else returns a single-process context.
    """
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_available() and dist.is_initialized():
        device = _pick_device(preference, local_rank)
        return DistributedContext(dist.get_rank(), dist.get_world_size(), local_rank, device, False)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistributedContext(0, 1, 0, _pick_device(preference, local_rank), False)
    if not dist.is_available():
        raise DistributedError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    device = _pick_device(preference, local_rank)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    return DistributedContext(dist.get_rank(), dist.get_world_size(), local_rank, device, True)


def teardown_distributed(ctx: DistributedContext) -> None:
    """Destroys the process group if `setup_distributed` created it."""
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(ctx: DistributedContext, tensor: torch.Tensor) -> torch.Tensor:
    """Sums ``tensor`` over ranks in place (no-op on one process) and returns it."""
    if ctx.is_distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_gradients(ctx: DistributedContext, model: torch.nn.Module) -> None:
    """Sums every parameter's gradient over ranks, one flat buffer per dtype.

    A parameter without a gradient gets zeros first, so every rank reduces buffers of the same
    layout. The trainer calls this only after all ranks agreed the step had no OOM, so no rank is
    left waiting in a collective that another rank never enters.
    """
    if not ctx.is_distributed:
        return
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    for dtype in sorted({p.dtype for p in params}, key=str):
        grads = [p.grad for p in params if p.dtype == dtype and p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()


def broadcast_text(ctx: DistributedContext, text: str) -> str:
    """Rank 0's ``text`` on every rank (checkpoint names, resume decisions)."""
    if not ctx.is_distributed:
        return text
    holder: list[object] = [text]
    dist.broadcast_object_list(holder, src=0)
    return str(holder[0])


def barrier(ctx: DistributedContext) -> None:
    """Waits for every rank (no-op on one process)."""
    if ctx.is_distributed:
        dist.barrier()
