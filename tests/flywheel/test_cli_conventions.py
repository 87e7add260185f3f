"""The CLI convention of docs/cli.md, checked over the whole command tree."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from flywheel.cli import cli
from flywheel.options import (
    parse_bytes,
    parse_duration_s,
    parse_topics,
    resolve_topics,
    rewrite_deprecated,
)


def walk(command: click.Command, path: str = "flywheel") -> Iterator[tuple[str, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{path} {name}"
            yield from walk(sub, f"{path} {name}")


COMMANDS = list(walk(cli))


def test_every_option_has_help_and_shows_its_default() -> None:
    missing, no_default = [], []
    for path, command in COMMANDS:
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden or param.name == "version":
                continue
            if not (param.help or "").strip():
                missing.append(f"{path} {param.opts[0]}")
            unset = param.default is None or str(param.default) == "Sentinel.UNSET"  # click 8.3
            has_default = not unset and not param.is_flag and not param.multiple
            if has_default and not param.show_default:
                no_default.append(f"{path} {param.opts[0]}")
    assert not missing, f"options without help: {missing}"
    assert not no_default, f"options whose default is not shown: {no_default}"


def test_every_argument_is_explained_in_its_command_help() -> None:
    unexplained = [
        f"{path} {param.human_readable_name}"
        for path, command in COMMANDS
        for param in command.params
        if isinstance(param, click.Argument)
        and param.human_readable_name not in (command.help or "")
    ]
    assert not unexplained, f"arguments their command's help does not name: {unexplained}"


def test_one_spelling_per_concept() -> None:
    """No command keeps a spelling the convention replaced (docs/cli.md)."""
    replaced = {
        "--topics", "--decode-as", "--app-id", "--dlq-late", "--max-new-tokens",
        "--telemetry-topic", "--completion-topic", "--budget-min", "--timeout-s",
    }  # fmt: skip
    found = [
        f"{path} {opt}"
        for path, command in COMMANDS
        for param in command.params
        for opt in param.opts
        if opt in replaced or (opt.endswith("-s") and isinstance(param.type, click.FloatRange))
    ]
    assert not found, found
    levels = [p for path, c in COMMANDS for p in c.params if "--log-level" in p.opts]
    assert len(levels) == 1, "one --log-level: the global one"


def test_servers_and_their_clients_agree_on_ports() -> None:
    from flywheel.commands import agent_users, features, gateway, index, index_server, serve

    ports = {
        "serve": serve.DEFAULT_PORT,
        "index serve": index_server.DEFAULT_PORT,
        "features serve": features.DEFAULT_PORT,
        "gateway serve": next(
            p.default
            for p in gateway.serve.params
            if p.name == "port"  # type: ignore[attr-defined]
        ),
    }
    assert len(set(ports.values())) == len(ports), ports
    url = next(p.default for p in agent_users.agent_users.params if p.name == "url")
    assert url == f"http://127.0.0.1:{serve.DEFAULT_PORT}"
    get_url = next(p.default for p in features.get.params if p.name == "url")
    assert get_url == f"http://127.0.0.1:{features.DEFAULT_PORT}"
    for command in index.index.commands.values():
        index_url = next((p.default for p in command.params if p.name == "url"), None)
        assert index_url in (None, f"http://127.0.0.1:{index.DEFAULT_PORT}"), command.name


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("2h", 7200), ("7d", 604_800), ("250ms", 0.25), ("1.5", 1.5),
     ("30", 30), (" 2 h ", 7200)],
)  # fmt: skip
def test_durations_take_units_and_bare_seconds(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5 minutes", "m", "-3s", "1e3"])
def test_a_bad_duration_names_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="90s, 5m"):
        parse_duration_s(text)


@pytest.mark.parametrize(
    ("text", "size"), [("128MiB", 128 * 2**20), ("1GB", 10**9), ("4096", 4096), ("1.5kib", 1536)]
)
def test_sizes_take_units_and_bare_bytes(text: str, size: int) -> None:
    assert parse_bytes(text) == size


def test_a_duration_option_refuses_a_bad_value_with_a_usage_error() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["doctor", "--timeout", "soon"])
    assert result.exit_code == 2 and "90s, 5m" in result.output


def test_topics_are_repeatable_comma_separated_and_take_a_schema() -> None:
    topics = parse_topics(["a,b=rewards", "c", "a=telemetry.edits"])
    assert topics == {"a": "telemetry.edits", "b": "rewards", "c": None}
    assert parse_topics(["x", "x=rewards"]) == {"x": "rewards"}  # a schema given later wins
    with pytest.raises(click.BadParameter):
        parse_topics(["=rewards"])
    with pytest.raises(click.BadParameter):
        parse_topics([","])
    assert resolve_topics({"rewards": None, "mine": "rewards"}, ["rewards"]) == {
        "rewards": "rewards",
        "mine": "rewards",
    }
    with pytest.raises(click.BadParameter, match="--topic other=SCHEMA"):
        resolve_topics({"other": None}, ["rewards"])


def test_old_spellings_are_rewritten_with_one_warning_each() -> None:
    warnings: list[str] = []
    args = ["--app-id", "g", "--telemetry-topic", "a=x", "--telemetry-topic=b=y", "--once-idle-s"]
    assert rewrite_deprecated("process", args, warnings.append) == [
        "--group", "g", "--topic", "a=x", "--topic=b=y", "--once-idle",
    ]  # fmt: skip
    assert len(warnings) == 3 and "use --group" in warnings[0]
    assert rewrite_deprecated("sink", ["--max-rows", "5"], warnings.append) == ["--max-rows", "5"]


def test_an_old_spelling_still_runs_and_warns() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["doctor", "--timeout-s", "soon"])
    assert "doctor --timeout-s is deprecated; use --timeout" in result.output
    assert result.exit_code == 2 and "90s, 5m" in result.output  # parsed as --timeout
