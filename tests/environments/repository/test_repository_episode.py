"""Repository episodes end to end on a tiny hand-written repository, in the real sandbox: the
tools through ``step``, run_tests against hostile code (hangs, writes outside, sockets, forks,
state left for a later run), hidden scoring that a forged claim cannot pass and whose tests the
code cannot read, limits, and what the model writes that is no valid call."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.base import Task
from environments.episodes import TRUNCATION_MARKER, Episode, EpisodeLimits, Step
from environments.isolation import require_isolation
from environments.repository.episode import RepoEpisode
from environments.repository.spec import HiddenTest, RepoSpec
from environments.sandbox import SandboxLimits
from policies.agent_chat import ParsedTurn, ToolCall, parse_tool_call

# The wall limit far above the CPU limit: on 2 busy cores a run may get a fraction of a core, and
# a hang must still reach its 1 s of CPU (its reason: "CPU time") before the wall deadline, as
# every normal run must end before it. No test here waits for the wall.
FAST = SandboxLimits(cpu_s=1, wall_s=30.0)
OPS = "def upper(s):\n    return s.upper()\n\n\ndef reverse(s):\n    return s[::-1]\n"
TEXT = (
    "from ops import reverse, upper\n\n\n"
    'def shout(s):\n    """Reverse s, then upper-case it."""\n    return reverse(s)\n'
)
FIXED = TEXT.replace("return reverse(s)", "return upper(reverse(s))")
TESTS = (
    "from text import shout\n\n\n"
    "def test_shout():\n"
    "    assert shout('abc') == 'CBA', f\"shout('abc') == 'CBA' (got {shout('abc')!r})\"\n\n\n"
    "def test_empty():\n    assert shout('') == ''\n\n\n"
    "def test_plain():\n    assert shout('a') == 'A'\n"
)
HIDDEN = (HiddenTest("text", "shout", ("xy",), "'YX'"), HiddenTest("text", "shout", ("",), "''"))


def _spec(
    text: str = TEXT, tests: str = TESTS, hidden: tuple[HiddenTest, ...] = HIDDEN
) -> RepoSpec:
    files = {"ops.py": OPS, "text.py": text, "test_text.py": tests}
    return RepoSpec("single", ("missing-op",), 1, files, hidden, {"text.py": FIXED}, "test_text.py")


def _episode(spec: RepoSpec, limits: EpisodeLimits | None = None) -> RepoEpisode:
    task = Task(spec.instance_id, "repository", spec.level, spec.to_json())
    episode = RepoEpisode(task, spec, limits or EpisodeLimits(max_turns=20), FAST)
    episode.reset()
    return episode


@pytest.fixture
def episode() -> Iterator[RepoEpisode]:
    opened = _episode(_spec())
    yield opened
    opened.close()


def _call(episode: RepoEpisode, name: str, **arguments: object) -> Step:
    return episode.step(ParsedTurn("", ToolCall(name, arguments)))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


def test_this_machine_isolates_the_repositories_code() -> None:
    assert require_isolation().available


def test_an_expert_episode_fixes_the_bug_and_scores_full(episode: RepoEpisode) -> None:
    assert isinstance(episode, Episode)
    assert "test_text.py" in episode.reset() and "'YX'" not in episode.reset()
    first = _call(episode, "run_tests")
    assert first.observation == (
        "FAILED test_shout: shout('abc') == 'CBA' (got 'cba')\n"  # the assertion's message
        "FAILED test_plain: assert shout('a') == 'A'\n"  # none: the failing line
        "2 failed, 1 passed"
    )
    assert (first.done, first.reward, first.outcome.status, first.outcome.tool) == (
        False, 0.0, "ok", "run_tests")  # fmt: skip
    assert _call(episode, "read_file", path="text.py").observation == TEXT
    edited = _call(episode, "edit", path="text.py", old="return reverse(s)",
                   new="return upper(reverse(s))")  # fmt: skip
    assert (edited.observation, edited.outcome.status) == ("edited text.py at line 6", "ok")
    assert (
        _call(episode, "run_tests", selector="test_text.py::test_shout").observation == "1 passed"
    )
    assert _call(episode, "run_tests", selector="test_text.py").observation == "3 passed"
    done = _call(episode, "submit")
    assert done.done and done.ended == "submitted" and done.score is not None
    assert dict(done.score.components) == {"tests": 1.0, "full_pass": 0.5}
    assert (done.score.tests_passed, done.score.status, done.reward) == (2, "ok", 1.5)
    assert not episode.root.exists()  # scoring removed the copy
    after = _call(episode, "read_file", path="text.py")
    assert after.done and "ended" in after.observation and after.reward == 0.0
    episode.close()  # idempotent


def test_the_unfixed_copy_scores_the_fraction_it_gets_right(episode: RepoEpisode) -> None:
    step = episode.finish("max_tokens")
    assert step.done and step.ended == "max_tokens" and step.score is not None
    assert dict(step.score.components) == {"tests": 0.5, "full_pass": 0.0}  # '' passes
    assert episode.finish("closed") is step


def test_a_selector_that_names_nothing_is_an_error_observation(episode: RepoEpisode) -> None:
    for selector, said in (("test_text.py::test_nope", "its tests: test_shout, test_empty"),
                           ("nope.py", "no such file"), ("ops.py", "no test functions"),
                           ("../test_text.py", "leaves the repository")):  # fmt: skip
        step = _call(episode, "run_tests", selector=selector)
        assert (step.outcome.status, step.done) == ("error", False), step
        assert said in step.observation


def test_a_huge_read_is_truncated_with_the_marker() -> None:
    spec = _spec()
    spec = RepoSpec(spec.template, spec.bugs, 1, {**spec.files, "big.txt": "x" * 50_000},
                    spec.hidden, spec.fixed, spec.test_file)  # fmt: skip
    episode = _episode(spec, EpisodeLimits(observation_chars=480, max_turns=20))
    try:
        step = _call(episode, "read_file", path="big.txt")
        assert step.observation == "x" * 480 + TRUNCATION_MARKER.format(hidden=50_000 - 480)
        assert (step.outcome.truncated, step.outcome.observation_bytes) == (True, 50_000)
    finally:
        episode.close()


def test_path_escapes_through_step_are_error_observations(episode: RepoEpisode) -> None:
    (episode.root / "link.py").symlink_to("/etc/passwd")
    for path in ("../../etc/passwd", "/etc/passwd", "link.py"):
        step = _call(episode, "read_file", path=path)
        assert step.outcome.status == "error" and "root:" not in step.observation


HOSTILE = {  # name -> (text.py with the hostile shout, what the observation says)
    "hang": ("def shout(s):\n    while True:\n        pass\n", "timeout: CPU time"),
    "write outside": ("def shout(s):\n    open('{canary}/pwned', 'w').write('x')\n", "open"),
    "socket": ("import socket\ndef shout(s):\n    socket.create_connection(('127.0.0.1', 9092))\n",
               "refused: socket"),
    "fork": ("import os\ndef shout(s):\n    os.fork()\n", "refused: os.fork"),
    # the audit hook's closure rewritten (as in the sandbox's suite): only the OS stands
    "hook disarmed, then write outside": (
        "import gc, os.path\nos.path.realpath = lambda p, *a, **k: '/work'\n"
        "for o in gc.get_objects():\n"
        "    if callable(o) and getattr(o, '__name__', '') == 'hook' and o.__closure__:\n"
        "        for c in o.__closure__:\n"
        "            if isinstance(c.cell_contents, tuple):\n"
        "                c.cell_contents = ('-',)\n"
        "def shout(s):\n    open('{canary}/pwned', 'w').write('x')\n",
        "ERROR test_shout: FileNotFoundError"),
    "exit at import": ("import os\nos._exit(0)\n", "crashed"),
    "memory": ("def shout(s):\n    return 'a' * (10 ** 10)\n", "memory_limit"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_code_under_run_tests_is_an_observation_and_changes_nothing(
    name: str, tmp_path: Path
) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "secret.txt").write_text("host secret")
    code, said = HOSTILE[name]
    episode = _episode(_spec(text=code.replace("{canary}", str(canary))))
    try:
        before = _files(episode.root)
        started = time.monotonic()
        step = _call(episode, "run_tests")
        assert time.monotonic() - started < FAST.wall_s + 5
        assert said in step.observation, step
        assert not step.done and step.outcome.status in ("ok", "error", "timeout")
        assert _files(episode.root) == before  # the copy is unchanged
        assert _files(canary) == {"secret.txt": b"host secret"}
        assert "host secret" not in step.observation
    finally:
        episode.close()


def test_a_run_leaves_nothing_for_the_next_one_nor_in_the_copy() -> None:
    tests = TESTS + (
        "\n\ndef test_tamper():\n    import os\n"
        "    assert not os.path.exists('left.txt'), 'state from an earlier run'\n"
        "    open('left.txt', 'w').write('x')\n"
        "    open('text.py', 'w').write('def shout(s):\\n    return s\\n')\n"
    )
    episode = _episode(_spec(tests=tests))
    try:
        before = _files(episode.root)
        first = _call(episode, "run_tests", selector="test_text.py::test_tamper")
        second = _call(episode, "run_tests", selector="test_text.py::test_tamper")
        assert first.observation == second.observation == "1 passed"
        assert _files(episode.root) == before
    finally:
        episode.close()


def test_a_forged_verdict_cannot_pass_the_hidden_tests() -> None:
    forged = ('{"outputs": ["\'YX\'", "\'\'"], "errors": [null, null], "define_error": null, '
              '"refused": null, "limit": null}')  # fmt: skip
    text = (
        f"print('2 passed')\nopen('.verdict', 'a').write('\\n' + {forged!r} + '\\n')\n"
        "def shout(s):\n    raise ValueError('no')\n"
    )
    episode = _episode(_spec(text=text))
    try:
        step = _call(episode, "submit")
        assert step.score is not None and step.score.tests_passed == 0 and step.reward == 0.0
        assert step.score.status == "runtime_error" and "ValueError" in step.score.reason
    finally:
        episode.close()


def test_a_malformed_verdict_scores_as_a_crash() -> None:
    text = "import os\nopen('.verdict', 'a').write('\\n{\"passed\": 2}\\n')\nos._exit(0)\n"
    episode = _episode(_spec(text=text))
    try:
        step = episode.finish("max_turns")
        assert step.score is not None and (step.score.status, step.reward) == ("crashed", 0.0)
    finally:
        episode.close()


def test_the_hidden_tests_cannot_be_read_from_the_copy() -> None:
    secret = f"flywheel-hidden-{uuid.uuid4().hex}"
    text = (
        "import os, sys\n"
        "def shout(s):\n"
        f"    needle = {secret[:16]!r}\n"
        "    for folder, _, files in os.walk('/'):\n"
        "        if folder.startswith(('/usr', '/sys')):\n"
        "            continue\n"
        "        for name in files:\n"
        "            try:\n"
        "                data = open(os.path.join(folder, name), errors='replace').read()\n"
        "            except Exception:\n"
        "                continue\n"
        "            at = data.find(needle)\n"
        "            if at >= 0:\n"
        "                return data[at:at + 48]\n"
        "    return repr(sys.argv) + str(os.environ)\n"
    )
    hidden = (HiddenTest("text", "shout", ("x",), repr(secret)),)
    episode = _episode(_spec(text=text, hidden=hidden))
    try:
        assert all(secret not in c.decode(errors="replace") for c in _files(episode.root).values())
        step = episode.finish("max_turns")
        assert step.score is not None and step.score.tests_passed == 0
        assert step.score.status == "ok"  # it ran and found nothing
    finally:
        episode.close()


def test_a_hidden_test_that_hangs_scores_zero_with_the_timeout() -> None:
    episode = _episode(_spec(text="def shout(s):\n    while True:\n        pass\n"))
    try:
        step = episode.finish("max_turns")
        assert step.score is not None and (step.score.status, step.reward) == ("timeout", 0.0)
    finally:
        episode.close()


def test_max_turns_ends_the_episode_with_its_score() -> None:
    episode = _episode(_spec(), EpisodeLimits(max_turns=2))
    try:
        assert not _call(episode, "read_file", path="ops.py").done
        step = _call(episode, "read_file", path="ops.py")
        assert (step.done, step.ended, step.outcome.turn) == (True, "max_turns", 2)
        assert step.score is not None and step.reward == step.score.reward == 0.5
    finally:
        episode.close()


def test_wall_time_ends_the_episode_without_running_the_call() -> None:
    episode = _episode(_spec(), EpisodeLimits(wall_s=0.0))
    try:
        time.sleep(0.01)
        step = _call(episode, "edit", path="text.py", old="return reverse(s)",
                     new="return upper(reverse(s))")  # fmt: skip
        assert (step.done, step.ended) == (True, "wall_time") and "wall time" in step.observation
        assert step.score is not None and step.score.tests_passed == 1  # the edit never ran
    finally:
        episode.close()


@pytest.mark.parametrize(
    ("turn", "status", "said"),
    [
        ("I think the bug is in text.py", "malformed", "error: no tool call"),
        ('<tool_call>{"name": "edit", </tool_call>', "malformed", "not JSON"),
        ('<tool_call>{"name":"rm_rf","arguments":{}}</tool_call>', "unknown_tool",
         "tools: read_file, search, edit, run_tests, submit"),
        ('<tool_call>{"name":"read_file","arguments":{}}</tool_call>', "bad_arguments",
         "needs 'path'"),
        ('<tool_call>{"name":"edit","arguments":{"path":"text.py","old":1,"new":""}}</tool_call>',
         "bad_arguments", "'old' must be a string"),
        ('<tool_call>{"name":"submit","arguments":{"now":true}}</tool_call>', "bad_arguments",
         "submit takes no arguments"),
    ],
)  # fmt: skip
def test_what_is_no_valid_call_is_an_observation(
    episode: RepoEpisode, turn: str, status: str, said: str
) -> None:
    step = episode.step(parse_tool_call(turn))
    assert (step.outcome.status, step.done, step.reward) == (status, False, 0.0)
    assert step.observation.startswith("error: ") and said in step.observation
    assert step.outcome.turn == 1
