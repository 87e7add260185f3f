"""The training engine: a generic loop that any `TrainingTask` plugs into.

Read top to bottom: `TrainerConfig` (what to run), `Trainer.fit` (setup → resume or warm start →
loop of optimizer steps with checkpoints), `_Run.step` (one global batch, microbatched, OOM-safe).

Contracts:
* ``batch_size`` counts MDS samples per optimizer step over all ranks; a sample may pack rows.
* The task returns (sum of per-row losses, rows) per microbatch; the step's gradient is
  d(sum of losses)/dθ divided by the rows of the whole global batch, so microbatching and world
  size do not change it (up to float summation order).
* Autoresume beats warm start: ``init_from`` is read only when ``save_dir`` holds no complete
  checkpoint.
* Same code on one CPU process, under ``torchrun`` (DDP, gloo/nccl) and on CUDA (bf16 autocast).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from torch.nn.parallel import DistributedDataParallel

from learner.engine.checkpoints import CheckpointRef, CheckpointStore, find_resume_checkpoint
from learner.engine.distributed import (
    DevicePreference,
    DistributedContext,
    all_reduce_gradients,
    all_reduce_sum,
    barrier,
    broadcast_text,
    setup_distributed,
    teardown_distributed,
)
from learner.engine.durations import Duration, Progress
from learner.engine.loader import (
    LoaderKind,
    WindowStream,
    build_loader,
    concat_rows,
    loader_position,
    release_loader,
    samples_of,
)
from learner.engine.microbatch import (
    Collate,
    TrainingTask,
    accumulate,
    halved,
    release_memory,
    split_samples,
)
from learner.errors import MicrobatchError, TrainerConfigError

__all__ = ["FitResult", "StepReport", "Trainer", "TrainerConfig", "TrainingTask"]

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


@dataclass(frozen=True)
class TrainerConfig:
    """What to train for and where to keep checkpoints. Durations accept strings ('500ba').

    This is also the ``train`` section of a recipe's config file, so its defaults are the gate
    recipe's (``learner/recipes/gate/configs/default.yaml`` spells them out). ``save_dir`` and
    ``init_from`` are a run's, not a recipe's: the continuous loop sets them for each version.

    ``batch_size``: samples per optimizer step, global (divisible by the world size).
    ``microbatch_size``: samples per forward/backward on one rank, or 'auto' (start at the
    rank's whole share and halve on out-of-memory). ``init_from``: a ``torch.save``d model
    state_dict for a warm start, ignored when ``save_dir`` already has a checkpoint.
    ``save_dir`` is required to train (TrainerConfigError otherwise). ``loader``: 'auto' holds
    windows of up to 1 GiB in memory (`learner.engine.memory_loader`), larger ones stream;
    'memory' or 'streaming' forces one.
    """

    save_dir: Path | None = None
    batch_size: int = 32
    duration: Duration | str = "20ep"
    checkpoint_interval: Duration | str = "5ep"
    microbatch_size: int | Literal["auto"] = "auto"
    lr: float = 0.01
    weight_decay: float = 0.0
    grad_clip_norm: float | None = None
    seed: int = 0
    init_from: Path | None = None
    keep_checkpoints: int = 2
    device: DevicePreference = "auto"
    num_workers: int = 0
    loader: LoaderKind = "auto"

    def __post_init__(self) -> None:
        if self.save_dir is not None:
            object.__setattr__(self, "save_dir", Path(self.save_dir))
        object.__setattr__(self, "duration", Duration.parse(self.duration))
        object.__setattr__(self, "checkpoint_interval", Duration.parse(self.checkpoint_interval))
        if self.init_from is not None:
            object.__setattr__(self, "init_from", Path(self.init_from))
        if self.batch_size < 1:
            raise TrainerConfigError(f"batch_size={self.batch_size}: use at least 1 sample")
        if self.loader not in get_args(LoaderKind):
            raise TrainerConfigError(f"loader={self.loader!r}: use 'auto', 'memory' or 'streaming'")
        if self.microbatch_size != "auto" and self.microbatch_size < 1:
            raise TrainerConfigError(
                f"microbatch_size={self.microbatch_size}: use 'auto' or a positive int"
            )

    @property
    def budget(self) -> Duration:
        """``duration`` as a parsed Duration."""
        return Duration.parse(self.duration)

    @property
    def interval(self) -> Duration:
        """``checkpoint_interval`` as a parsed Duration."""
        return Duration.parse(self.checkpoint_interval)


@dataclass(frozen=True)
class StepReport:
    """Passed to ``on_step`` on every rank after each optimizer step."""

    progress: Progress
    loss: float  # mean per-row loss over the global batch
    rows: int  # rows in the global batch
    microbatch_size: int
    rank: int
    batch: Mapping[str, Sequence[Any]]  # this rank's samples of the step, columnar


@dataclass(frozen=True)
class FitResult:
    """Outcome of `Trainer.fit`. Counts are totals of the run, across resumptions;
    ``losses`` and ``wall_time_s`` cover this call only."""

    steps: int
    samples: int
    progress: Progress
    losses: list[float]
    resumed_from: int | None  # step of the checkpoint this call resumed from
    warm_started: bool
    wall_time_s: float
    microbatch_size: int
    last_checkpoint: Path | None = field(default=None)


class Trainer:
    """Trains ``model_factory()`` on ``windows`` with ``task`` until ``config.duration``.

    ``optimizer_factory`` defaults to AdamW(lr, weight_decay). ``collate`` turns a microbatch of
    MDS samples into tensors (default `concat_rows`). The task receives the model as trained:
    wrapped in DistributedDataParallel when the world has more than one rank, so it should only
    call it (``model(x)``).
    """

    def __init__(
        self,
        config: TrainerConfig,
        task: TrainingTask,
        model_factory: Callable[[], torch.nn.Module],
        windows: Sequence[WindowStream],
        *,
        optimizer_factory: OptimizerFactory | None = None,
        collate: Collate = concat_rows,
        on_step: Callable[[StepReport], None] | None = None,
        cache_limit: int | None = None,
    ) -> None:
        if config.save_dir is None:
            raise TrainerConfigError("save_dir is unset: give the directory for checkpoints")
        self.config = config
        self.save_dir: Path = config.save_dir
        self.task = task
        self.model_factory = model_factory
        self.windows = list(windows)
        self.optimizer_factory = optimizer_factory or (
            lambda params: torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        )
        self.collate = collate
        self.on_step = on_step
        self.cache_limit = cache_limit  # bytes of remote windows' shards kept (None: no bound)

    def fit(self) -> FitResult:
        """Runs (or resumes) training to the budget; returns what it did.

        Writes checkpoints every ``checkpoint_interval`` and one at the end. Raises
        LearnerError subclasses for unusable settings, data or checkpoints.
        """
        ctx = setup_distributed(self.config.device)
        try:
            return _Run(self, ctx).fit()
        finally:
            teardown_distributed(ctx)


class _Run:
    """The state of one `Trainer.fit` call on one rank."""

    def __init__(self, trainer: Trainer, ctx: DistributedContext) -> None:
        config = trainer.config
        if config.batch_size % ctx.world_size:
            raise TrainerConfigError(
                f"batch_size={config.batch_size} does not split over {ctx.world_size} ranks; "
                "use a multiple of the world size"
            )
        self.trainer, self.config, self.ctx = trainer, config, ctx
        self.started = time.monotonic()
        self.rank_batch = config.batch_size // ctx.world_size
        torch.manual_seed(config.seed)  # same initial weights on every rank
        self.model = trainer.model_factory().to(ctx.device)
        self.optimizer = trainer.optimizer_factory(self.model.parameters())
        torch.manual_seed(config.seed + ctx.rank)  # per-rank stream for dropout etc.
        self.store = CheckpointStore(trainer.save_dir, config.keep_checkpoints, ctx)
        self.progress = Progress()
        self.microbatch = (
            self.rank_batch if config.microbatch_size == "auto" else config.microbatch_size
        )
        self.elapsed_before_s = 0.0
        self.losses: list[float] = []

    def fit(self) -> FitResult:
        resumed, warm, loader_state = self._restore()
        train_model: torch.nn.Module = self.model
        if self.ctx.is_distributed:
            device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
            train_model = DistributedDataParallel(
                self.model, device_ids=device_ids, broadcast_buffers=False
            )
        loader = build_loader(
            self.trainer.windows, self.rank_batch, self.config.seed, self.config.num_workers,
            kind=self.config.loader, rank=self.ctx.rank, world_size=self.ctx.world_size,
            cache_limit=self.trainer.cache_limit,
        )  # fmt: skip
        if loader_state is not None:
            loader.load_state_dict(loader_state)
        last = self._loop(train_model, loader, resumed)
        barrier(self.ctx)
        release_loader(loader, is_local_leader=self.ctx.local_rank == 0)
        return FitResult(
            steps=self.progress.batches,
            samples=self.progress.samples,
            progress=self.progress,
            losses=self.losses,
            resumed_from=resumed.step if resumed else None,
            warm_started=warm,
            wall_time_s=time.monotonic() - self.started,
            microbatch_size=self.microbatch,
            last_checkpoint=last.path if last else None,
        )

    def _restore(self) -> tuple[CheckpointRef | None, bool, dict[str, Any] | None]:
        """Autoresume from the newest complete checkpoint, else warm start, else fresh."""
        self.store.clean_incomplete()
        found = find_resume_checkpoint(self.trainer.save_dir) if self.ctx.is_main else None
        name = broadcast_text(self.ctx, found.path.name if found else "")
        if name:
            ref = CheckpointRef(self.trainer.save_dir / name, int(name.split("-")[1]))
            state = self.store.load(ref, self.model, self.optimizer)
            self.progress = Progress(**state["progress"])
            self.elapsed_before_s = self.progress.elapsed_s
            if self.config.microbatch_size == "auto":
                self.microbatch = min(self.rank_batch, int(state["microbatch_size"]))
            return ref, False, state["loader"]
        if self.config.init_from is None:
            return None, False, None
        if not self.config.init_from.is_file():
            raise TrainerConfigError(
                f"init_from={self.config.init_from} does not exist; pass a torch.save'd "
                "state_dict of the model, or None to start from random weights"
            )
        weights = torch.load(self.config.init_from, map_location=self.ctx.device, weights_only=True)
        self.model.load_state_dict(weights)
        return None, True, None

    def _loop(
        self, train_model: torch.nn.Module, loader: Any, resumed: CheckpointRef | None
    ) -> CheckpointRef | None:
        """Optimizer steps until the budget; checkpoints on the interval and at the end."""
        budget, interval = self.config.budget, self.config.interval
        last = resumed
        last_saved = self.progress
        batches = iter(loader)
        steps_this_pass = 0
        while not self.progress.reached(budget):
            try:
                columns = next(batches)
            except StopIteration:
                if steps_this_pass == 0 and self.progress.samples_in_epoch == 0:
                    raise TrainerConfigError(
                        f"an epoch holds fewer than batch_size={self.config.batch_size} samples;"
                        " lower batch_size or add data"
                    ) from None
                self.progress = self.progress.after_epoch()
                batches, steps_this_pass = iter(loader), 0
            else:
                self._step(train_model, columns)
                steps_this_pass += 1
            # A second save at the same step would only differ in the epoch count, which a
            # resume re-derives when the loader yields the epoch's (dropped) tail.
            saved_step = last.step if last else -1
            due = self.progress.since(last_saved).reached(interval)
            if due and saved_step != self.progress.batches:
                last, last_saved = self._save(loader), self.progress
        if last is None or last.step != self.progress.batches:
            last = self._save(loader)
        return last

    def _save(self, loader: Any) -> CheckpointRef:
        state = {
            "progress": dataclasses.asdict(self.progress),
            "loader": loader_position(loader, self.progress),
            "microbatch_size": self.microbatch,
            "world_size": self.ctx.world_size,
            "batch_size": self.config.batch_size,
        }
        return self.store.save(self.progress.batches, self.model, self.optimizer, state)

    def _step(self, train_model: torch.nn.Module, columns: Mapping[str, Sequence[Any]]) -> None:
        """One optimizer step on one global batch; halves the microbatch on an agreed OOM."""
        samples = samples_of(columns)
        while True:
            acc = accumulate(
                train_model,
                self.trainer.task,
                split_samples(samples, self.microbatch),
                self.trainer.collate,
                self.ctx.device,
                self.ctx.uses_bf16_autocast,
            )
            elapsed_s = self.elapsed_before_s + time.monotonic() - self.started
            # One all-reduce carries the OOM flag, rows, loss and clock, so ranks agree on all.
            stats = all_reduce_sum(
                self.ctx,
                torch.tensor(
                    [float(acc.out_of_memory), acc.rows, acc.loss_sum, elapsed_s],
                    dtype=torch.float64,
                    device=self.ctx.device,
                ),
            ).tolist()
            if stats[0] == 0:
                break
            self.optimizer.zero_grad(set_to_none=True)
            release_memory(self.ctx.device)
            if self.config.microbatch_size != "auto":
                raise MicrobatchError(
                    f"out of memory at microbatch_size={self.microbatch}; set "
                    "microbatch_size='auto' or a smaller size"
                )
            self.microbatch = halved(self.microbatch)
        rows = int(stats[1])
        self._apply_gradients(rows)
        loss = stats[2] / rows if rows else 0.0
        self.losses.append(loss)
        self.progress = self.progress.after_step(
            samples=self.config.batch_size, tokens=rows, elapsed_s=stats[3] / self.ctx.world_size
        )
        if self.trainer.on_step is not None:
            report = StepReport(self.progress, loss, rows, self.microbatch, self.ctx.rank, columns)
            self.trainer.on_step(report)

    def _apply_gradients(self, rows: int) -> None:
        """Sum gradients over ranks, divide by the global rows, clip, step."""
        all_reduce_gradients(self.ctx, self.model)
        if rows > 0:  # a batch without rows carries no signal: skip the update
            for param in self.model.parameters():
                if param.grad is not None:
                    param.grad.div_(rows)
            if self.config.grad_clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip_norm)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
