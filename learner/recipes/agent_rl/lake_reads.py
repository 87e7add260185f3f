"""What the agent's token windows read from the lake: the model's Rewards of the sources that
train it, and the tokens of those Rewards (``rollouts.results`` by rollout id,
``agent.completions`` by completion id), each lake file read once per process
(:class:`AgentLakeReads`). Each row keeps the Kafka coordinates it was read at (``_partition``,
``_offset`` of a Reward; ``token_partition``, ``token_offset`` of its tokens) for the dead
letters of `learner.recipes.agent_rl.row_admission`. A column a lake file lacks (written before
the schema had it) reads as null: a ``completion_mask`` missing (RolloutResult before v3, every
``agent.completions`` file) or empty means every completion token was generated. A served
completion whose prompt holds the model's own earlier turns of a multi-turn session
(AgentCompletion v2's ``prompt_mask``) is read as one episode of the whole session
(:func:`served_episode`), so the Reward of a session's last turn trains all of its turns.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from contracts.advantages import GROUP_REWARD_FN, USE_REWARD_FN
from contracts.lake_layout import LakeFile, scan_topic
from streams.topics import COMPLETIONS_TOPIC, ROLLOUTS_TOPIC

_REWARD_COLUMNS = ["source", "source_id", "group_id", "model_name", "model_version", "reward",
                   "reward_fn", "reward_components", "advantage", "event_time",
                   "attributed_at", "_partition", "_offset"]  # fmt: skip
_TOKEN_COLUMNS = ["prompt_token_ids", "completion_token_ids", "behaviour_logprobs", "temperature",
                  "top_p", "completion_mask"]  # fmt: skip
_SESSION_COLUMNS = ("prompt_mask", "prompt_logprobs")  # AgentCompletion v2
_IDS = pa.list_(pa.int64())
TOKEN_SCHEMA = pa.schema([
    ("id", pa.string()), ("prompt_token_ids", _IDS), ("completion_token_ids", _IDS),
    ("behaviour_logprobs", pa.list_(pa.float64())), ("temperature", pa.float64()),
    ("top_p", pa.float64()), ("completion_mask", _IDS), ("token_partition", pa.int32()),
    ("token_offset", pa.int64()),
])  # fmt: skip


@dataclass(frozen=True)
class RowSource:
    """One kind of Reward that trains the agent, and the lake topic holding its tokens."""

    reward_source: str  # Reward.source
    reward_fn: str
    topic: str
    id_column: str  # the topic's column that Reward.source_id names


TRIALS = RowSource("ROLLOUT", GROUP_REWARD_FN, ROLLOUTS_TOPIC, "rollout_id")
SERVED = RowSource("COMPLETION", USE_REWARD_FN, COMPLETIONS_TOPIC, "completion_id")


def _agent_rewards(
    path: str, model_name: str, sources: Sequence[RowSource]
) -> tuple[pa.Table, int]:
    """One Reward file's rows of ``model_name`` from ``sources``, and the rows it holds."""
    table = _read_columns(path, _REWARD_COLUMNS)
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
    group the joiner expired) stay until the process ends.

    An erasure (`flywheel privacy erase`) rewrites lake files in place and drops the windows
    built from them: a Reward file whose size or mtime changed is read again, and when a
    converted file is pending again (:meth:`follow`) everything is read again once."""

    def __init__(self, lake: Path, model_name: str, sources: Sequence[RowSource]) -> None:
        self.lake, self.model_name, self.sources = lake, model_name, tuple(sources)
        self._reset()

    def _reset(self) -> None:
        # path -> ((size, mtime_ns) when read, (the file's rows of the model, rows it holds))
        self._rewards: dict[str, tuple[tuple[int, int], tuple[pa.Table, int]]] = {}
        self._seen: dict[str, set[str]] = {s.topic: set() for s in self.sources}
        self._tokens: dict[str, pa.Table] = {s.topic: _no_tokens() for s in self.sources}
        self._consumed: set[tuple[str, int, int, int]] = set()

    def follow(self, converted: Set[tuple[str, int, int, int]]) -> None:
        """Read everything again when a file this process converted is in no window any more
        (an erasure dropped its window: its rows and tokens were forgotten as consumed).
        ``converted``: the manifest's (topic, partition, first, last) of converted files."""
        if not self._consumed <= converted:
            self._reset()

    @property
    def retained_rows(self) -> int:
        """Token rows kept for Rewards not converted yet."""
        return sum(t.num_rows for t in self._tokens.values())

    def rewards(self, file: LakeFile) -> tuple[pa.Table, int]:
        """The Reward file's rows of the model from ``sources``, and the rows it holds."""
        stat = os.stat(file.path)
        version = (stat.st_size, stat.st_mtime_ns)
        cached = self._rewards.get(file.path)
        if cached is None or cached[0] != version:
            cached = (version, _agent_rewards(file.path, self.model_name, self.sources))
            self._rewards[file.path] = cached
        return cached[1]

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
            self._consumed.add((f.topic, f.partition, f.first, f.last))
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


