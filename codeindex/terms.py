"""The lexical side's tokenisation (BM25): code and queries → lower-case word terms, identifiers
split on snake_case and camelCase, so ``getHTTPResponse`` and "get the HTTP response" share
``get http response``. Stdlib only: the client, which holds the code, runs the lexical ranker
(a server-side term dictionary would be code at rest; docs/index.md), so this module sits
outside ``codeindex.embedding`` (torch). The embedder's tokenizer splits identifiers the same
way (``codeindex/embedding/tokenizer.py``).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*|[0-9]+")
# camelCase and acronym boundaries: fooBar → foo Bar, HTTPResponse → HTTP Response, v2Api → v2 Api
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# English function words that carry no topic; code keywords stay (``return``, ``yield`` say
# something about a function).
# fmt: off
STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "if", "in",
    "into", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were",
    "will", "with", "which", "when", "whether",
))
# fmt: on


def code_terms(text: str) -> list[str]:
    """The terms of ``text`` in order: words and numbers, identifiers split at ``_`` and case
    changes, lower-cased, one-character words and :data:`STOPWORDS` dropped."""
    terms: list[str] = []
    for word in _WORD.findall(text):
        for part in _CAMEL.sub(" ", word).split():
            term = part.lower()
            if len(term) > 1 and term not in STOPWORDS:
                terms.append(term)
    return terms
