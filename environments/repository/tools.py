"""The repository tools as OpenAI function definitions (the system prompt lists them; the
serving API takes the same). What each does is the episode's (``environments.repository
.episode``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _tool(
    name: str, description: str, required: Sequence[str] = (), **properties: str
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": t} for p, t in properties.items()},
                "required": list(required),
            },
        },
    }


TOOLS: Sequence[Mapping[str, Any]] = (
    _tool("read_file", "Lines start..end of a file (all by default).", ["path"],
          path="string", start="integer", end="integer"),
    _tool("search", "Code chunks matching a query.", ["query"], query="string"),
    _tool("edit", "Replace the exact, unique text old by new in a file.", ["path", "old", "new"],
          path="string", old="string", new="string"),
    _tool("run_tests", "Run the visible tests (a file or test name; all by default).",
          selector="string"),
    _tool("submit", "End the episode: the hidden tests score the code."),
)  # fmt: skip
