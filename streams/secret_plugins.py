"""detect-secrets' default plugins behind cheap gates, and the span type both detectors yield.

Run on every line, the plugins cost ~260 µs per 5 lines of code, so each runs only on lines
passing a gate that every secret it can report passes too (`_GATES`, `_entropy_gate`); a gate
that fails on a whole text fails on each of its lines, so `gates_passing(text)` picks the plugin
groups worth trying at all. `streams.redaction` merges these spans with its explicit patterns'.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.filters import heuristic
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin

DETECT_SECRETS_MAX_LINE = 10_000  # longer lines get the explicit patterns only (linear time)


@dataclass(frozen=True, order=True)
class Span:
    start: int
    end: int
    rank: int  # the lower names a union of overlapping spans: token > assignment > detect-secrets
    kind: str


def is_templated(value: str) -> bool:
    """`${X}`, `$X`, `{x}`, `<your key>`, `%s`, `%(x)s`, `%X%`, `{{ x }}`: references."""
    return "${" in value or "{{" in value or _TEMPLATE.fullmatch(value) is not None


_TEMPLATE = re.compile(r"\$\w+|\{[\w.\[\]'\"]*\}|<[^<>]*>|%(?:\([\w.]+\))?[sdr]|%\w+%")


def is_stand_in(value: str) -> bool:
    """`"********"`, `"[QUESTION]"`, `"private.key"`, `"YOUR_API_KEY"`: not a secret itself."""
    lowered = value.lower()
    return (
        is_templated(value)
        or set(value) <= set("*x•.#-_ ")
        or _STAND_IN.fullmatch(value) is not None
        or any(word in lowered for word in ("your", "example", "placeholder", "changeme"))
    )


_STAND_IN = re.compile(
    r"\[[A-Z_]+\]|[\w./\-]+\.(?:key|pem|p12|pfx|jks|crt|cer|der|json|ya?ml|txt|env)"
    r"|(?i:password|passwd|pass|pwd|secret|token|api_?key)|(?i:my|test)[_\-][a-z_\-]+"
)


# --- detect-secrets ----------------------------------------------------------------------------

_DETECT_SECRETS_RANK = 2
# detect-secrets' KeywordDetector: one of its keywords, and a quote (its patterns for unknown
# file types require a quoted value).
_KEYWORD_GATE = re.compile(
    r"(?:api|auth|service|account|db|database|priv|private|client)_?key|pass|pwd|secret|contrase"
)
# Cloudant, IBM and SoftLayer plugins: a key-ish word and a value of 24 to 64 characters.
_LONG_RUN = re.compile(r"[A-Za-z0-9_\-]{24}")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{10,}")
_TOKEN_MARKER = re.compile(r"eyJ|_authToken|AccountKey|xox|PRIVATE KEY|PuTTY|AKC|AP[\dA-F]")
_ASSIGNMENT_GATE_WORD = re.compile(r"key|p(?:w|ass)|token|cloudant|softlayer")


def _keyword_gate(line: str, lowered: str) -> bool:
    return (
        ('"' in line or "'" in line or "`" in line)
        and any(word in lowered for word in ("key", "pass", "pwd", "secret", "contrase"))
        and _KEYWORD_GATE.search(lowered) is not None
    )


def _assignment_gate(line: str, lowered: str) -> bool:
    return _ASSIGNMENT_GATE_WORD.search(lowered) is not None and _LONG_RUN.search(line) is not None


def _token_gate(line: str, lowered: str) -> bool:
    """A marker, or a run of 10+ letters and digits mixed: every token these plugins match."""
    if _TOKEN_MARKER.search(line) is not None:
        return True
    # A run of ASCII letters and digits is mixed unless it is all digits or all letters.
    return any(not run.isdigit() and not run.isalpha() for run in _ALNUM_RUN.findall(line))


def _url_credentials_gate(line: str, lowered: str) -> bool:
    return "://" in line and "@" in line


def _entropy_gate(plugin: HighEntropyStringsPlugin) -> Callable[[str, str], bool]:
    """A quote, then a run of the plugin's charset long enough to hold more than
    2**entropy_limit distinct characters: `_keep` drops every value with fewer."""
    least = math.floor(2**plugin.entropy_limit) + 1
    run = re.compile(f"[\"'][{re.escape(plugin.charset)}]{{{least},}}")
    return lambda line, lowered: run.search(line) is not None


def _never(line: str, lowered: str) -> bool:
    return False


def _always(line: str, lowered: str) -> bool:
    return True


# Plugin class -> a cheap test every line it can report on passes. A plugin missing here (one a
# newer detect-secrets adds) runs on every line.
_ASSIGNMENT_PLUGINS = "Cloudant IbmCloudIam IbmCosHmac Softlayer"
_FORMAT_PLUGINS = (
    "Artifactory AWSKey AzureStorageKey DiscordBotToken GitHubToken GitLabToken "
    "JwtToken Mailchimp Npm OpenAI PypiToken SendGrid Slack SquareOAuth Stripe "
    "TelegramBotToken TwilioKey"
)
_GATES: dict[str, Callable[[str, str], bool]] = {
    "KeywordDetector": _keyword_gate,
    **{f"{name}Detector": _assignment_gate for name in _ASSIGNMENT_PLUGINS.split()},
    **{f"{name}Detector": _token_gate for name in _FORMAT_PLUGINS.split()},
    "BasicAuthDetector": _url_credentials_gate,
    "PrivateKeyDetector": _never,  # reports the BEGIN marker only; `_RULES` redact the key
    "IPPublicDetector": _never,  # an IP holds no letter: the default filters drop every finding
}
_IMAGE_BASE64_PREFIXES = ("iVBORw0KGgo", "/9j/", "R0lGOD", "UklGR", "PHN2Zy", "AAABAA", "Qk0")
_SRI_HASH = re.compile(r"(?:sha(?:1|256|384|512)|md5)-")
_HASH_CONTEXT = re.compile(
    r"(?i:sha|md5|hash|digest|checksum|commit|etag|integrity|rev|oid|fromhex|fingerprint|crc)"
    r"|(?<![A-Za-z])(?:id|ID|Id)(?![a-z])"
)
_ALPHABET_RUNS = tuple(
    alphabet[i : i + 8]
    for alphabet in ("abcdefghijklmnopqrstuvwxyz", "0123456789")
    for i in range(len(alphabet) - 7)
)


_Gated = tuple[Callable[[str, str], bool], tuple[tuple[BasePlugin, str], ...]]


@cache
def _gated_plugins() -> tuple[_Gated, ...]:
    """detect-secrets' default plugin set, instantiated once (~20 ms, on first use) and grouped
    by gate, each plugin with the slug of its secret type."""
    groups: dict[Callable[[str, str], bool], list[tuple[BasePlugin, str]]] = {}
    classes: list[type[BasePlugin]] = list(get_mapping_from_secret_type_to_class().values())
    for cls in classes:
        plugin = cls()
        gate = _GATES.get(cls.__name__, _always)
        if isinstance(plugin, HighEntropyStringsPlugin):
            gate = _entropy_gate(plugin)
        groups.setdefault(gate, []).append((plugin, _slug(str(cls.secret_type))))
    return tuple((gate, tuple(plugins)) for gate, plugins in groups.items())


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_") or "secret"


def _keep(plugin: BasePlugin, value: str, line: str) -> bool:
    """detect-secrets' default heuristic filters, plus false positives common in code."""
    if isinstance(plugin, HighEntropyStringsPlugin):
        # Entropy is at most log2(distinct symbols): most strings are dismissed without it.
        if 2**plugin.entropy_limit >= len(set(value)):
            return False
        if plugin.calculate_shannon_entropy(value) <= plugin.entropy_limit:
            return False
        if value.startswith(_IMAGE_BASE64_PREFIXES) or len(value) > 512:
            return False  # an inline image or a fixture blob, not a credential
        if not any(c.isdigit() for c in value):
            return False  # `"ProcessTelemetryEventsHandler"`: random tokens hold digits
        lowered = value.lower()
        if any(run in lowered for run in _ALPHABET_RUNS):
            return False  # `"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"`
        if _SRI_HASH.match(value) or _HASH_CONTEXT.search(line[: line.find(value)]):
            return False  # `expected_sha256 = "e3b0…"`, `"integrity": "sha512-…"`, `id="65…"`
    if (
        len(value) < 3
        or is_stand_in(value)
        or heuristic.is_sequential_string(value)
        or heuristic.is_potential_uuid(value)
        or heuristic.is_templated_secret(value)
        or heuristic.is_prefixed_with_dollar_sign(value)
        or heuristic.is_not_alphanumeric_string(value)
        or heuristic.is_likely_id_string(value, line, plugin)
    ):
        return False
    # `secret = get_secret()`; detect-secrets applies this to whole lines, which would also drop
    # well-formed tokens on a line with a call: keep it to the keyword and entropy plugins.
    return isinstance(plugin, RegexBasedDetector) or not heuristic.is_indirect_reference(line)


