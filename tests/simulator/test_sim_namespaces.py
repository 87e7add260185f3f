"""Two runs of one seed with different fleet ids share no id (runs never collide downstream)."""

from schemas.events import SuggestionOffered
from simulator import Fleet, SimulatorConfig, build_policy, config_with_overrides


def _ids(fleet_id: str) -> tuple[set[str], set[str], set[str]]:
    config = config_with_overrides(SimulatorConfig(), {"fleet_id": fleet_id, "seed": 3})
    events = list(Fleet(config, build_policy(config.policy)).events(400))
    offers = [e for e in events if isinstance(e, SuggestionOffered)]
    return (
        {e.event_id for e in events},
        {e.session_id for e in offers},
        {e.suggestion_id for e in offers},
    )


def test_fleet_ids_namespace_every_id() -> None:
    first, again, other = _ids("fleet-a"), _ids("fleet-a"), _ids("fleet-b")
    assert first == again  # one seed and one fleet id: the same ids
    for mine, theirs in zip(first, other, strict=True):
        assert mine
        assert mine.isdisjoint(theirs)
