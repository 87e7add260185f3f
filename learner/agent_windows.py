"""The agent's token windows: lake trials and served completions + their Rewards → MDS windows.

    mds/<model>.tokens/manifest.json     which Reward lake files are in which window
    mds/<model>.tokens/w000003-…/         packed rows: prompt + completion ids, the behaviour
                                         log-probs, advantage, weight, model version, group

A window is driven by the **Reward** lake files (each converted exactly once, with the gate's
manifest machinery: temp directory, rename, adopt after a crash). Two kinds of Reward of the
model are training rows, in the mix ``served_weight`` sets:

* a ROLLOUT ``grpo@1`` Reward (a sandbox trial): tokens and behaviour log-probs from the
  ``rollouts.results`` lake by rollout id; its advantage is the joiner's, relative to its group;
* a COMPLETION ``agent_use@1`` Reward (a completion served to a user, scored by their reactions;
  DESIGN §12 "real-time RL"): tokens from the ``agent.completions`` lake by completion id. A
  served completion has no group of siblings, so its baseline is the window's other served
  completions of the same model version: advantage (r - mean) / std over them, as a group's.
  Completions nobody reacted to carry no signal and stay out; served rows weigh
  ``served_weight`` (0: sandbox trials only).

A trial whose Reward never arrived is in no Reward file, so it is never trained on. A Reward
whose tokens have not reached the lake yet holds its whole file back (the next build tries again)
until ``hold_s`` after the file's newest Reward; then the missing rows (and those recorded in
privacy mode, which have no tokens) are expired (counted in ``expired_rows``) and the rest
converted. Rows with advantage 0 — every trial of a flat group, singletons, unreacted
completions — carry no policy gradient and stay out (``zero_advantage_rows``).
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

from learner.errors import LearnerError
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
from processors.rewards.rollouts import GROUP_REWARD_FN, normalised_advantages
from processors.rewards.served import USE_REWARD
from streams.topics import COMPLETIONS_TOPIC, REWARDS_TOPIC, ROLLOUTS_TOPIC

AGENT_ROW_SPEC = "agent-tokens@1"  # the windows' WindowRecord.context_spec
_REWARD_COLUMNS = ["source", "source_id", "group_id", "model_name", "model_version", "reward",
                   "reward_fn", "reward_components", "advantage", "event_time",
                   "attributed_at"]  # fmt: skip
_TOKEN_COLUMNS = ["prompt_token_ids", "completion_token_ids", "behaviour_logprobs", "temperature"]


@dataclass(frozen=True)
class RowSource:
    """One kind of Reward that trains the agent, and the lake topic holding its tokens."""

    reward_source: str  # Reward.source
    reward_fn: str
    topic: str
    id_column: str  # the topic's column that Reward.source_id names


TRIALS = RowSource("ROLLOUT", GROUP_REWARD_FN, ROLLOUTS_TOPIC, "rollout_id")
SERVED = RowSource("COMPLETION", USE_REWARD.id, COMPLETIONS_TOPIC, "completion_id")


@dataclass(frozen=True)
class AgentRows:
    """Trials as training rows: token rows plus ``behaviour`` (n, L) float32 (μ of the token at
    each target position, 0 elsewhere), ``temperature`` it was sampled at, ``advantage``,
    ``reward`` (n,) float32, ``version`` (n,) int32 (the model version that sampled the trial),
    ``group`` (n,) int64 and ``weight`` (n,) float32 (how much its tokens count; None: 1)."""

    tokens: TokenRows
    behaviour: np.ndarray
    temperature: np.ndarray
    advantage: np.ndarray
    reward: np.ndarray
    version: np.ndarray
    group: np.ndarray
    weight: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-row arrays a window stores (the packer pads with ``weight`` 0 rows)."""
        weight = np.ones(len(self), np.float32) if self.weight is None else self.weight
        return {
            **token_arrays(self.tokens), "behaviour": self.behaviour,
            "temperature": self.temperature, "advantage": self.advantage,
            "reward": self.reward, "version": self.version, "group": self.group,
            "weight": weight,
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
    weight: Sequence[float] | None = None,
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
        None if weight is None else np.asarray(weight, dtype=np.float32),
    )  # fmt: skip