def gates_passing(text: str) -> tuple[_Gated, ...]:
    """The plugin groups whose gate passes on the whole text. Every gate tests for something a
    line contains (a word, a marker, a run of characters), so one that fails on the whole text
    fails on each of its lines: the other groups need not be tried line by line."""
    lowered = text.lower()
    return tuple(group for group in _gated_plugins() if group[0](text, lowered))


def ungated_plugins() -> tuple[_Gated, ...]:
    plugins = tuple(p for gate, group in _gated_plugins() if gate is not _never for p in group)
    return ((_always, plugins),)


def detect_secrets_spans(text: str, groups: tuple[_Gated, ...]) -> Iterator[Span]:
    offset = 0
    for line in text.splitlines(keepends=True):
        if len(line) <= DETECT_SECRETS_MAX_LINE:
            yield from _line_spans(line, offset, groups)
        offset += len(line)


def _line_spans(line: str, offset: int, groups: tuple[_Gated, ...]) -> Iterator[Span]:
    lowered = line.lower()
    for gate, plugins in groups:
        if not gate(line, lowered):
            continue
        for plugin, kind in plugins:
            for raw in plugin.analyze_string(line):
                value = raw.strip(" \t\"'=:")  # some plugins report the delimiters around a token
                if not value or not _keep(plugin, value, line):
                    continue
                start = line.find(value)
                while start >= 0:
                    end = start + len(value)
                    yield Span(offset + start, offset + end, _DETECT_SECRETS_RANK, kind)
                    start = line.find(value, end)
