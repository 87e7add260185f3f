"""Generated repositories: each is buggy (the visible and the hidden tests show it) and solvable
(the fixed files pass every hidden test), short, seeded, and its spec travels as JSON."""

from __future__ import annotations

import random

import pytest

from environments.errors import TaskEnvironmentError
from environments.repository import evaluate
from environments.repository.generator import generate, task_message
from environments.repository.spec import RepoSpec
from environments.repository.templates import (
    EVAL_BUGS,
    TEMPLATES,
    TRAIN_BUGS,
    TRAIN_TEMPLATES,
)

BUGS = TRAIN_BUGS + EVAL_BUGS


def _instances(count: int) -> list[RepoSpec]:
    """Every template at each level it fits, with every bug kind in turn."""
    rng, out = random.Random(11), []
    for i in range(count):
        template = list(TEMPLATES.values())[i % len(TEMPLATES)]
        level = 1 if not template.multi_file else 2 + (i // len(TEMPLATES)) % 2
        bugs = [BUGS[(i + j) % len(BUGS)] for j in range(2 if level == 3 else 1)]
        out.append(generate(rng, level, template, bugs))
    return out


SPECS = _instances(140)


def _repaired(spec: RepoSpec) -> dict[str, str]:
    return {**spec.files, **spec.fixed}


def test_every_instance_fails_visible_and_hidden_tests_and_its_fix_passes_them_all() -> None:
    for spec in SPECS:
        assert evaluate.failing_visible(spec.files, spec.test_file), spec.to_json()
        assert evaluate.failing_hidden(spec.files, spec.hidden) > 0, spec.to_json()
        repaired = _repaired(spec)
        assert evaluate.failing_visible(repaired, spec.test_file) == []
        assert evaluate.failing_hidden(repaired, spec.hidden) == 0


def test_levels_say_how_many_files_and_changes() -> None:
    for spec in SPECS:
        sources = [p for p in spec.files if p != "ops.py" and not p.startswith("test_")]
        changed_lines = sum(
            a != b
            for path, text in spec.fixed.items()
            for a, b in zip(spec.files[path].splitlines(), text.splitlines(), strict=True)
        )
        assert changed_lines == (2 if spec.level == 3 else 1), spec.to_json()
        assert (len(sources) > 1) == (spec.level > 1)
        if spec.level == 2:  # the change lives in a module another one imports
            assert spec.test_file.removeprefix("test_") not in spec.fixed
        assert spec.test_file in spec.files and spec.fixed


def test_a_level_1_source_file_is_short_and_says_what_it_does() -> None:
    for spec in (s for s in SPECS if s.level == 1):
        source = spec.files[spec.test_file.removeprefix("test_")]
        assert len(source.splitlines()) <= 9, source
        assert source.startswith("from ops import *\n") and '"""' in source


def test_hidden_tests_use_inputs_the_visible_tests_do_not_show() -> None:
    for spec in SPECS:
        visible = spec.files[spec.test_file]
        for test in spec.hidden:
            assert f"{test.function}({test.args[0]!r})" not in visible


def test_the_same_seed_draws_the_same_instance_and_instances_differ() -> None:
    template = TRAIN_TEMPLATES["app-helpers"]
    first = generate(random.Random(3), 2, template, ["wrong-op"])
    assert first == generate(random.Random(3), 2, template, ["wrong-op"])
    ids = {generate(random.Random(s), 2, template, ["wrong-op"]).instance_id for s in range(50)}
    assert len(ids) == 50


def test_the_spec_round_trips_through_json() -> None:
    for spec in SPECS[:20]:
        again = RepoSpec.from_json(spec.to_json())
        assert again.to_json() == spec.to_json()
        assert again.instance_id == spec.instance_id
        assert (again.template, again.bugs, again.level) == (spec.template, spec.bugs, spec.level)


def test_the_user_message_names_the_failing_tests_and_the_files() -> None:
    spec = SPECS[0]
    message = task_message(spec)
    assert spec.test_file in message and all(path in message for path in spec.files)
    assert "hidden" not in message


@pytest.mark.parametrize(
    ("template", "level", "bugs"),
    [("strings", 2, ["stub"]), ("app-helpers", 1, ["stub"]), ("pipeline", 3, ["stub"]),
     ("strings", 1, ["typo"])],
)  # fmt: skip
def test_a_level_that_does_not_fit_is_refused(template: str, level: int, bugs: list[str]) -> None:
    with pytest.raises(TaskEnvironmentError):
        generate(random.Random(0), level, TEMPLATES[template], bugs)