def _token_file(path: str, source: RowSource, model_name: str) -> pa.Table:
    """One ``source.topic`` lake file's rows of ``model_name`` that carry tokens (the
    simulator's statistical rollouts and privacy-mode completions have none). A served
    completion whose prompt holds the session's earlier generated turns becomes one episode
    (:func:`served_episode`)."""
    served = source.topic == COMPLETIONS_TOPIC
    extra = list(_SESSION_COLUMNS) if served else []
    columns = [source.id_column, "model_name", *_TOKEN_COLUMNS, *extra, "_partition", "_offset"]
    part = _read_columns(path, columns)
    tokens = pc.fill_null(pc.list_value_length(part.column("completion_token_ids")), 0)
    keep = pc.and_(pc.equal(part.column("model_name"), model_name), pc.greater(tokens, 0))
    part = part.filter(keep).drop_columns(["model_name"])
    if served:
        part = _served_episodes(part)
    renamed = ["id", *_TOKEN_COLUMNS, "token_partition", "token_offset"]
    return part.rename_columns(renamed).cast(TOKEN_SCHEMA)


def served_episode(
    prompt: Sequence[int],
    completion: Sequence[int],
    logprobs: Sequence[float],
    prompt_mask: Sequence[int] | None,
    prompt_logprobs: Sequence[float] | None,
) -> tuple[list[int], list[int], list[float], list[int]]:
    """A served completion as an episode: (prompt, completion, behaviour log-probs, completion
    mask). When the prompt holds tokens the model generated in the session's earlier turns
    (``prompt_mask`` 1), the completion starts at the first of them: those turns are targets
    again with their own log-probs, and what lies between them (tool observations, template
    tokens) is context (mask 0), as in a rollout's episode. Otherwise the completion alone,
    every token generated (an empty mask)."""
    marks = list(prompt_mask or ())
    if 1 not in marks or len(marks) != len(prompt) or len(prompt_logprobs or ()) != len(prompt):
        return list(prompt), list(completion), list(logprobs), []
    start = marks.index(1)
    earlier = list(prompt_logprobs or ())[start:]
    return (
        list(prompt[:start]),
        [*prompt[start:], *completion],
        [lp if m else 0.0 for lp, m in zip(earlier, marks[start:], strict=True)] + list(logprobs),
        [*marks[start:], *[1] * len(completion)],
    )


def _served_episodes(part: pa.Table) -> pa.Table:
    """``part`` (token columns + the session columns) with each served session's completion
    made an episode (:func:`served_episode`); the session columns dropped."""
    columns = ["prompt_token_ids", "completion_token_ids", "behaviour_logprobs", "completion_mask"]
    rows = zip(
        *(part.column(c).to_pylist() for c in (*columns[:3], *_SESSION_COLUMNS)), strict=True
    )
    episodes = [
        served_episode(p or [], c or [], lp or [], m, mlp) for p, c, lp, m, mlp in rows
    ]  # fmt: skip
    for i, name in enumerate(columns):
        values = pa.array([e[i] for e in episodes], part.schema.field(name).type)
        part = part.set_column(part.schema.get_field_index(name), name, values)
    return part.drop_columns(list(_SESSION_COLUMNS))


def _read_columns(path: str, columns: Sequence[str]) -> pa.Table:
    """``columns`` of a lake file; one the file lacks (an older schema) is all null."""
    present = set(pq.read_schema(path).names)
    table = pq.read_table(path, columns=[c for c in columns if c in present])
    for name in columns:
        if name not in present:
            kind = _NULL_TYPES.get(name, pa.string())
            table = table.append_column(name, pa.nulls(table.num_rows, kind))
    return table.select(list(columns))


_NULL_TYPES = {
    "prompt_token_ids": _IDS, "completion_token_ids": _IDS,
    "behaviour_logprobs": pa.list_(pa.float64()), "temperature": pa.float64(),
    "top_p": pa.float64(), "completion_mask": _IDS, "prompt_mask": _IDS,
    "prompt_logprobs": pa.list_(pa.float64()), "_partition": pa.int32(), "_offset": pa.int64(),
    "advantage": pa.float64(), "reward": pa.float64(), "group_id": pa.string(),
}  # fmt: skip


def _no_tokens() -> pa.Table:
    return TOKEN_SCHEMA.empty_table()


def with_tokens(rewards: pa.Table, tokens: pa.Table) -> pa.Table:
    """``rewards`` (each of whose ``source_id`` is in ``tokens.id``) with its token columns
    (all of ``TOKEN_SCHEMA`` but ``id``) appended."""
    by_id: Mapping[str, int] = {r: i for i, r in enumerate(tokens.column("id").to_pylist())}
    index = [by_id[r] for r in rewards.column("source_id").to_pylist()]
    joined = tokens.take(pa.array(index, pa.int64()))
    for name in TOKEN_SCHEMA.names[1:]:
        rewards = rewards.append_column(name, joined.column(name))
    return rewards
