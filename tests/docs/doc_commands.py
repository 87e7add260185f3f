"""The `flywheel` commands written in the docs' shell blocks, and a check of each against the CLI.

A doc line is split as a shell would (quotes, comments, `\\` continuations, pipes, `&&`, `;`,
`&`, `$(...)`, redirections, `VAR=value` prefixes); each simple command that runs `flywheel`
(or `python -m flywheel`) is resolved through click's command tree without running anything:
the subcommand path must exist, every `--option` must be one of that command's parameters, and
a literal value of a `click.Choice` option must be one of its choices. Placeholders such as
`<id>` or `$VAR` stand for any value.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

SHELL_LANGS = frozenset({"sh", "bash", "console", "shell"})
_FENCE = re.compile(r"^\s*```\s*([\w-]*)")
_PLACEHOLDER = re.compile(r"<[A-Za-z][\w.-]*>")
_SEPARATORS = frozenset({"|", "||", "&", "&&", ";", "(", ")", "`"})
_REDIRECTS = frozenset({">", ">>", "<", "<<", "2>", "2>>", "&>", ">&", "2>&1"})
_FD_REDIRECT = re.compile(r"(?<=\s)\d+(?=[<>])")  # the `2` of `2>&1`: not an argument
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = "PLACEHOLDER"


@dataclass(frozen=True)
class DocCommand:
    """One `flywheel` invocation in a doc: where it is, and its arguments after `flywheel`."""

    path: Path
    line: int
    text: str
    args: tuple[str, ...]

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.text.strip()}"


def shell_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(first line number, command text) of every command in the file's shell blocks, with `\\`
    continuations and multi-line quoted strings joined; in a `console` block only the `$ ` lines
    (the rest is output)."""
    lang: str | None = None
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        fence = _FENCE.match(raw)
        if fence:
            lang = None if lang is not None else fence.group(1).lower()
            pending = None
            continue
        if lang not in SHELL_LANGS:
            continue
        line = raw.rstrip()
        if pending is None:
            if lang == "console":
                if not line.lstrip().startswith("$ "):
                    continue
                line = line.lstrip()[2:]
            pending = (number, "")
        start, text = pending
        if line.endswith("\\"):
            pending = (start, text + line[:-1] + " ")
            continue
        if not _quotes_closed(text + line):  # a quoted string spans lines, as in a shell
            pending = (start, text + line + "\n")
            continue
        pending = None
        yield start, text + line


def _quotes_closed(text: str) -> bool:
    try:
        _tokens(text)
    except ValueError:  # shlex: "No closing quotation"
        return False
    return True


def _tokens(text: str) -> list[str]:
    text = _FD_REDIRECT.sub(" ", _PLACEHOLDER.sub(PLACEHOLDER, text))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    return list(lexer)  # `$(` arrives as a word ending in "$" and the separator "("


def simple_commands(text: str) -> Iterator[list[str]]:
    """The simple commands in one shell line: split at pipes, lists and subshells, without
    redirections and their targets, and without leading `VAR=value` assignments or `env`."""
    words: list[str] = []
    tokens = iter(_tokens(text))
    for token in tokens:
        if token in _SEPARATORS:
            if words:
                yield words
            words = []
        elif token in _REDIRECTS or re.fullmatch(r"\d?[<>]+&?\d?", token):
            next(tokens, None)  # the redirection's target
        elif not words and (_ASSIGNMENT.match(token) or token == "env"):
            continue
        else:
            words.append(token)
    if words:
        yield words


def flywheel_args(words: list[str]) -> tuple[str, ...] | None:
    """The arguments after `flywheel` / `.venv/bin/flywheel` / `python -m flywheel`, or None
    when the command runs something else."""
    if words[0] == "flywheel" or words[0].endswith("/flywheel"):
        return tuple(words[1:])
    if re.fullmatch(r"(.*/)?python3?", words[0]) and words[1:3] == ["-m", "flywheel"]:
        return tuple(words[3:])
    return None


def doc_commands(path: Path) -> Iterator[DocCommand]:
    for line, text in shell_lines(path):
        for words in simple_commands(text):
            args = flywheel_args(words)
            if args is not None:
                yield DocCommand(path, line, text, args)


def _is_placeholder(value: str) -> bool:
    return PLACEHOLDER in value or "$" in value or "..." in value


def _option(command: click.Command, name: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    if name in ("-h", "--help"):
        return click.Option(["--help"], is_flag=True)
    return None


def check(root: click.Group, args: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Resolves `args` against `root`: (the subcommand path, the problems found)."""
    command: click.Command = root
    ctx = click.Context(root, info_name="flywheel", resilient_parsing=True)
    path: list[str] = []
    problems: list[str] = []
    rest = list(args)
    while rest:
        token = rest.pop(0)
        if token == "--":
            break
        if token.startswith("-") and token != "-":
            name, eq, value = token.partition("=")
            param = _option(command, name)
            if param is None:
                problems.append(f"`flywheel {' '.join(path)}` has no option {name}")
                continue
            if param.is_flag or param.count:
                continue
            values = [value] if eq else [rest.pop(0) for _ in range(param.nargs) if rest]
            if isinstance(param.type, click.Choice):
                choices = [str(c) for c in param.type.choices]
                for v in values:
                    if not _is_placeholder(v) and v not in choices:
                        problems.append(f"{name} {v!r} is not one of {choices}")
            continue
        if isinstance(command, click.Group):
            sub = command.get_command(ctx, token)
            if sub is None:
                problems.append(f"`flywheel {' '.join(path)}` has no subcommand {token!r}")
                break
            path.append(token)
            command = sub
            ctx = click.Context(sub, parent=ctx, info_name=token, resilient_parsing=True)
        # else: a positional argument of the leaf command
    return path, problems
