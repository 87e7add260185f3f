"""Running a generated repository in this process — for the generator's own code only.

The generator checks every instance it makes (the buggy files fail tests, the fixed files pass
them all) and computes the hidden tests' expected values by executing the files it just wrote:
trusted text, so no sandbox. Model-written code never comes here; episodes run it in the
sandbox (``environments.repository.test_runner``).

Modules are loaded from the ``files`` mapping by a private importer, never from disk or
``sys.modules``, so two repositories with a ``helpers.py`` never see each other's.
"""

from __future__ import annotations

import builtins
import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

from environments.repository.spec import HiddenTest

FAILED = "<raised>"  # the outcome of a call that raised (never a repr of a value)
Loader = Callable[[str], types.ModuleType]


def load(files: Mapping[str, str]) -> Loader:
    """A loader of ``files``' modules by name (each executed once, on first use; its imports
    resolved within ``files``). Raises whatever executing a module raises."""
    loaded: dict[str, types.ModuleType] = {}

    def module(name: str) -> types.ModuleType:
        if name not in loaded:
            source = files.get(f"{name}.py")
            if source is None:
                raise ImportError(f"no module {name} in the repository")
            loaded[name] = types.ModuleType(name)
            namespace = loaded[name].__dict__
            namespace["__builtins__"] = {**builtins.__dict__, "__import__": importer}
            exec(_compiled(source, f"{name}.py"), namespace)  # noqa: S102  # our own text
        return loaded[name]

    def importer(name: str, *_args: Any, **_kwargs: Any) -> types.ModuleType:
        return module(name)

    return module


@functools.lru_cache(maxsize=4096)
def _compiled(source: str, filename: str) -> types.CodeType:
    return compile(source, filename, "exec")  # ops.py and test files repeat across instances


def call(modules: Loader, module: str, function: str, args: tuple[Any, ...]) -> str:
    """``repr(module.function(*args))`` with ``modules`` (:func:`load`), or :data:`FAILED` if
    anything raised, loading the module included."""
    try:
        return repr(getattr(modules(module), function)(*args))
    except Exception:  # a stub, a NameError of a planted bug: a failed call, not an error
        return FAILED


def failing_visible(files: Mapping[str, str], test_file: str) -> list[str]:
    """The names of ``test_file``'s ``test_*`` functions that fail (all of them when the test
    file itself cannot be loaded)."""
    modules = load(files)
    try:
        tests = modules(test_file.removesuffix(".py")).__dict__
    except Exception:
        return ["<import>"]
    failed = []
    for name, test in tests.items():
        if not name.startswith("test_") or not callable(test):
            continue
        try:
            test()
        except Exception:
            failed.append(name)
    return failed


def failing_hidden(files: Mapping[str, str], hidden: tuple[HiddenTest, ...]) -> int:
    """How many of ``hidden`` the repository ``files`` fails."""
    modules = load(files)
    return sum(call(modules, h.module, h.function, h.args) != h.expected for h in hidden)
