"""Deterministic Python-like workspaces for the index's end-to-end test and bench: packages of
modules with imports, constants, functions and classes (docstrings, comments, varied sizes),
and edits that change one definition of a file, as a developer's commit does."""

from __future__ import annotations

import os
import random
from pathlib import Path

_WORDS = (
    "account address agent alert archive audit balance batch bill block branch buffer cache "
    "cart channel checkout client cluster column config contract cookie counter coupon credit "
    "cursor customer dashboard delivery device digest discount document domain draft driver "
    "email endpoint engine entry event export feature field filter folder format gateway graph "
    "group handler header histogram image import index inventory invoice job journal kernel "
    "label ledger limit loader locale lock login mailbox manifest matrix merchant message "
    "metric mirror model module monitor network node notice offset order owner packet page "
    "parcel parser partner payload payment permission pipeline pixel planner plugin policy "
    "pool port price printer profile project prompt query queue quota quote rate reader "
    "receipt record refund region registry release report request resource retry review role "
    "route rule sample schedule schema score search secret segment sensor session shard "
    "shipment signal snapshot socket source span stock storage stream subscription supplier "
    "table tag task tax template tenant ticket timer token topic trace tracker transfer "
    "trigger upload user vault vector vendor version voucher wallet warehouse webhook widget "
    "window worker"
)
_VERBS = (
    "add apply build check clean close compute convert count create decode delete diff encode "
    "ensure fetch filter find flush format group hash load lookup merge migrate normalize "
    "open parse plan publish read rebuild reconcile refresh render resolve retry rotate "
    "sample save scan schedule send sort split store summarize sync update validate verify "
    "write"
)
WORDS, VERBS = _WORDS.split(), _VERBS.split()  # identifiers are made of these
IMPORTS = ("os", "re", "json", "time", "math", "logging", "hashlib", "itertools", "functools")


def _name(rng: random.Random, parts: int = 2) -> str:
    return "_".join([rng.choice(VERBS), *rng.sample(WORDS, parts)])


def _function(rng: random.Random, indent: str = "") -> str:
    name, args = _name(rng), rng.sample(WORDS, rng.randint(1, 3))
    lines = [f"{indent}def {name}({', '.join(args)}):"]
    body = indent + "    "
    what = " ".join(rng.sample(WORDS, 3))
    lines.append(f'{body}"""{rng.choice(VERBS).capitalize()} the {what}."""')
    for _ in range(rng.randint(1, 12)):
        target, source = rng.choice(WORDS), rng.choice(args)
        kind = rng.random()
        if kind < 0.25:
            lines.append(f"{body}# {' '.join(rng.sample(WORDS, rng.randint(3, 8)))}")
        elif kind < 0.5:
            lines.append(f"{body}if {source} is None:")
            lines.append(f"{body}    return {rng.randint(0, 99)}")
        elif kind < 0.75:
            lines.append(f"{body}{target} = {_name(rng, 1)}({source}, {rng.randint(1, 999)})")
        else:
            lines.append(f"{body}for {target} in {source}:")
            lines.append(f"{body}    {source} = {target} + {rng.randint(1, 9)}")
    lines.append(f"{body}return {rng.choice(args)}")
    return "\n".join(lines) + "\n"


def _class(rng: random.Random) -> str:
    name = "".join(w.capitalize() for w in rng.sample(WORDS, 2))
    methods = "\n".join(_function(rng, "    ") for _ in range(rng.randint(1, 4)))
    doc = f'    """A {" ".join(rng.sample(WORDS, 4))}."""\n\n'
    return f"class {name}:\n{doc}{methods}"


def python_module(rng: random.Random) -> str:
    """One module: docstring, imports, constants, then 1..~40 definitions (skewed small)."""
    head = [f'"""{" ".join(rng.sample(WORDS, 6)).capitalize()}."""', ""]
    head += [f"import {m}" for m in sorted(rng.sample(IMPORTS, rng.randint(1, 4)))]
    head += ["", *(f"{rng.choice(WORDS).upper()}_{i} = {rng.randint(0, 10**6)}"
                   for i in range(rng.randint(0, 3)))]  # fmt: skip
    count = min(40, max(1, int(rng.lognormvariate(1.3, 0.8))))
    parts = [_class(rng) if rng.random() < 0.25 else _function(rng) for _ in range(count)]
    return "\n".join(head) + "\n\n\n" + "\n\n".join(parts)


def module_path(rng: random.Random, i: int) -> str:
    """A nested package path, unique by `i`: `pkg/sub/.../name_i.py` (1 to 4 folders)."""
    folders = [f"{rng.choice(WORDS)}{rng.randint(0, 4)}" for _ in range(rng.randint(1, 4))]
    return "/".join([*folders, f"{rng.choice(WORDS)}_{i}.py"])


def write_tree(root: Path, files: int, *, seed: int = 0, mtime_ns: int | None = None) -> list[Path]:
    """`files` modules under `root` (deterministic for a seed); their paths. `mtime_ns` sets
    every file's times (the client's chunk cache re-reads files written within 1 s of its own
    write once: give a past time for a re-sync that reads nothing)."""
    rng = random.Random(seed)
    paths = []
    for i in range(files):
        path = root / module_path(rng, i)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(python_module(rng))
        if mtime_ns is not None:
            os.utime(path, ns=(mtime_ns, mtime_ns))
        paths.append(path)
    return paths


def edit_one_definition(path: Path, rng: random.Random) -> None:
    """Change one line of one definition of `path` (a constant in a statement), so one chunk
    of the file changes and the others keep their hashes; or append a function when the file
    has no such line."""
    lines = path.read_text().split("\n")
    candidates = [i for i, line in enumerate(lines) if line.lstrip().startswith("return ")]
    if candidates:
        i = rng.choice(candidates)
        lines[i] = f"{lines[i]}  # edited {rng.randint(0, 10**9)}"
        path.write_text("\n".join(lines))
    else:
        path.write_text("\n".join(lines) + "\n\n" + _function(rng))
