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
  ``served_weight`` (0: sandbox trials only). The last turn of a multi-turn tool session
  carries the session's earlier generated turns in its prompt (``prompt_mask``): it is read as
  one episode of the whole session, its tool observations masked (``lake_reads.served_episode``).

A multi-turn episode's completion holds its turns and the tool observations between them; only
the tokens its ``completion_mask`` marks as generated are targets (observations are context).

A trial whose Reward never arrived is in no Reward file, so it is never trained on. A Reward
whose tokens have not reached the lake yet holds its whole file back (the next build tries again)
until ``hold_s`` after the file's newest Reward; then the missing rows (and those recorded in
privacy mode, which have no tokens) are expired (counted in ``expired_rows``) and the rest
converted. Rows with advantage 0 — every trial of a flat group, singletons, unreacted
completions — carry no policy gradient and stay out (``zero_advantage_rows``).

No row stops a window (`learner.recipes.agent_rl.row_admission`): a prompt too long for
``seq_len`` loses its start (``cut_rows``), a completion that alone does not fit stays out
(``overlong_rows``), a greedy row stays out (``greedy_rows``), a malformed one is a dead letter
(``dead_letters`` by cause, and the window's ``dead_letters.jsonl``). Each row keeps its sampling
``temperature`` and ``top_p``, so that the objective recomputes the behaviour distribution exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from contracts.advantages import GROUP_REWARD_FN, served_advantages
from contracts.lake_layout import LakeFile
from learner.data.lake_rows import max_ms, min_ms
from learner.data.token_windows import (
    TokenRows,
    TokenSampleSpec,
    pack_sequences,
    token_arrays,
    write_token_window,
)
from learner.data.window_manifest import (
    WINDOW_RECORD_NAME,
    WindowRecord,
    record_json,
    write_manifest,
)
from learner.data.windows import dataset_lock, lake_ref, pending_files, recover, window_name
from learner.errors import LearnerError
from learner.recipes.agent_rl.lake_reads import (
    SERVED,
    TRIALS,
    AgentLakeReads,
    RowSource,
    with_tokens,
)
from learner.recipes.agent_rl.row_admission import DEAD_LETTERS_NAME, admit_rows, dead_letters_jsonl
from streams.topics import REWARDS_TOPIC

__all__ = ["SERVED", "TRIALS", "AgentLakeReads", "AgentRows", "RowSource", "TokenWindowConfig",
           "agent_rows", "build_agent_window", "group_number"]  # fmt: skip

AGENT_ROW_SPEC = "agent-tokens@1"  # the windows' WindowRecord.context_spec
# What `learner.recipes.agent_rl.row_admission` judges: a Reward's fields, its tokens', their
# coordinates.
_ADMISSION_COLUMNS = ["source", "source_id", "reward", "advantage", "group_id", "_partition",
                      "_offset", "prompt_token_ids", "completion_token_ids", "behaviour_logprobs",
                      "temperature", "top_p", "completion_mask", "token_partition",
                      "token_offset"]  # fmt: skip


@dataclass(frozen=True)
class AgentRows:
    """Trials as training rows: token rows plus ``behaviour`` (n, L) float32 (μ of the token at each
    completion position: 0 at a tool observation's, which is no target; 0 elsewhere),
    ``temperature`` it was sampled at, ``advantage``, ``reward`` (n,) float32, ``version`` (n,)
    int32 (the model version that sampled the trial), ``group`` (n,) int64, ``weight`` (n,) float32
    (how much its tokens count; None: 1) and ``top_p`` (n,) float64 (its nucleus threshold, float64
    as sampled: the objective repeats the sampler's cut exactly; None: 1, no filter)."""

    tokens: TokenRows
    behaviour: np.ndarray
    temperature: np.ndarray
    advantage: np.ndarray
    reward: np.ndarray
    version: np.ndarray
    group: np.ndarray
    weight: np.ndarray | None = None
    top_p: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-row arrays a window stores (the packer pads with ``weight`` 0 rows)."""
        weight = np.ones(len(self), np.float32) if self.weight is None else self.weight
        top_p = np.ones(len(self), np.float64) if self.top_p is None else self.top_p
        return {
            **token_arrays(self.tokens), "behaviour": self.behaviour,
            "temperature": self.temperature, "top_p": top_p, "advantage": self.advantage,
            "reward": self.reward, "version": self.version, "group": self.group,
            "weight": weight,
        }  # fmt: skip

    def batch(self, keep: np.ndarray | None = None) -> dict[str, torch.Tensor]:
        """The rows (or those ``keep`` selects) as the tensors
        `learner.recipes.agent_rl.grpo.GRPOTask` reads."""
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
    top_p: Sequence[float] | None = None,
    masks: Sequence[Sequence[int] | None] | None = None,
) -> AgentRows:
    """Pack trials (prompt and completion ids, the completion's behaviour log-probs sampled at
    ``temperature`` and ``top_p``, one per completion token) as rows; ``masks``: per row, the
    episode's completion mask (1 generated, 0 a tool observation: never a target), None or empty
    when every completion token was generated. LearnerError for a completion that does not fit
    ``seq_len`` (`learner.recipes.agent_rl.row_admission` keeps those out of a window)."""
    tokens = pack_sequences(prompts, completions, seq_len, pad_id, masks)
    behaviour = np.zeros(tokens.input_ids.shape, dtype=np.float32)
    for row, values in enumerate(logprobs):
        end = int(tokens.lengths[row])  # the completion ends the row (never cut)
        behaviour[row, end - len(values) : end] = values
    return AgentRows(
        tokens, behaviour, np.asarray(temperature, dtype=np.float32),
        np.asarray(advantage, dtype=np.float32),
        np.asarray(reward, dtype=np.float32), np.asarray(version, dtype=np.int32),
        np.asarray([group_number(g) for g in group], dtype=np.int64),
        None if weight is None else np.asarray(weight, dtype=np.float32),
        None if top_p is None else np.asarray(top_p, dtype=np.float64),
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
    vocab_size: int | None = None,
) -> WindowRecord | None:
    """Convert the Reward lake files not yet in ``dataset``'s manifest (and not held back) into
    one window of ``model_name``'s trials and served completions. Returns its record, or None
    when nothing is ready. A caller that builds again and again (the learner's poll) passes the
    same ``reads`` each time, so that each lake file is read once. ``vocab_size``: the model's;
    a token id outside it is a dead letter (None: ids need only fit int32). No row's content
    raises: rows are cut, left out or dead-lettered (module docstring)."""
    root = mds_root / dataset
    root.mkdir(parents=True, exist_ok=True)
    now_ms = int((now or datetime.now(UTC)).timestamp() * 1000)
    if reads is None:
        reads = AgentLakeReads(lake, model_name, config.sources)
    with dataset_lock(root):
        manifest = recover(root, dataset, GROUP_REWARD_FN)
        reads.follow(manifest.converted())  # an erasure may have dropped windows
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
        joined = with_tokens(pa.concat_tables(parts), tokens)
        admission = admit_rows(
            joined.select(_ADMISSION_COLUMNS).to_pylist(), seq_len=config.seq_len,
            vocab_size=vocab_size, trial_source=TRIALS.reward_source,
            token_topics={s.reward_source: s.topic for s in config.sources},
            reward_topic=REWARDS_TOPIC,
        )  # fmt: skip
        table = joined.take(pa.array(admission.keep, pa.int64()))
        table, unreacted = served_advantages(table)
        flat = pc.equal(table.column("advantage"), 0.0)
        zero = pc.sum(flat).as_py() or 0
        table = table.filter(pc.invert(flat)) if zero else table
        rows, cut = _rows(table, config, pad_id)
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
            served_rows=served, cut_rows=cut, overlong_rows=admission.overlong,
            greedy_rows=admission.greedy, dead_letters=admission.causes,
        )  # fmt: skip
        files = {WINDOW_RECORD_NAME: record_json(record)}
        if admission.dead_letters:  # written with the window: both appear, or neither
            files[DEAD_LETTERS_NAME] = dead_letters_jsonl(admission.dead_letters)
        write_token_window(root / record.name, rows.arrays(), spec, files=files)
        write_manifest(root, manifest.with_window(record))
        reads.consumed(ready, parts)
        return record


def _rows(table: pa.Table, config: TokenWindowConfig, pad_id: int) -> tuple[AgentRows, int]:
    """The admitted rows of ``table`` (Rewards joined with their tokens) packed, and how many of
    them lost the start of their prompt to fit ``seq_len``."""
    prompts = table.column("prompt_token_ids").to_pylist()
    completions = table.column("completion_token_ids").to_pylist()
    cut = sum(len(p) + len(c) > config.seq_len for p, c in zip(prompts, completions, strict=True))
    weight = [config.served_weight if s == SERVED.reward_source else 1.0
              for s in table.column("source").to_pylist()]  # fmt: skip
    rows = agent_rows(
        prompts, completions, table.column("behaviour_logprobs").to_pylist(),
        temperature=table.column("temperature").to_pylist(),
        top_p=table.column("top_p").to_pylist(),
        advantage=table.column("advantage").to_pylist(),
        reward=table.column("reward").to_pylist(),
        version=table.column("model_version").to_pylist(),
        group=table.column("group_id").to_pylist(),
        seq_len=config.seq_len, pad_id=pad_id, weight=weight,
        masks=table.column("completion_mask").to_pylist(),
    )  # fmt: skip
    return rows, cut
