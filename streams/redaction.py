"""Secret redaction of code text before it leaves the IDE process.

Two detectors feed one list of spans, which are merged and replaced by `[REDACTED:<type>]`:

* explicit patterns for the tokens developers most often paste (cloud keys, VCS and SaaS tokens,
  JWTs, PEM private keys, credentials in URLs, `password = "…"` assignments), run over the whole
  text so they see multi-line blocks and lines of any length. Each runs only when one of its
  literal needles occurs in the text (a C-speed substring test);
* detect-secrets' default plugin set with its default heuristic filters, line by line on lines
  of at most `DETECT_SECRETS_MAX_LINE` characters. Run on every line its plugins cost ~260 µs
  per 5 lines of code, so each plugin runs only on lines passing a cheap gate that every secret
  it can report passes too (`_GATES`, `_entropy_gate`).

A text in which no gate passes and no pattern's needle occurs is returned as it is, unscanned
(most suggestions: ~4 µs instead of ~17 µs).

Invariants: redaction never raises (an internal failure redacts the whole text: fail closed),
it is idempotent (a span touching an existing placeholder is left alone), and `findings` holds
secret types, never values.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from streams.secret_plugins import Span, is_stand_in
from streams.secret_plugins import detect_secrets_spans as _detect_secrets_spans
from streams.secret_plugins import gates_passing as _gates_passing
from streams.secret_plugins import ungated_plugins as _ungated_plugins

_MAX_BLOCK = 8_192  # how far past BEGIN a private key's END line is looked for, in characters

PLACEHOLDER = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
_UNSCANNABLE = "unscannable"


@dataclass(frozen=True)
class Redaction:
    """Redacted text and the types of the secrets removed from it (never their values)."""

    text: str
    findings: tuple[str, ...]


# --- explicit patterns -------------------------------------------------------------------------


def _mixed(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _is_base64_private_key(match: re.Match[str]) -> bool:
    head = match.group(0)[:64]
    try:
        return b"PRIVATE KEY" in base64.b64decode(head[: len(head) // 4 * 4])
    except (binascii.Error, ValueError):
        return False


_NAMES_ITSELF = re.compile(r"(?:^|[_\-])(?:secret|token|key)(?:$|[_\-])")


def _plausible(keyword: str, value: str) -> bool:
    """Is `value` a secret when assigned to a name ending in `keyword`? Bounds false positives."""
    if is_stand_in(value) or PLACEHOLDER.search(value):
        return False
    keyword = keyword.lower()
    if keyword == "pwd" and value[:1] in "/~.":
        return False  # a working directory
    if keyword.startswith("pass") or keyword == "pwd":
        return len(value) >= 3
    if _NAMES_ITSELF.search(value):
        return False  # `secret="secret_value"`, `api_key="test-key-1"`: stand-ins in docs, tests
    # Tokens and keys are long and mixed: `eos_token = "<|endoftext|>"`, `pad_token = "[PAD]"`
    # and `max_token = 512` are not secrets.
    classes = sum(
        any(test(c) for c in value)
        for test in (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum())
    )
    return len(value) >= 8 and not any(c.isspace() for c in value) and classes >= 2


# A name ending in a secret-sounding keyword (`db_password`, `GITHUB_TOKEN`, `apiKey`,
# `config["secret"]`): found in the ASCII-lowered text, then the rest is matched from its end.
_KEYWORD = re.compile(
    r"(?:api|auth|access|secret|private|signing|encryption|client)[_\-]?key|apikey"
    r"|passw(?:or)?d|passphrase|pass|pwd|secret|token|credentials?"
)
_NAME_END = r"(?![\w.\-])[\"'`]?\]?"
_QUOTED_VALUE = re.compile(
    _NAME_END
    + r"(?:[ \t]*:[ \t]*[A-Za-z_][\w\[\], .|]{0,40}?)?"  # `password: str = "…"`
    + r"[ \t]*(?:={1,3}|!==?|:=|=>|:)[ \t]*(?:[rRbBuU]{1,2}|@)?"
    + r"([\"'`])((?:\\.|(?!\1)[^\\\n]){1,512})\1"
)
# .env, shell, YAML, properties, Dockerfile: `KEY=value` / `key: value` alone on its line.
_BARE_VALUE = re.compile(
    _NAME_END + r"([ \t]*)(=|:)([ \t]*)([^\s\"'`;,()\[\]{}]{1,512})(?:[ \t]+#[^\r\n]*)?[ \t]*\r?$",
    re.MULTILINE,
)
_LINE_HEAD = re.compile(r"[ \t]*(?:(?:export|set|ENV|ARG)[ \t]+|-[ \t]+)?[\w.\-]{0,64}")
_NOT_SECRET_WORDS = {"none", "null", "nil", "true", "false", "undefined", "required", "optional"}
_ASSIGNMENT_RANK = 1


def _bare_value(match: re.Match[str], keyword: str) -> bool:
    before, op, after, value = match.group(1, 2, 3, 4)
    if value.lower() in _NOT_SECRET_WORDS or value.endswith(":"):
        return False
    # `KEY=value` is a literal (env, shell); spaced `key = word` is code naming a variable and
    # `key: str` a type annotation, unless the word holds a digit or a symbol.
    env_style = op == "=" and not before and not after
    if not env_style and re.fullmatch(r"[A-Za-z_][A-Za-z_.]*", value):
        return False
    return _plausible(keyword, value)


def _inside_word(text: str, start: int) -> bool:
    return start > 0 and text[start - 1].isalnum() and not text[start].isupper()


# Every `_KEYWORD` match holds one of these.
_ASSIGNMENT_WORDS = ("key", "pass", "pwd", "secret", "token", "credential")


def _assignment_spans(text: str, lowered: str) -> Iterator[Span]:
    if not any(word in lowered for word in _ASSIGNMENT_WORDS):
        return
    line_start = scanned_to = 0  # hits come in order: find each line start once, not per hit
    for hit in _KEYWORD.finditer(lowered):
        line_start = text.rfind("\n", scanned_to, hit.start()) + 1 or line_start
        scanned_to = hit.start()
        keyword = hit.group(0)
        if keyword == "pass" and _inside_word(text, hit.start()):
            continue  # `compass`, `bypass`; but `DB_PASS`, `dbPass`
        kind = "password" if keyword.startswith("pass") or keyword == "pwd" else "secret"
        quoted = _QUOTED_VALUE.match(text, hit.end())
        if quoted is not None and _plausible(keyword, quoted.group(2)):
            yield Span(*quoted.span(2), _ASSIGNMENT_RANK, kind)
            continue
        if not _LINE_HEAD.fullmatch(text, line_start, hit.start()):
            continue  # a bare value counts only at the start of its line, not in an expression
        bare = _BARE_VALUE.match(text, hit.end())
        if bare is not None and _bare_value(bare, keyword):
            yield Span(*bare.span(4), _ASSIGNMENT_RANK, kind)


@dataclass(frozen=True)
class _Rule:
    kind: str
    needles: tuple[str, ...]  # the pattern runs only if one occurs (in the lowered text if lower)
    pattern: re.Pattern[str]
    group: int = 0  # the group holding the secret value
    accept: Callable[[re.Match[str]], bool] | None = None
    lower: bool = False
    rank: int = 0


# No END in sight (a truncated suggestion): up to where the key body ends. A marker with no body
# after it (`if line.startswith("-----BEGIN RSA PRIVATE KEY-----")`) is code, not a key.
_PEM_TEXT = r"[A-Za-z0-9+/=\s\\:,.\-\"'`]"  # base64, headers, quotes and escapes of literals
_BODY = r"|\s*[A-Za-z0-9+/=\\:,\- ]{16}[A-Za-z0-9+/=\s\\:,\-]*)"
_GITLAB_PREFIXES = ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-")
_RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        ("PRIVATE KEY",),
        re.compile(
            r"-{4,5} ?BEGIN ([A-Z0-9 ]*?)PRIVATE KEY((?: BLOCK)?) ?-{4,5}"
            rf"(?:(?:(?!-{{4,5}} ?BEGIN ){_PEM_TEXT}){{0,{_MAX_BLOCK}}}?"
            r"-{4,5} ?END \1PRIVATE KEY\2 ?-{4,5}" + _BODY,
            re.DOTALL,
        ),
    ),
    _Rule(
        "private_key",
        ("PuTTY-User-Key-File-",),
        re.compile(
            rf"PuTTY-User-Key-File-\d+:(?:(?:(?!PuTTY-User-Key-File-).){{0,{_MAX_BLOCK}}}?"
            r"Private-MAC: *[0-9a-fA-F]+" + _BODY,
            re.DOTALL,
        ),
    ),
    _Rule(  # a base64-encoded PEM key, as in kubeconfig's client-key-data
        "private_key",
        ("LS0tLS1CRUdJTi",),
        re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{10,}={0,2}"),
        accept=_is_base64_private_key,
    ),
    _Rule(
        "aws_access_key_id",
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        re.compile(
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])"
        ),
    ),
    _Rule(
        "aws_secret_access_key",
        ("aws", "secret"),
        re.compile(
            r"(?i)(?:aws|secret_?access)[\w.\-]{0,64}?[\"'`]?\]?[ \t]*(?:=|:=|=>|:)[ \t]*"
            r"[\"'`]?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        group=1,
        lower=True,
    ),
    _Rule(
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"),
    ),
    _Rule(
        "gitlab_token",
        _GITLAB_PREFIXES,
        re.compile(rf"(?:{'|'.join(_GITLAB_PREFIXES)})[A-Za-z0-9_\-]{{20,}}"),
    ),
    _Rule("slack_token", ("xox",), re.compile(r"xox[abposr]-[A-Za-z0-9\-]{10,}")),
    _Rule(
        "slack_webhook",
        ("hooks.slack.com",),
        re.compile(r"hooks\.slack\.com/services/([A-Za-z0-9_/]{20,})"),
        group=1,
    ),
    _Rule(
        "stripe_key",
        ("sk_live_", "rk_live_", "sk_test_", "rk_test_"),
        re.compile(r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ),
    _Rule("google_api_key", ("AIza",), re.compile(r"AIza[0-9A-Za-z_\-]{35,}")),
    _Rule("anthropic_api_key", ("sk-ant-",), re.compile(r"sk-ant-[A-Za-z0-9_\-]{20,}")),
    _Rule(
        "openai_api_key",
        ("sk-",),
        re.compile(
            r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}|(?<![\w\-])sk-(?!ant-)[A-Za-z0-9_\-]{20,}"
        ),
        accept=lambda m: _mixed(m.group(0)[3:]),
    ),
    _Rule(
        "jwt",
        ("eyJ",),
        re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),
    ),
    _Rule(  # scheme://user:password@host: the password only
        "url_password",
        ("://",),
        re.compile(r"://[^\s:/?#@\"'`]{0,256}:([^\s/@\"'`]{1,256})@"),
        group=1,
        accept=lambda m: not is_stand_in(m.group(1)),
    ),
    _Rule(
        "bearer_token",
        ("bearer",),
        re.compile(r"(?i)\bbearer[ \t]+([A-Za-z0-9\-._~+/]{16,}=*)"),
        group=1,
        accept=lambda m: _mixed(m.group(1)),
        lower=True,
    ),
)


# A text whose lowered form holds none of these yields no `_rule_spans`: every rule needs one of
# its needles (an ASCII needle in the text is, lowered, in the lowered text) and every
# assignment one of `_ASSIGNMENT_WORDS`. One regex scan instead of ~40 substring tests.
_Trie = dict[str, "_Trie"]  # char -> the words' continuations; "" marks a word's end


def _any_of(words: set[str]) -> re.Pattern[str]:
    """A regex matching where any of `words` starts, as a trie (`a(?:ws|kia)`): re tries a
    flat alternation's branches one by one at every position, ~3x slower."""
    trie: _Trie = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}  # a word ends here: what follows it does not matter

    def pattern(node: _Trie) -> str:
        if "" in node:
            return ""
        branches = [re.escape(char) + pattern(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"

    return re.compile(pattern(trie))


_RULE_TRIGGER = _any_of(
    {needle.lower() for rule in _RULES for needle in rule.needles} | set(_ASSIGNMENT_WORDS)
)


def _ascii_lower(text: str) -> str:
    """`text` lowercased with its length kept, so offsets into it are offsets into `text`."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _rule_spans(text: str, lowered: str) -> Iterator[Span]:
    yield from _assignment_spans(text, lowered)
    for rule in _RULES:
        haystack = lowered if rule.lower else text
        for needle in rule.needles:
            if needle in haystack:
                break
        else:
            continue
        for match in rule.pattern.finditer(text):
            if rule.accept is None or rule.accept(match):
                start, end = match.span(rule.group)
                yield Span(start, end, rule.rank, rule.kind)


# --- merge and replace -------------------------------------------------------------------------


def _merge(spans: list[Span], protected: list[tuple[int, int]]) -> list[Span]:
    """Overlapping spans become their union, named by the best-ranked one. Spans touching an
    existing placeholder are dropped: that is what makes redaction idempotent."""

    starts = [start for start, _ in protected]

    def touches_placeholder(span: Span) -> bool:
        # Placeholders are sorted and disjoint: only the last one starting before the span's
        # end can reach into it.
        i = bisect.bisect_left(starts, span.end) - 1
        return i >= 0 and protected[i][1] > span.start

    merged: list[Span] = []
    for span in sorted(s for s in spans if s.end > s.start and not touches_placeholder(s)):
        last = merged[-1] if merged else None
        if last is not None and span.start < last.end:
            best = last if last.rank <= span.rank else span
            merged[-1] = Span(last.start, max(last.end, span.end), best.rank, best.kind)
        else:
            merged.append(span)
    return merged


def redact_secrets(text: str) -> Redaction:
    """Replace each secret in `text` with `[REDACTED:<type>]`, leaving the rest intact.

    Never raises: if scanning fails on some input, the whole text becomes
    `[REDACTED:unscannable]` (fail closed). Idempotent: redacting the output changes nothing.
    """
    return _redact(text, gated=True)


def _redact(text: str, *, gated: bool) -> Redaction:
    """`redact_secrets`; `gated=False` skips every shortcut (the whole-text check and the
    per-line gates, but for `_never`'s plugins): slow, what tests hold the gates against."""
    try:
        protected = [m.span() for m in PLACEHOLDER.finditer(text)]
        # Placeholders name secret types (`private_key`, `password`): blank them out of what is
        # scanned, so that keyword detectors do not read them as names of secrets next to them.
        scanned = PLACEHOLDER.sub(lambda m: "\0" * len(m.group()), text) if protected else text
        lowered = _ascii_lower(scanned)
        groups = _gates_passing(scanned) if gated else _ungated_plugins()
        if not groups and _RULE_TRIGGER.search(lowered) is None:
            return Redaction(text, ())  # nothing a detector needs is in the text: most code
        spans = [*_rule_spans(scanned, lowered), *_detect_secrets_spans(scanned, groups)]
        kept = _merge(spans, protected)
        parts: list[str] = []
        cursor = 0
        for span in kept:
            parts += [text[cursor : span.start], f"[REDACTED:{span.kind}]"]
            cursor = span.end
        parts.append(text[cursor:])
        return Redaction("".join(parts), tuple(dict.fromkeys(span.kind for span in kept)))
    except Exception:  # a bug or an unexpected input must not let the text out unscanned
        return Redaction(f"[REDACTED:{_UNSCANNABLE}]", (_UNSCANNABLE,))
