"""The docs say what the code does: every FLYWHEEL_* variable the code reads is in
docs/configuration.md, and every `flywheel` command in a shell block of README.md and docs/*.md
names real subcommands and options (and `--help` of that command exits 0)."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from flywheel.cli import cli
from tests.docs.doc_commands import DocCommand, check, doc_commands, shell_lines, simple_commands

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# Read only by tests, to slow down or key a test run; not configuration a user sets.
TEST_ONLY_VARIABLES = frozenset(
    {"FLYWHEEL_TEST_SECRET", "FLYWHEEL_LEARNER_TEST_CHECKPOINT_SLEEP_S"}
)
_VARIABLE = re.compile(r"FLYWHEEL_[A-Z0-9_]*[A-Z0-9]_?")
_SKIP_DIRS = {"tests", "bench", ".venv", ".git", ".flywheel", "node_modules", "build"}


def _source_files() -> list[Path]:
    return [p for p in ROOT.rglob("*.py") if not _SKIP_DIRS.intersection(p.relative_to(ROOT).parts)]


def variables_in_code() -> set[str]:
    """Every FLYWHEEL_* name in the production sources; a name ending in `_` is a prefix family
    (FLYWHEEL_KAFKA_, FLYWHEEL_STACK_)."""
    found: set[str] = set()
    for path in _source_files():
        found.update(_VARIABLE.findall(path.read_text()))
    return found - TEST_ONLY_VARIABLES


def test_the_scan_sees_the_code() -> None:
    names = variables_in_code()
    assert {"FLYWHEEL_HOME", "FLYWHEEL_LOG_LEVEL", "FLYWHEEL_KAFKA_"} <= names, names
    assert not names & TEST_ONLY_VARIABLES


def test_every_variable_the_code_reads_is_in_configuration_md() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"`(FLYWHEEL_[A-Z0-9_]+)\*?`", page))
    missing = sorted(
        name
        for name in variables_in_code()
        # A member of a documented family (FLYWHEEL_KAFKA_SASL_PASSWORD under FLYWHEEL_KAFKA_*)
        # is documented by the family's row.
        if name not in documented
        and not any(d.endswith("_") and name.startswith(d) for d in documented)
        # A family the code names (FLYWHEEL_STACK_) is documented by its members' rows.
        and not (name.endswith("_") and any(d.startswith(name) for d in documented))
    )
    assert not missing, f"docs/configuration.md lacks {missing}"


def _all_doc_commands() -> list[DocCommand]:
    return [c for path in DOCS for c in doc_commands(path)]


def test_the_docs_have_commands_to_check() -> None:
    assert len(_all_doc_commands()) > 30


@pytest.mark.parametrize("command", _all_doc_commands(), ids=lambda c: f"{c.path.name}:{c.line}")
def test_every_doc_command_parses(command: DocCommand) -> None:
    path, problems = check(cli, command.args)
    assert not problems, f"{command.where()}\n  " + "\n  ".join(problems)
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, f"{command.where()}\n{result.output}"


# The parser itself: a check that passes everything would make the test above worthless.


def test_a_wrong_option_and_subcommand_and_choice_are_named() -> None:
    assert check(cli, ("sink", "--no-such-option"))[1] == [
        "`flywheel sink` has no option --no-such-option"
    ]
    assert "no subcommand 'lst'" in check(cli, ("models", "lst"))[1][0]
    assert "'tabby' is not one of" in check(cli, ("demo", "--loop", "tabby"))[1][0]
    assert check(cli, ("--log-level", "info", "models", "show", "3", "--json"))[0] == [
        "models",
        "show",
    ]


def test_shell_syntax_is_split_as_a_shell_would(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text(
        "```sh\n"
        "FOO=1 flywheel sink --once \\\n"
        "    --topics rewards   # a comment --not-an-option\n"
        'echo "select 1" | flywheel query - > out.csv && flywheel models show <version>\n'
        "X=$(flywheel models list --json) ; python -m flywheel doctor\n"
        "```\n"
        "```console\n"
        "$ flywheel stack status\n"
        "flywheel output line --not-checked\n"
        "```\n"
        "```text\n"
        "flywheel --not-a-shell-block\n"
        "```\n"
    )
    commands = [(c.line, c.args) for c in doc_commands(doc)]
    assert commands == [
        (2, ("sink", "--once", "--topics", "rewards")),
        (4, ("query", "-")),
        (4, ("models", "show", "PLACEHOLDER")),
        (5, ("models", "list", "--json")),
        (5, ("doctor",)),
        (8, ("stack", "status")),
    ]
    assert next(iter(shell_lines(doc))) == (
        2,
        "FOO=1 flywheel sink --once      --topics rewards   # a comment --not-an-option",
    )
    assert list(simple_commands("flywheel sink 2>&1 | tee log")) == [
        ["flywheel", "sink"],
        ["tee", "log"],
    ]
