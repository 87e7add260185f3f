"""The generator's vocabulary: repository layouts (templates), bug kinds, and the words that
make instances differ — function and parameter names, and the phrase each operation's docstring
uses, so a function says in words what it should do ("Reverse it, then upper-case it.").

The held-out split is by construction: :data:`EVAL_TEMPLATES` and :data:`EVAL_BUGS` are never
drawn for training (``eval_extra`` measures generalisation to them); ``eval`` holds out unseen
instances of the training templates and bug kinds by content hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from environments.program_synthesis import OPERATIONS


@dataclass(frozen=True)
class Module:
    """A source module of a layout and the source modules it imports (besides ``ops``)."""

    name: str
    imports: tuple[str, ...] = ()


@dataclass(frozen=True)
class Template:
    """A layout: modules in dependency order, the last one under test (``test_<last>.py``).
    ``kind`` fixes the kind of value (``str``, ``list``, ``int``); empty = drawn per instance."""

    name: str
    modules: tuple[Module, ...]
    kind: str = ""

    @property
    def top(self) -> str:
        return self.modules[-1].name

    @property
    def multi_file(self) -> bool:
        return len(self.modules) > 1


TRAIN_TEMPLATES: Mapping[str, Template] = {
    t.name: t
    for t in (
        Template("strings", (Module("text"),), "str"),
        Template("lists", (Module("seqs"),), "list"),
        Template("numbers", (Module("calc"),), "int"),  # not numbers.py: that shadows the stdlib
        Template("app-helpers", (Module("helpers"), Module("app", ("helpers",)))),
        Template(
            "pipeline", (Module("steps"), Module("stages", ("steps",)), Module("flow", ("stages",)))
        ),
    )
}
# Eval-only layouts: other names, and a structure training never shows (two imported modules).
EVAL_TEMPLATES: Mapping[str, Template] = {
    t.name: t
    for t in (
        Template("core-service", (Module("core"), Module("service", ("core",)))),
        Template(
            "fan-in", (Module("clean"), Module("shape"), Module("report", ("clean", "shape")))
        ),
    )
}
TEMPLATES: Mapping[str, Template] = {**TRAIN_TEMPLATES, **EVAL_TEMPLATES}

TRAIN_BUGS = ("wrong-op", "missing-op", "stub")
EVAL_BUGS = ("extra-op",)

# What each operation does, in the words of a docstring ("Reverse it, then upper-case it.").
PHRASES: Mapping[str, str] = {
    "reverse": "reverse it",
    "upper": "upper-case it",
    "lower": "lower-case it",
    "swapcase": "swap its case",
    "double": "repeat it twice",
    "sort_chars": "sort its characters",
    "dedupe": "drop repeated characters",
    "drop_vowels": "drop its vowels",
    "rotate": "move the first character to the end",
    "first3": "keep the first three characters",
    "rev_list": "reverse it",
    "sort_list": "sort it",
    "inc_each": "add one to each item",
    "double_each": "double each item",
    "drop_neg": "drop the negative items",
    "unique": "drop repeated items",
    "square_each": "square each item",
    "tail": "drop the first item",
    "inc": "add one",
    "dec": "subtract one",
    "twice": "double it",
    "square": "square it",
    "negate": "negate it",
    "halve": "halve it",
}
if set(PHRASES) != {op for ops in OPERATIONS.values() for op in ops}:
    raise RuntimeError("every operation needs a docstring phrase")  # a new op in OPERATIONS

# Function names are verb_noun; nouns and parameter names follow the kind of value.
VERBS = ("make", "build", "fix", "clean", "shape", "get", "prep", "tidy", "pack", "mark")
NOUNS: Mapping[str, tuple[str, ...]] = {
    "str": ("name", "tag", "word", "label", "title", "code", "key", "text"),
    "list": ("scores", "items", "values", "row", "batch", "stack", "marks", "ids"),
    "int": ("count", "total", "level", "score", "size", "step", "rank", "offset"),
}
PARAMS: Mapping[str, tuple[str, ...]] = {
    "str": ("s", "text", "word"),
    "list": ("xs", "items", "values"),
    "int": ("n", "k", "num"),
}
