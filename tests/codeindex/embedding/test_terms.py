"""Lexical terms and the embedder's tokenizer split identifiers the same way."""

from __future__ import annotations

from codeindex.embedding.tokenizer import train_code_tokenizer
from codeindex.terms import code_terms
from tests.codeindex.embedding.tiny import CORPUS


def test_code_terms_split_identifiers_and_drop_stopwords() -> None:
    assert code_terms("def getHTTPResponse(user_name): return the parse_v2(x)") == [
        "def", "get", "http", "response", "user", "name", "return", "parse", "v2",
    ]  # fmt: skip
    assert code_terms("Get the user's name") == ["get", "user", "name"]


def test_the_tokenizer_sees_a_query_and_an_identifier_alike() -> None:
    tokenizer = train_code_tokenizer(CORPUS, 320)
    ids = tokenizer("getUserName", add_special_tokens=False)["input_ids"]
    assert ids == tokenizer("get user_name", add_special_tokens=False)["input_ids"]
    assert ids == tokenizer("GET  USER\n  NAME", add_special_tokens=False)["input_ids"]
