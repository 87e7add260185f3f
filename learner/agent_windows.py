"""The agent's token windows: lake rollouts + their ``grpo@1`` Rewards → immutable MDS windows.

    mds/<model>.tokens/manifest.json     which Reward lake files are in which window
    mds/<model>.tokens/w000003-…/         packed rows: prompt + completion ids, the behaviour
                                         log-probs, advantage, model version, group

A window is driven by the **Reward** lake files (each converted exactly once, with the gate's
manifest machinery: temp directory, rename, adopt after a crash): each ROLLOUT Reward of the
model is one training row, its tokens and behaviour log-probs looked up in the
``rollouts.results`` lake by rollout id. A trial whose Reward never arrived is in no Reward file,
so it is never trained on. A Reward whose rollout has not reached the lake yet holds its whole
file back (the next build tries again) until ``hold_s`` after the file's newest Reward; then the
missing rows are expired (counted in ``expired_rows``) and the rest converted. Rows with
advantage 0 — every trial of a flat group, and singletons — carry no policy gradient and stay out
(``zero_advantage_rows``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from learner.lake_rows import max_ms, min_ms
from learner.token_windows import (
    TokenRows,
    TokenSampleSpec,
    pack_sequences,
    token_arrays,
    write_token_window,
)
from learner.window_manifest import (
    WINDOW_RECORD_NAME,
    WindowRecord,
    record_json,
    write_manifest,
)
from learner.windows import dataset_lock, lake_ref, pending_files, recover, window_name
from processors.lake.layout import LakeFile, scan_topic
from processors.rewards.rollouts import GROUP_REWARD_FN
from streams.topics import REWARDS_TOPIC, ROLLOUTS_TOPIC

AGENT_ROW_SPEC = "agent-tokens@1"  # the windows' WindowRecord.context_spec
_REWARD_COLUMNS = ["source", "source_id", "group_id", "model_name", "model_version", "reward",
                   "reward_fn", "advantage", "event_time", "attributed_at"]  # fmt: skip
_ROLLOUT_COLUMNS = ["rollout_id", "prompt_token_ids", "completion_token_ids", "behaviour_logprobs",
                    "temperature"]  # fmt: skip


@dataclass(frozen=True)
class AgentRows:
    """Trials as training rows: token rows plus ``behaviour`` (n, L) float32 (μ of the token at
    each target position, 0 elsewhere), ``temperature`` it was sampled at, ``advantage``,
    ``reward`` (n,) float32, ``version``
    (n,) int32 (the model version that sampled the trial) and ``group`` (n,) int64."""

    tokens: TokenRows
    behaviour: np.ndarray
    temperature: np.ndarray
    advantage: np.ndarray
    reward: np.ndarray
    version: np.ndarray
    group: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-row arrays a window stores (``weight`` 1: the packer pads with 0 rows)."""
        return {
            **token_arrays(self.tokens), "behaviour": self.behaviour,
            "temperature": self.temperature, "advantage": self.advantage,
            "reward": self.reward, "version": self.version, "group": self.group,
            "weight": np.ones(len(self), dtype=np.float32),
        }  # fmt: skip

    def batch(self, keep: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        """The rows (or those ``keep`` selects) as the tensors `learner.grpo.GRPOTask` reads."""
        rows = slice(None) if keep is None else keep
        return {name: torch.from_numpy(a[rows]) for name, a in self.arrays().items()}


def agent_rows(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]],
    *,
    temperature: Sequence[float],
    advantage: Sequence[float] | np.ndarray,
    reward: Sequence[float] | np.ndarray,
    version: Sequence[int],
    group: Sequence[str],
    seq_len: int,
    pad_id: int,
) -> AgentRows:
    """Pack trials (prompt and completion ids, the completion's behaviour log-probs sampled at
    ``temperature``) as rows."""
    tokens = pack_sequences(prompts, completions, seq_len, pad_id)
    behaviour = np.zeros(tokens.input_ids.shape, dtype=np.float32)
    for row, values in enumerate(logprobs):
        positions = np.flatnonzero(tokens.target[row])
        behaviour[row, positions] = values
    return AgentRows(
        tokens, behaviour, np.asarray(temperature, dtype=np.float32),
        np.asarray(advantage, dtype=np.float32),
        np.asarray(reward, dtype=np.float32), np.asarray(version, dtype=np.int32),
        np.asarray([group_number(g) for g in group], dtype=np.int64),
    )  # fmt: skip


def group_number(group_id: str) -> int:
    """A stable int64 for a group id (MDS columns are numeric)."""
    return int.from_bytes(hashlib.sha256(group_id.encode()).digest()[:8], "big", signed=True)


@dataclass(frozen=True)
class TokenWindowConfig:
    """The ``windows`` section of the agent recipe."""

    seq_len: int = 128
    rows_per_sample: int = 16
    hold_s: float = 300.0  # how long a Reward waits for its rollout to reach the lake


