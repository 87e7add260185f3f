"""Token windows from a small lake: rollouts and served completions joined to their Rewards,
held, expired, mixed."""

from __future__ import annotations

import dataclasses
import json
import math
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np

from contracts.advantages import GROUP_REWARD_FN
from contracts.lake_layout import file_path, hour_of_ms
from learner.data.window_manifest import read_manifest
from learner.recipes.agent_rl.lake_reads import served_episode
from learner.recipes.agent_rl.row_admission import DEAD_LETTERS_NAME
from learner.recipes.agent_rl.windows import (
    AgentLakeReads,
    TokenWindowConfig,
    build_agent_window,
    group_number,
)
from processors.lake.columns import LakeColumns
from processors.lake.writer import write_parquet_atomically
from processors.rewards.groups import group_advantages
from processors.rewards.served import (
    FeedbackWindows,
    PendingCompletion,
    add_completion_event,
    completion_rewards,
)
from schemas.catalog import history
from schemas.enums import AgentReaction
from schemas.events import AgentCompletion, AgentFeedback, Reward, RolloutResult
from schemas.records import AvroRecord, encode_time
from streams.topics import COMPLETIONS_TOPIC, REWARDS_TOPIC, ROLLOUTS_TOPIC
from tests.learner.recipes.agent_rl.agent_lake import window_rows, write_lake_file

T0 = datetime(2026, 12, 1, 10, tzinfo=UTC)
PAD = 0
CONFIG = TokenWindowConfig(seq_len=16, rows_per_sample=4, hold_s=60)


def _write(lake: Path, topic: str, events: Sequence[AvroRecord], first: int = 0) -> None:
    write_lake_file(lake, topic, events, T0, first)


def _group(group: str, rewards: Sequence[float], model: str = "agent-lm") -> list[RolloutResult]:
    return [
        RolloutResult(
            event_id=f"e-{group}-{i}", event_time=T0, producer="test", rollout_id=f"{group}-{i}",
            task_id="t-1", group_id=group, model_name=model, model_version=3, prompt_tokens=3,
            completion_tokens=3, tool_calls=0, tests_passed=int(r), tests_total=1,
            reward_components={"tests": r}, duration_ms=10, prompt_token_ids=(5, 6, 7),
            completion_token_ids=(8, 9, 2), behaviour_logprobs=(-0.5, -1.0, -0.1 * (i + 1)),
            temperature=1.0, top_p=1.0,
        )
        for i, r in enumerate(rewards)
    ]  # fmt: skip


def _rewards(*groups: list[RolloutResult]) -> list[AvroRecord]:
    return [r for g in groups for r in group_advantages(g, T0, "test")]


