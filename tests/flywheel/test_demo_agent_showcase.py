"""The demo's worked episode: a held-out episode of the newest version, turn by turn."""

from __future__ import annotations

from environments.episodes import EpisodeLimits
from flywheel.demo.agent_showcase import worked_episode
from tests.environments.counter_world import CounterWorld, tiny_chat_lm


def test_the_worked_episode_lists_each_call_with_what_it_showed() -> None:
    model, tokenizer = tiny_chat_lm()
    world = CounterWorld()
    episode = worked_episode(3, model, tokenizer, world, EpisodeLimits(max_turns=3))
    assert episode["version"] == 3 and episode["task_id"].startswith("t")
    assert 1 <= len(episode["turns"]) <= 3
    assert all(set(turn) == {"call", "observation"} for turn in episode["turns"])
    # every turn but the last showed the model something (the last observation ends the episode)
    assert all(turn["observation"] for turn in episode["turns"][:-1])
    assert episode["ended"] in ("submitted", "max_turns", "max_tokens")
    assert episode["tests"].count("/") == 1 and episode["passed"] in (True, False)