def build_agent_window(
    lake: Path,
    mds_root: Path,
    dataset: str,
    *,
    model_name: str,
    pad_id: int,
    config: TokenWindowConfig,
    now: datetime | None = None,
) -> WindowRecord | None:
    """Convert the Reward lake files not yet in ``dataset``'s manifest (and not held back) into
    one window of ``model_name``'s trials. Returns its record, or None when nothing is ready."""
    root = mds_root / dataset
    root.mkdir(parents=True, exist_ok=True)
    now_ms = int((now or datetime.now(UTC)).timestamp() * 1000)
    with dataset_lock(root):
        manifest = recover(root, dataset, GROUP_REWARD_FN)
        candidates = pending_files(lake, manifest, REWARDS_TOPIC)
        if not candidates:
            return None
        read = [_agent_rewards(f.path, model_name) for f in candidates]
        wanted = pa.concat_arrays([t.column("source_id").combine_chunks() for t, _ in read])
        # No Reward of ours in the new files (e.g. only the gate's): no rollout lookup at all.
        rollouts = _rollouts(lake, wanted) if len(wanted) else _no_rollouts()
        ready: list[LakeFile] = []
        parts: list[pa.Table] = []
        expired = skipped = 0
        for file, (table, total) in zip(candidates, read, strict=True):
            found = pc.is_in(
                table.column("source_id"), value_set=rollouts.column(0).combine_chunks()
            )
            missing = pc.invert(found)
            n_missing = pc.sum(missing).as_py() or 0
            newest = max_ms(table, "attributed_at")
            if n_missing and newest is not None and now_ms - newest < config.hold_s * 1000:
                continue  # its rollouts may still be on their way to the lake
            ready.append(file)
            expired += n_missing
            skipped += total - table.num_rows
            parts.append(table.filter(pc.invert(missing)) if n_missing else table)
        if not ready:
            return None
        table = pa.concat_tables(parts)
        flat = pc.equal(table.column("advantage"), 0.0)
        zero = pc.sum(flat).as_py() or 0
        table = table.filter(pc.invert(flat)) if zero else table
        rows = _rows(table, rollouts, config, pad_id)
        seq = manifest.next_seq()
        spec = TokenSampleSpec(config.seq_len, config.rows_per_sample)
        record = WindowRecord(
            name=window_name(seq, ready), seq=seq, reward_fn=GROUP_REWARD_FN,
            context_spec=AGENT_ROW_SPEC, files=tuple(lake_ref(lake, f) for f in ready),
            rows=len(rows), heldout_rows=0, skipped_rows=skipped,
            samples=-(-len(rows) // config.rows_per_sample),
            rows_per_sample=config.rows_per_sample, context_dim=config.seq_len,
            min_event_time_ms=min_ms(table, "event_time"),
            max_event_time_ms=max_ms(table, "event_time"),
            max_attributed_ms=max_ms(table, "attributed_at"),
            created_at=datetime.now(UTC).isoformat(), expired_rows=expired,
            zero_advantage_rows=zero, trained_tokens=rows.tokens.trained_tokens,
        )  # fmt: skip
        write_token_window(root / record.name, rows.arrays(), spec,
                           files={WINDOW_RECORD_NAME: record_json(record)})  # fmt: skip
        write_manifest(root, manifest.with_window(record))
        return record


def _agent_rewards(path: Path, model_name: str) -> tuple[pa.Table, int]:
    """One Reward file's ``grpo@1`` ROLLOUT rows of ``model_name``, and the rows it holds."""
    table = pq.read_table(path, columns=_REWARD_COLUMNS)
    keep = pc.and_(
        pc.and_(pc.equal(table.column("source"), "ROLLOUT"),
                pc.equal(table.column("reward_fn"), GROUP_REWARD_FN)),
        pc.equal(table.column("model_name"), model_name),
    )  # fmt: skip
    return table.filter(keep), table.num_rows


def _rollouts(lake: Path, wanted: pa.Array) -> pa.Table:
    """The ``rollouts.results`` lake rows of the ``wanted`` rollout ids that carry tokens (the
    simulator's statistical rollouts have none), first copy of each id."""
    parts = []
    for files in scan_topic(lake, ROLLOUTS_TOPIC).files.values():
        for f in files:
            part = pq.read_table(f.path, columns=_ROLLOUT_COLUMNS)
            tokens = pc.list_value_length(part.column("completion_token_ids"))
            keep = pc.and_(pc.is_in(part.column("rollout_id"), value_set=wanted),
                           pc.greater(tokens, 0))  # fmt: skip
            parts.append(part.filter(keep))
    if not parts:
        return _no_rollouts()
    table = pa.concat_tables(parts, promote_options="default")
    _, first = np.unique(np.asarray(table.column("rollout_id").to_pylist(), dtype=object),
                         return_index=True)  # fmt: skip
    return table.take(pa.array(np.sort(first)))


def _no_rollouts() -> pa.Table:
    empty = pa.array([], pa.list_(pa.int64()))
    return pa.table({"rollout_id": pa.array([], pa.string()),
                     **{c: empty for c in _ROLLOUT_COLUMNS[1:4]},
                     "temperature": pa.array([], pa.float64())})  # fmt: skip


def _rows(
    rewards: pa.Table, rollouts: pa.Table, config: TokenWindowConfig, pad_id: int
) -> AgentRows:
    by_id: Mapping[str, int] = {r: i for i, r in enumerate(rollouts.column(0).to_pylist())}
    index = [by_id[r] for r in rewards.column("source_id").to_pylist()]
    trials = rollouts.take(pa.array(index, pa.int64()))
    return agent_rows(
        trials.column("prompt_token_ids").to_pylist(),
        trials.column("completion_token_ids").to_pylist(),
        trials.column("behaviour_logprobs").to_pylist(),
        temperature=trials.column("temperature").to_pylist(),
        advantage=rewards.column("advantage").to_pylist(),
        reward=rewards.column("reward").to_pylist(),
        version=rewards.column("model_version").to_pylist(),
        group=rewards.column("group_id").to_pylist(),
        seq_len=config.seq_len, pad_id=pad_id,
    )  # fmt: skip