def test_rewarded_trials_become_rows_with_their_tokens_and_behaviour(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    learnable, flat = _group("g1", [1.0, 0.0, 0.0, 1.0]), _group("g2", [0.0, 0.0])
    unrewarded = _group("g3", [1.0, 0.0])  # its group never completed: no Reward
    _write(lake, ROLLOUTS_TOPIC, [*learnable, *flat, *unrewarded])
    _write(lake, REWARDS_TOPIC, _rewards(learnable, flat))
    record = build_agent_window(lake, mds, "agent-lm.tokens", model_name="agent-lm", pad_id=PAD,
                                config=CONFIG, now=T0)  # fmt: skip
    assert record is not None
    assert (record.rows, record.zero_advantage_rows, record.expired_rows) == (4, 2, 0)
    assert record.trained_tokens == 12
    rows = window_rows(mds / "agent-lm.tokens" / record.name)
    assert rows["input_ids"][0, :6].tolist() == [5, 6, 7, 8, 9, 2]
    assert rows["target"][0, :7].tolist() == [0, 0, 0, 1, 1, 1, 0]
    np.testing.assert_allclose(rows["behaviour"][1, 3:6], [-0.5, -1.0, -0.2])
    np.testing.assert_allclose(rows["advantage"], [1, -1, -1, 1], atol=1e-4)
    assert rows["version"].tolist() == [3] * 4 and rows["weight"].tolist() == [1.0] * 4
    assert set(rows["group"].tolist()) == {group_number("g1")}
    # every Reward file is converted once
    assert build_agent_window(lake, mds, "agent-lm.tokens", model_name="agent-lm", pad_id=PAD,
                              config=CONFIG, now=T0) is None  # fmt: skip


def test_a_reward_waits_for_its_rollout_then_expires(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    landed, late = _group("g1", [1.0, 0.0]), _group("g2", [0.0, 1.0])
    _write(lake, ROLLOUTS_TOPIC, landed)
    _write(lake, REWARDS_TOPIC, _rewards(landed, late))
    build = lambda now: build_agent_window(  # noqa: E731
        lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=CONFIG, now=now
    )
    assert build(T0 + timedelta(seconds=30)) is None  # held: g2's trials are not in the lake yet
    record = build(T0 + timedelta(seconds=61))
    assert record is not None and (record.rows, record.expired_rows) == (2, 2)
    manifest = read_manifest(mds / "d", "d", GROUP_REWARD_FN)
    assert [w.name for w in manifest.windows] == [record.name]


def test_a_polling_builder_reads_new_files_and_forgets_converted_rows(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    landed, late, pending = _group("g1", [1.0, 0.0]), _group("g2", [0.0, 1.0]), _group("g3", [1.0])
    _write(lake, ROLLOUTS_TOPIC, [*landed, *pending])
    _write(lake, REWARDS_TOPIC, _rewards(landed, late))
    reads = AgentLakeReads(lake, "agent-lm", CONFIG.sources)
    build = lambda now: build_agent_window(  # noqa: E731
        lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=CONFIG, now=now, reads=reads
    )
    assert build(T0 + timedelta(seconds=30)) is None  # held: g2's trials are not in the lake yet
    _write(lake, ROLLOUTS_TOPIC, late, first=100)  # they land; the same reads must see them
    record = build(T0 + timedelta(seconds=31))
    assert record is not None and (record.rows, record.expired_rows) == (4, 0)
    assert reads.retained_rows == 1  # g3's trial: no Reward names it yet


def test_other_models_and_sources_are_skipped(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    ours, theirs = _group("g1", [1.0, 0.0]), _group("g2", [1.0, 0.0], model="other")
    _write(lake, ROLLOUTS_TOPIC, [*ours, *theirs])
    _write(lake, REWARDS_TOPIC, _rewards(ours, theirs))
    record = build_agent_window(lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=CONFIG,
                                now=T0)  # fmt: skip
    assert record is not None and (record.rows, record.skipped_rows) == (2, 2)


def _trial(
    group: str,
    i: int,
    reward: float,
    prompt: Sequence[int],
    completion: Sequence[int],
    **fields: Any,
) -> RolloutResult:
    """One trial of ``group`` with these tokens (log-probs -0.5 each unless ``fields`` say)."""
    values: dict[str, Any] = {
        "event_id": f"e-{group}-{i}", "event_time": T0, "producer": "test",
        "rollout_id": f"{group}-{i}", "task_id": "t-1", "group_id": group,
        "model_name": "agent-lm", "model_version": 3, "prompt_tokens": len(prompt),
        "completion_tokens": len(completion), "tool_calls": 0, "tests_passed": int(reward),
        "tests_total": 1, "reward_components": {"tests": reward}, "duration_ms": 10,
        "prompt_token_ids": tuple(prompt), "completion_token_ids": tuple(completion),
        "behaviour_logprobs": tuple(-0.5 for _ in completion), "temperature": 1.0, "top_p": 1.0,
    }  # fmt: skip
    return RolloutResult(**{**values, **fields})


def test_rows_too_long_for_a_window_are_cut_or_left_out_and_never_stop_it(
    tmp_path: Path,
) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    config = TokenWindowConfig(seq_len=6, rows_per_sample=4)
    trials = [
        _trial("g1", 0, 1.0, [5, 6, 7], [8, 9, 2]),  # exactly 6 tokens: fits whole
        _trial("g1", 1, 0.0, [10, 11, 12, 13, 14], [8, 9, 2]),  # 8: the prompt loses 2 tokens
        _trial("g1", 2, 1.0, [5], [8] * 6),  # the completion alone fills the row: left out
    ]
    long_served = dataclasses.replace(
        _served("r1:0"), prompt_token_ids=(5,) * 200, completion_token_ids=(7,) * 150,
        behaviour_logprobs=(-0.1,) * 150, completion_tokens=150,
    )  # fmt: skip  # serving allows prompt + max_tokens up to the model's 256 positions
    _write(lake, ROLLOUTS_TOPIC, trials)
    _write(lake, COMPLETIONS_TOPIC, [long_served, _served("r2:0")])
    _write(lake, REWARDS_TOPIC, [*_rewards(trials),
                                 _use_reward(long_served, AgentReaction.ACCEPTED),
                                 _use_reward(_served("r2:0"), AgentReaction.REVERTED)])  # fmt: skip
    record = build_agent_window(lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=config,
                                now=T0)  # fmt: skip
    assert record is not None
    assert (record.rows, record.cut_rows, record.overlong_rows) == (2, 1, 2)
    rows = window_rows(mds / "d" / record.name)
    assert rows["input_ids"][1].tolist() == [12, 13, 14, 8, 9, 2]  # cut from the left
    assert rows["target"][1].tolist() == [0, 0, 0, 1, 1, 1]  # the whole completion trains
    np.testing.assert_allclose(rows["behaviour"][1, 3:], [-0.5] * 3)
    # the Reward file is converted: the next build has nothing to do, and does not raise
    assert build_agent_window(lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=config,
                              now=T0) is None  # fmt: skip


def test_malformed_rows_are_dead_letters_with_their_cause(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    good = [_trial("g1", i, float(i % 2), [5, 6], [8, 2]) for i in range(2)]
    bad = [
        _trial("g1", 2, 1.0, [5, 6], [8, 9, 2], behaviour_logprobs=(-0.5, -0.5)),
        _trial("g1", 3, 0.0, [5, 6], [8, 999]),  # 999: outside a 100-token vocabulary
        _trial("g1", 4, 1.0, [5, 6], [8, 2], behaviour_logprobs=(-0.5, math.nan)),
        _trial("g1", 5, 0.0, [5, 6], [8, 2], top_p=None),  # its distribution is unknown
        _trial("g1", 6, 1.0, [5, 6], [8, 2], temperature=None),
        _trial("g1", 7, 0.0, [], [8, 2]),
    ]
    _write(lake, ROLLOUTS_TOPIC, [*good, *bad])
    rewards = _rewards(good + bad)
    broken = dataclasses.replace(cast(Reward, rewards[0]), advantage=math.inf)  # at fault
    _write(lake, REWARDS_TOPIC, [broken, *rewards[1:]])
    record = build_agent_window(lake, mds, "d", model_name="agent-lm", pad_id=PAD, now=T0,
                                config=CONFIG, vocab_size=100)  # fmt: skip
    assert record is not None and record.rows == 1
    assert record.dead_letters == {"invalid_reward": 1, "length_mismatch": 1,
                                   "token_out_of_vocab": 1, "invalid_logprob": 1,
                                   "invalid_sampling": 2, "missing_tokens": 1}  # fmt: skip
    letters = [json.loads(line) for line in
               (mds / "d" / record.name / DEAD_LETTERS_NAME).read_text().splitlines()]  # fmt: skip
    by_id = {letter["id"]: letter for letter in letters}
    assert by_id["g1-2"]["cause"] == "length_mismatch" and "3 completion" in by_id["g1-2"]["error"]
    assert (by_id["g1-3"]["topic"], by_id["g1-3"]["partition"], by_id["g1-3"]["offset"]) == (
        ROLLOUTS_TOPIC, 0, 3,
    )  # fmt: skip
    assert (by_id["g1-0"]["topic"], by_id["g1-0"]["offset"]) == (REWARDS_TOPIC, 0)
    assert {letter["stage"] for letter in letters} == {"learner"}
    manifest = read_manifest(mds / "d", "d", GROUP_REWARD_FN)
    assert manifest.windows[0].dead_letters == record.dead_letters  # kept in the record


def test_greedy_rows_stay_out_and_top_p_travels_with_each_row(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    nucleus = [dataclasses.replace(_served(f"r{i}:0"), top_p=0.9, temperature=0.7)
               for i in range(2)]  # fmt: skip
    greedy = dataclasses.replace(_served("r9:0"), temperature=0.0, speculative=True)
    _write(lake, COMPLETIONS_TOPIC, [*nucleus, greedy])
    _write(lake, REWARDS_TOPIC, [_use_reward(nucleus[0], AgentReaction.ACCEPTED),
                                 _use_reward(nucleus[1], AgentReaction.REVERTED),
                                 _use_reward(greedy, AgentReaction.ACCEPTED)])  # fmt: skip
    record = build_agent_window(lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=CONFIG,
                                now=T0)  # fmt: skip
    assert record is not None and (record.rows, record.greedy_rows) == (2, 1)
    rows = window_rows(mds / "d" / record.name)
    assert rows["top_p"].dtype == np.float64 and rows["top_p"].tolist() == [0.9, 0.9]
    np.testing.assert_allclose(rows["temperature"], [0.7, 0.7], rtol=1e-6)


def _served(cid: str, version: int = 4, private: bool = False) -> AgentCompletion:
    return AgentCompletion(
        producer="serve/t", event_time=T0, completion_id=cid, request_id=cid.split(":")[0],
        session_id="s", user_id="u", api_key="ide", model_name="agent-lm", model_version=version,
        channel="production", endpoint="completions", choice_index=0, prompt_tokens=2,
        cached_prompt_tokens=0, completion_tokens=2,
        prompt_token_ids=None if private else (5, 6),
        completion_token_ids=None if private else (7, 2),
        behaviour_logprobs=None if private else (-0.3, -0.2), completion_text=None,
        temperature=1.0, top_p=1.0, max_tokens=8, finish_reason="stop", latency_ms=5,
        privacy_mode=private,
    )  # fmt: skip


def _use_reward(completion: AgentCompletion, *reactions: AgentReaction) -> AvroRecord:
    """The joiner's agent_use@1 Reward of ``completion`` given ``reactions``."""
    pending = PendingCompletion(completion)
    for i, reaction in enumerate(reactions):
        pending = add_completion_event(pending, AgentFeedback(
            producer="ide/t", event_time=T0, event_id=f"f-{completion.completion_id}-{i}",
            completion_id=completion.completion_id, session_id="s", reaction=reaction,
        ))  # fmt: skip
    (reward,) = completion_rewards(pending, FeedbackWindows(), T0, "test")
    return reward


def test_served_completions_join_the_mix_against_their_version_baseline(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    trials = _group("g1", [1.0, 0.0])
    liked, disliked, ignored = _served("r1:0"), _served("r2:0"), _served("r3:0")
    other_version, private = _served("r4:0", version=5), _served("r5:0", private=True)
    _write(lake, ROLLOUTS_TOPIC, trials)
    _write(lake, COMPLETIONS_TOPIC, [liked, disliked, ignored, other_version, private])
    _write(lake, REWARDS_TOPIC, [
        *_rewards(trials),
        _use_reward(liked, AgentReaction.ACCEPTED, AgentReaction.TESTS_PASSED),
        _use_reward(disliked, AgentReaction.REVERTED),
        _use_reward(ignored),  # nobody reacted: no signal
        _use_reward(other_version, AgentReaction.ACCEPTED),  # alone in its version: no baseline
        _use_reward(private, AgentReaction.ACCEPTED),  # privacy mode: no tokens to train on
    ])  # fmt: skip
    config = TokenWindowConfig(seq_len=16, rows_per_sample=4, hold_s=60, served_weight=0.25)
    build = lambda now, config=config: build_agent_window(  # noqa: E731
        lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=config, now=now
    )
    assert build(T0 + timedelta(seconds=30)) is None  # held: the private one has no tokens yet
    record = build(T0 + timedelta(seconds=61))
    assert record is not None
    assert (record.rows, record.served_rows, record.expired_rows) == (4, 2, 1)
    assert record.zero_advantage_rows == 2  # the ignored one, and the lone v5 one
    rows = window_rows(mds / "d" / record.name)
    assert rows["weight"].tolist() == [1.0, 1.0, 0.25, 0.25]
    np.testing.assert_allclose(rows["advantage"], [1, -1, 1, -1], atol=1e-4)
    assert rows["input_ids"][2, :4].tolist() == [5, 6, 7, 2]
    np.testing.assert_allclose(rows["behaviour"][2, 2:4], [-0.3, -0.2], rtol=1e-6)
    assert rows["group"][2] == group_number("served/v4")


def test_served_weight_zero_trains_sandbox_trials_only(tmp_path: Path) -> None:
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    trials, liked, disliked = _group("g1", [1.0, 0.0]), _served("r1:0"), _served("r2:0")
    _write(lake, ROLLOUTS_TOPIC, trials)
    _write(lake, COMPLETIONS_TOPIC, [liked, disliked])
    _write(lake, REWARDS_TOPIC, [*_rewards(trials), _use_reward(liked, AgentReaction.ACCEPTED),
                                 _use_reward(disliked, AgentReaction.REVERTED)])  # fmt: skip
    config = TokenWindowConfig(seq_len=16, rows_per_sample=4, served_weight=0.0)
    record = build_agent_window(lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=config,
                                now=T0)  # fmt: skip
    assert record is not None and (record.rows, record.served_rows, record.skipped_rows) == (
        2,
        0,
        2,
    )


def test_an_episodes_tool_observations_are_context_not_targets(tmp_path: Path) -> None:
    """A multi-turn trial (completion_mask) beside a single-shot one in a lake file written
    before RolloutResult had the mask (v2: no column): the episode trains its generated tokens
    only, the old row all of its completion; a mask of the wrong length is a dead letter."""
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    episode = _trial(
        "g1", 0, 1.0, [5, 6], [8, 2, 40, 41, 9, 2], turns=2, tool_calls=1,
        completion_mask=(1, 1, 0, 0, 1, 1), behaviour_logprobs=(-0.5, -0.5, 0.0, 0.0, -0.5, -0.5),
    )  # fmt: skip
    single = _trial("g1", 1, 0.0, [5, 6], [8, 9, 2])
    broken = _trial("g1", 2, 1.0, [5, 6], [8, 2], completion_mask=(1, 1, 0))
    old = LakeColumns(history("RolloutResult")[1])  # v2, the version before the mask
    assert "completion_mask" not in old.names
    table = old.table([old.row(single.to_record())], ROLLOUTS_TOPIC, 0, array("q", [0]))
    write_parquet_atomically(table, file_path(lake, ROLLOUTS_TOPIC, 0, 0, 0,
                                              hour_of_ms(encode_time(T0))))  # fmt: skip
    _write(lake, ROLLOUTS_TOPIC, [episode, broken], first=1)
    _write(lake, REWARDS_TOPIC, _rewards([episode, single, broken]))
    record = build_agent_window(lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=CONFIG,
                                now=T0)  # fmt: skip
    assert record is not None and record.rows == 2
    assert record.dead_letters == {"length_mismatch": 1}
    assert record.trained_tokens == 4 + 3
    rows = window_rows(mds / "d" / record.name)
    by_length = {int(n): i for i, n in enumerate(rows["lengths"])}
    ep, one = by_length[8], by_length[5]
    assert rows["input_ids"][ep, :8].tolist() == [5, 6, 8, 2, 40, 41, 9, 2]
    assert rows["target"][ep, :9].tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 0]
    np.testing.assert_allclose(rows["behaviour"][ep, 2:8], [-0.5, -0.5, 0, 0, -0.5, -0.5])
    assert rows["target"][one, :6].tolist() == [0, 0, 1, 1, 1, 0]


def test_a_served_sessions_last_turn_trains_the_whole_session(tmp_path: Path) -> None:
    """A served session's last completion (v2: prompt_mask marks the tokens the model wrote in
    its earlier turn) becomes one episode: both turns are targets with their own log-probs,
    the tool observation between them is context; a v1 completion stays a plain row."""
    lake, mds = tmp_path / "lake", tmp_path / "mds"
    session = dataclasses.replace(
        _served("r1:0"), prompt_token_ids=(5, 6, 30, 31, 2, 40, 41), completion_token_ids=(9, 2),
        behaviour_logprobs=(-0.4, -0.1), turn=1, prompt_mask=(0, 0, 1, 1, 1, 0, 0),
        prompt_logprobs=(0.0, 0.0, -0.7, -0.6, -0.5, 0.0, 0.0),
    )  # fmt: skip
    plain = _served("r2:0")
    _write(lake, COMPLETIONS_TOPIC, [session, plain])
    _write(lake, REWARDS_TOPIC, [_use_reward(session, AgentReaction.TESTS_PASSED),
                                 _use_reward(plain, AgentReaction.REVERTED)])  # fmt: skip
    config = TokenWindowConfig(seq_len=16, rows_per_sample=4, served_weight=1.0)
    record = build_agent_window(lake, mds, "d", model_name="agent-lm", pad_id=PAD, config=config,
                                now=T0)  # fmt: skip
    assert record is not None and (record.rows, record.served_rows) == (2, 2)
    assert record.trained_tokens == 5 + 2
    rows = window_rows(mds / "d" / record.name)
    ep = [int(n) for n in rows["lengths"]].index(9)
    assert rows["input_ids"][ep, :9].tolist() == [5, 6, 30, 31, 2, 40, 41, 9, 2]
    assert rows["target"][ep, :10].tolist() == [0, 0, 1, 1, 1, 0, 0, 1, 1, 0]
    np.testing.assert_allclose(rows["behaviour"][ep, 2:9], [-0.7, -0.6, -0.5, 0, 0, -0.4, -0.1],
                               rtol=1e-6)  # fmt: skip


def test_served_episode_keeps_a_plain_completion_and_ignores_a_broken_mask() -> None:
    assert served_episode([5, 6], [7, 2], [-0.3, -0.2], [], []) == ([5, 6], [7, 2], [-0.3, -0.2],
                                                                    [])  # fmt: skip
    assert served_episode([5, 6], [7, 2], [-0.3, -0.2], [1], [-1.0])[3] == []  # wrong length
    assert served_episode([5, 6, 8], [7], [-0.3], [0, 1, 0], [0.0, -0.9, 0.0]) == (
        [5], [6, 8, 7], [-0.9, 0.0, -0.3], [1, 0, 1],
    )  # fmt: skip
