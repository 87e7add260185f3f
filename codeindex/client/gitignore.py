""".gitignore patterns, as git reads them (gitignore(5)), for the workspace walk.

Covered: comments, blank lines, trailing spaces, backslash escapes, `!` negation, a trailing `/`
(folders only), a `/` at the start or in the middle (anchored to the file's folder; otherwise
the pattern matches a name at any depth), `*`, `?`, `[...]` classes (`[!...]` or `[^...]`
negated) and `**` (`**/x`, `x/**`, `a/**/b`). Not covered: POSIX classes such as `[[:alpha:]]`.
Within one walk the last matching rule wins, the rules of deeper files after shallower ones; a
path under an ignored folder stays ignored whatever later rules say (the walk never enters it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One pattern line: `regex` matches a path relative to the rule's folder (`basename`:
    the path's last segment only)."""

    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    basename: bool

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        subject = rel.rsplit("/", 1)[-1] if self.basename else rel
        return self.regex.fullmatch(subject) is not None


def _strip_trailing_spaces(line: str) -> str:
    # Trailing spaces go unless escaped ("a\ " keeps one space).
    end = len(line)
    while end > 0 and line[end - 1] == " " and not (end > 1 and line[end - 2] == "\\"):
        end -= 1
    return line[:end]


def parse_rule(line: str) -> Rule | None:
    """The rule of one .gitignore line, or None for a blank line or a comment."""
    line = _strip_trailing_spaces(line.rstrip("\r\n"))
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    dir_only = line.endswith("/") and not line.endswith("\\/")
    if dir_only:
        line = line.rstrip("/")
    if not line:
        return None
    basename = "/" not in line
    if line.startswith("/"):
        line = line[1:]
    return Rule(re.compile(translate(line)), negated, dir_only, basename)


def translate(pattern: str) -> str:
    """The regular expression (for fullmatch) of a slash-stripped pattern."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            whole_segment = (i == 0 or pattern[i - 1] == "/") and (j == n or pattern[j] == "/")
            if j - i == 2 and whole_segment:
                if j == n:  # "x/**": everything inside; "**": everything
                    out.append(".*")
                else:  # "**/": zero or more folders
                    out.append("(?:.*/)?")
                    j += 1
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            parsed = _char_class(pattern, i)
            if parsed is None:
                out.append(re.escape(c))
            else:
                regex, i = parsed
                out.append(regex)
                continue
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _char_class(pattern: str, start: int) -> tuple[str, int] | None:
    """`[...]` at `start` → (its regex, the index after it), or None if it is not closed."""
    i = start + 1
    negated = i < len(pattern) and pattern[i] in "!^"
    if negated:
        i += 1
    members: list[str] = []
    first = True
    while i < len(pattern):
        c = pattern[i]
        if c == "]" and not first:
            body = "".join(members)
            return f"(?!/)[{'^' if negated else ''}{body}]", i + 1
        if c == "\\" and i + 1 < len(pattern):
            members.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            members.append("-" if c == "-" else re.escape(c))
            i += 1
        first = False
    return None


@dataclass(frozen=True)
class IgnoreFile:
    """The rules of one .gitignore and the workspace-relative folder it sits in ("": the root)."""

    base: str
    rules: tuple[Rule, ...]

    @classmethod
    def parse(cls, base: str, text: str) -> IgnoreFile:
        rules = (parse_rule(line) for line in text.splitlines())
        return cls(base, tuple(r for r in rules if r is not None))


@dataclass(frozen=True)
class Ignores:
    """The .gitignore files that apply in one folder of the walk, shallowest first."""

    files: tuple[IgnoreFile, ...] = ()

    def with_file(self, base: str, text: str) -> Ignores:
        added = IgnoreFile.parse(base, text)
        return Ignores((*self.files, added)) if added.rules else self

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether the workspace-relative POSIX path `rel` is ignored (last match wins)."""
        verdict = False
        for file in self.files:
            if file.base:
                if not rel.startswith(file.base + "/"):
                    continue
                sub = rel[len(file.base) + 1 :]
            else:
                sub = rel
            for rule in file.rules:
                if rule.matches(sub, is_dir):
                    verdict = not rule.negated
        return verdict
