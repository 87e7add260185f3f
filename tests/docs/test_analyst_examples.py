"""docs/analysts.md's example questions run on a lake of two demo runs and answer about the
newest model only (a model is its name and version; two runs both have a version 1)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from analytics import Catalog
from schemas.enums import Decision
from schemas.events import Event
from tests.analytics.lake_builder import write_lake
from tests.analytics.test_analytics_views import lake_events
from tests.sample_events import offered

DOCS = Path(__file__).resolve().parents[2] / "docs" / "analysts.md"
RUN1 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
RUN2 = RUN1 + timedelta(days=3)


def example_statements() -> list[str]:
    """The statements of the examples' SQL block (the one starting with the models query)."""
    block = re.search(r"```sql\n(-- The models in the lake.*?)```", DOCS.read_text(), re.S)
    assert block is not None, "docs/analysts.md lost its example questions block"
    code = "\n".join(ln for ln in block[1].splitlines() if not ln.lstrip().startswith("--"))
    return [s.strip() for s in code.split(";") if s.strip()]


def two_runs() -> list[Event]:
    """The views' hand-built lake, plus two gate runs whose versions overlap: `gate-old`'s
    version 1 shows everything, `gate-new`'s version 1 shows nothing."""
    runs: list[Event] = list(lake_events())
    for name, start, decision in (("gate-old", RUN1, "SHOWN"), ("gate-new", RUN2, "SUPPRESSED")):
        runs += [
            offered(f"{name}-{i}", event_time=start + timedelta(minutes=i), model_name=name,
                    model_version=1, decision=Decision(decision))
            for i in range(5)
        ]  # fmt: skip
    return runs


def test_every_example_runs_and_the_versions_are_the_newest_models(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_lake(lake, two_runs())
    con = Catalog(lake).connect()
    answers = {}
    for statement in example_statements():
        result = con.sql(statement)  # a failing example raises, naming its SQL
        answers[statement] = [] if result is None else result.fetchall()
    assert con.execute("select getvariable('gate')").fetchone() == ("gate-new",)
    (by_version,) = [rows for sql, rows in answers.items() if "from acceptance_by_version" in sql]
    assert len(by_version) == 1, "only gate-new's version 1, not both runs' version 1 mixed"
    version, shown_per_1000, _ = by_version[0]
    assert (version, shown_per_1000) == (1, 0.0)