def group_number(group_id: str) -> int:
    """A stable int64 for a group id (MDS columns are numeric)."""
    return int.from_bytes(hashlib.sha256(group_id.encode()).digest()[:8], "big", signed=True)


@dataclass(frozen=True)
class TokenWindowConfig:
    """The ``windows`` section of the agent recipe."""

    seq_len: int = 128
    rows_per_sample: int = 16
    hold_s: float = 300.0  # how long a Reward waits for its tokens to reach the lake
    served_weight: float = 0.5  # a served completion's tokens vs a sandbox trial's; 0: none

    def __post_init__(self) -> None:
        if self.served_weight < 0:
            raise LearnerError("windows.served_weight must be >= 0 (0: sandbox trials only)")

    @property
    def sources(self) -> tuple[RowSource, ...]:
        return (TRIALS, SERVED) if self.served_weight > 0 else (TRIALS,)


def build_agent_window(
    lake: Path,
    mds_root: Path,
    dataset: str,
    *,
    model_name: str,
    pad_id: int,
    config: TokenWindowConfig,
    now: datetime | None = None,
    reads: AgentLakeReads | None = None,
) -> WindowRecord | None:
    """Convert the Reward lake files not yet in ``dataset``'s manifest (and not held back) into
    one window of ``model_name``'s trials and served completions. Returns its record, or None
    when nothing is ready. A caller that builds again and again (the learner's poll) passes the
    same ``reads`` each time, so that each lake file is read once."""
    root = mds_root / dataset
    root.mkdir(parents=True, exist_ok=True)
    now_ms = int((now or datetime.now(UTC)).timestamp() * 1000)
    if reads is None:
        reads = AgentLakeReads(lake, model_name, config.sources)
    with dataset_lock(root):
        manifest = recover(root, dataset, GROUP_REWARD_FN)
        candidates = pending_files(lake, manifest, REWARDS_TOPIC)
        if not candidates:
            return None
        read = [reads.rewards(f) for f in candidates]
        tokens = reads.tokens([t for t, _ in read])
        ready: list[LakeFile] = []
        parts: list[pa.Table] = []
        expired = skipped = 0
        for file, (table, total) in zip(candidates, read, strict=True):
            found = pc.is_in(table.column("source_id"), value_set=tokens.column("id"))
            missing = pc.invert(found)
            n_missing = pc.sum(missing).as_py() or 0
            newest = max_ms(table, "attributed_at")
            if n_missing and newest is not None and now_ms - newest < config.hold_s * 1000:
                continue  # its tokens may still be on their way to the lake
            ready.append(file)
            expired += n_missing
            skipped += total - table.num_rows
            parts.append(table.filter(found) if n_missing else table)
        if not ready:
            return None
        table, unreacted = _served_advantages(pa.concat_tables(parts))
        flat = pc.equal(table.column("advantage"), 0.0)
        zero = pc.sum(flat).as_py() or 0
        table = table.filter(pc.invert(flat)) if zero else table
        rows = _rows(table, tokens, config, pad_id)
        served = pc.sum(pc.equal(table.column("source"), SERVED.reward_source)).as_py() or 0
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
            zero_advantage_rows=zero + unreacted, trained_tokens=rows.tokens.trained_tokens,
            served_rows=served,
        )  # fmt: skip
        write_token_window(root / record.name, rows.arrays(), spec,
                           files={WINDOW_RECORD_NAME: record_json(record)})  # fmt: skip
        write_manifest(root, manifest.with_window(record))
        reads.consumed(ready, parts)
        return record


