"""bench.agent_failures sorts an episode's edits against the fix's lines: each outcome from a
real generated task, the expert's own calls as the passing case."""

import random

from bench.agent_failures import calls_of, outcome
from environments.repository import expert
from environments.repository.generator import generate
from environments.repository.templates import TEMPLATES
from policies.agent_chat import ToolCall


def test_outcomes_follow_the_edits_old_and_new_lines() -> None:
    spec = generate(random.Random(3), 1, TEMPLATES["strings"], ("wrong-op",))
    want = [(old, new) for _, old, new in expert.changed_lines(spec)]
    (old, new), path = want[0], expert.module_under_test(spec)
    plan = expert.plan(spec)
    assert ToolCall("edit", {"path": path, "old": old, "new": new}) in plan
    assert outcome(True, plan, want) == "passed"
    assert outcome(False, plan, want) == "right-new"  # right lines, tests failed anyway
    assert outcome(False, plan[:2], want) == "no-edit"
    misread = [ToolCall("edit", {"path": path, "old": new, "new": "return x"})]  # the fix as old
    assert outcome(False, misread, want) == "wrong-old"
    composed = [ToolCall("edit", {"path": path, "old": old, "new": "return x"})]
    assert outcome(False, composed, want) == "wrong-new"


def test_calls_are_read_from_openai_messages_with_json_or_dict_arguments() -> None:
    messages = [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "tool_calls": [
            {"function": {"name": "edit", "arguments": '{"path": "a.py", "old": "x", "new": "y"}'}},
        ]},
        {"role": "tool", "content": "edited a.py at line 1"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "submit", "arguments": {}}}]},
    ]  # fmt: skip
    assert calls_of(messages) == [ToolCall("edit", {"path": "a.py", "old": "x", "new": "y"}),
                                  ToolCall("submit")]  # fmt: skip