def _agent_rewards(
    path: Path, model_name: str, sources: Sequence[RowSource]
) -> tuple[pa.Table, int]:
    """One Reward file's rows of ``model_name`` from ``sources``, and the rows it holds."""
    table = pq.read_table(path, columns=_REWARD_COLUMNS)
    kinds = [
        pc.and_(pc.equal(table.column("source"), s.reward_source),
                pc.equal(table.column("reward_fn"), s.reward_fn))
        for s in sources
    ]  # fmt: skip
    of_source = kinds[0] if len(kinds) == 1 else pc.or_(*kinds)
    keep = pc.and_(of_source, pc.equal(table.column("model_name"), model_name))
    return table.filter(keep), table.num_rows


class AgentLakeReads:
    """What one process has read of the lake for ``model_name``'s windows. A lake file is
    immutable once visible (written under a temporary name, then renamed), so each is read once:
    a Reward file's rows of the model until a window converts the file, a token topic's rows of
    the model until a window consumes them. A learner polling every few seconds then reads only
    the files that are new; re-reading every token file on each poll took seconds of CPU per poll
    on a demo's lake, CPU the rollout workers beside it needed. Rows no Reward ever names (a
    group the joiner expired) stay until the process ends."""

    def __init__(self, lake: Path, model_name: str, sources: Sequence[RowSource]) -> None:
        self.lake, self.model_name, self.sources = lake, model_name, tuple(sources)
        self._rewards: dict[Path, tuple[pa.Table, int]] = {}
        self._seen: dict[str, set[Path]] = {s.topic: set() for s in self.sources}
        self._tokens: dict[str, pa.Table] = {s.topic: _no_tokens() for s in self.sources}

    @property
    def retained_rows(self) -> int:
        """Token rows kept for Rewards not converted yet."""
        return sum(t.num_rows for t in self._tokens.values())

    def rewards(self, file: LakeFile) -> tuple[pa.Table, int]:
        """The Reward file's rows of the model from ``sources``, and the rows it holds."""
        if file.path not in self._rewards:
            self._rewards[file.path] = _agent_rewards(file.path, self.model_name, self.sources)
        return self._rewards[file.path]

    def tokens(self, rewards: Sequence[pa.Table]) -> pa.Table:
        """``id`` + the token columns of every Reward in ``rewards`` whose tokens are in the
        lake (no lookup at all for a source none of them names, e.g. a file of the gate's)."""
        parts = []
        for source in self.sources:
            ids = [t.filter(pc.equal(t.column("source"), source.reward_source)).column("source_id")
                   for t in rewards]  # fmt: skip
            wanted = pa.chunked_array(ids, pa.string()).combine_chunks()
            if len(wanted):
                known = self._refresh(source)
                parts.append(known.filter(pc.is_in(known.column("id"), value_set=wanted)))
        return pa.concat_tables(parts) if parts else _no_tokens()

    def consumed(self, files: Sequence[LakeFile], rewards: Sequence[pa.Table]) -> None:
        """Forget converted Reward files and the token rows of their Rewards."""
        for f in files:
            self._rewards.pop(f.path, None)
        ids = pa.chunked_array([t.column("source_id") for t in rewards], pa.string())
        done = ids.combine_chunks()
        for topic, table in self._tokens.items():
            self._tokens[topic] = table.filter(pc.invert(pc.is_in(table.column("id"), done)))

    def _refresh(self, source: RowSource) -> pa.Table:
        """The model's token rows of ``source.topic``, after reading the files new since the
        last call; the first copy of each id."""
        seen, known = self._seen[source.topic], self._tokens[source.topic]
        new = [f for files in scan_topic(self.lake, source.topic).files.values() for f in files
               if f.path not in seen]  # fmt: skip
        if not new:
            return known
        table = pa.concat_tables([_token_file(f.path, source, self.model_name) for f in new])
        _, first = np.unique(np.asarray(table.column("id").to_pylist(), dtype=object),
                             return_index=True)  # fmt: skip
        table = table.take(pa.array(np.sort(first)))
        table = table.filter(pc.invert(pc.is_in(table.column("id"), value_set=known.column("id"))))
        self._tokens[source.topic] = pa.concat_tables([known, table])
        seen.update(f.path for f in new)
        return self._tokens[source.topic]


def _token_file(path: Path, source: RowSource, model_name: str) -> pa.Table:
    """One ``source.topic`` lake file's rows of ``model_name`` that carry tokens (the
    simulator's statistical rollouts and privacy-mode completions have none)."""
    part = pq.read_table(path, columns=[source.id_column, "model_name", *_TOKEN_COLUMNS])
    tokens = pc.fill_null(pc.list_value_length(part.column("completion_token_ids")), 0)
    keep = pc.and_(pc.equal(part.column("model_name"), model_name), pc.greater(tokens, 0))
    part = part.filter(keep).drop_columns(["model_name"])
    return part.rename_columns(["id", *_TOKEN_COLUMNS]).cast(_no_tokens().schema)


def _no_tokens() -> pa.Table:
    ids = pa.list_(pa.int64())
    return pa.table({"id": pa.array([], pa.string()), "prompt_token_ids": pa.array([], ids),
                     "completion_token_ids": pa.array([], ids),
                     "behaviour_logprobs": pa.array([], pa.list_(pa.float64())),
                     "temperature": pa.array([], pa.float64())})  # fmt: skip


def _served_advantages(table: pa.Table) -> tuple[pa.Table, int]:
    """``table`` with each served row's advantage set against its baseline (the window's served
    rows of the same model version, which are also its group) and the rows nobody reacted to
    removed; and how many were removed."""
    source = table.column("source").to_pylist()
    served = [i for i, s in enumerate(source) if s == SERVED.reward_source]
    if not served:
        return table, 0
    components = table.column("reward_components").to_pylist()
    reacted = [i for i in served if components[i]]
    reward = table.column("reward").to_pylist()
    version = table.column("model_version").to_pylist()
    advantage = table.column("advantage").to_pylist()
    group = table.column("group_id").to_pylist()
    by_version: dict[int, list[int]] = {}
    for i in reacted:
        by_version.setdefault(version[i], []).append(i)
    for v, members in by_version.items():
        values = normalised_advantages([reward[i] for i in members])
        for i, a in zip(members, values, strict=True):
            advantage[i], group[i] = a, f"served/v{v}"
    table = table.set_column(
        table.schema.get_field_index("advantage"), "advantage", pa.array(advantage, pa.float64())
    )
    table = table.set_column(
        table.schema.get_field_index("group_id"), "group_id", pa.array(group, pa.string())
    )
    silent = set(served) - set(reacted)
    if not silent:
        return table, 0
    keep = pa.array([i not in silent for i in range(table.num_rows)])
    return table.filter(keep), len(silent)


def _rows(rewards: pa.Table, tokens: pa.Table, config: TokenWindowConfig, pad_id: int) -> AgentRows:
    by_id: Mapping[str, int] = {r: i for i, r in enumerate(tokens.column("id").to_pylist())}
    index = [by_id[r] for r in rewards.column("source_id").to_pylist()]
    trials = tokens.take(pa.array(index, pa.int64()))
    weight = [config.served_weight if s == SERVED.reward_source else 1.0
              for s in rewards.column("source").to_pylist()]  # fmt: skip
    return agent_rows(
        trials.column("prompt_token_ids").to_pylist(),
        trials.column("completion_token_ids").to_pylist(),
        trials.column("behaviour_logprobs").to_pylist(),
        temperature=trials.column("temperature").to_pylist(),
        advantage=rewards.column("advantage").to_pylist(),
        reward=rewards.column("reward").to_pylist(),
        version=rewards.column("model_version").to_pylist(),
        group=rewards.column("group_id").to_pylist(),
        seq_len=config.seq_len, pad_id=pad_id, weight=weight,
    )  # fmt: skip
